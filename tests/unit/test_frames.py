"""A header section framed ahead goes out exactly as nats-py frames the same headers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from chronicle_contract import frames
from nats import errors
from nats.aio.client import Client

TOKEN = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"


async def sent(publish: Any) -> bytes:
    """What a publish on a client that never connected leaves to be written (nats-py keeps
    it, as it does while reconnecting, and writes it once connected)."""
    nc = Client()
    nc._max_pending_size = 2 * 1024 * 1024  # (what connect sets by default)
    await publish(nc)
    return b"".join(nc._pending)


@pytest.mark.parametrize("headers", [
    {"Authorization": TOKEN, "Request-Id": "0123456789abcdef"},
    {"Authorization": TOKEN, "Request-Id": "r-1", "Idempotency-Key": " spaced out "},
    {"Request-Id": "a\r\nInjected: yes\r\n\r\nPUB x 1"},  # (CR and LF become spaces, as nats-py makes them)
    {},
])
async def test_a_framed_section_is_what_nats_py_sends_for_the_same_headers(headers: dict[str, str]) -> None:
    section = frames.header_section(*(frames.header_line(name, value) for name, value in headers.items()))
    framed = await sent(lambda nc: frames.publish(nc, "chronicle.cmd.x", b'{"a": 1}', section, reply="_INBOX.a.1"))
    theirs = await sent(lambda nc: nc.publish("chronicle.cmd.x", b'{"a": 1}', reply="_INBOX.a.1", headers=headers))
    assert framed == theirs
    assert await sent(nowait(lambda nc: frames.publish_nowait(nc, "chronicle.cmd.x", b'{"a": 1}', section,
                                                              reply="_INBOX.a.1"))) == theirs
    assert frames.headers_of(section) == {name: value.strip().replace("\r", " ").replace("\n", " ")
                                          for name, value in headers.items()}


def nowait(publish: Any) -> Any:
    async def published(nc: Client) -> None:
        publish(nc)

    return published


async def test_a_name_that_is_not_a_token_and_a_subject_with_a_space_are_refused() -> None:
    with pytest.raises(ValueError, match="header name"):
        frames.header_line("Bad Name", "v")
    with pytest.raises(errors.BadSubjectError):
        await sent(lambda nc: frames.publish(nc, "a subject", b"", frames.header_section()))
    with pytest.raises(errors.BadSubjectError):
        await sent(lambda nc: frames.publish(nc, "x", b"", frames.header_section(), reply="_INBOX.a\r\nPUB y 0"))
    with pytest.raises(errors.BadSubjectError):
        await sent(nowait(lambda nc: frames.publish_nowait(nc, "x", b"", frames.header_section(), reply="a b")))


async def test_a_payload_over_the_servers_limit_is_refused_as_nats_py_refuses_it() -> None:
    nc = Client()
    nc._max_pending_size, nc._max_payload = 1024, 10
    with pytest.raises(errors.MaxPayloadError):
        await frames.publish(nc, "x", b"x" * 11, frames.header_section())
    with pytest.raises(errors.MaxPayloadError):
        frames.publish_nowait(nc, "x", b"x" * 11, frames.header_section())
    assert nc._pending == []


class OtherClient(Client):
    """A client (another nats-py, say) without what frames reaches into: it is handed the
    headers as a dict, through its own publish."""

    def __init__(self) -> None:
        super().__init__()
        del self._flush_queue
        self.published: list[tuple[str, bytes, str, dict[str, str]]] = []

    async def publish(
        self, subject: str, payload: bytes = b"", reply: str = "", headers: dict[str, str] | None = None
    ) -> None:
        self.published.append((subject, payload, reply, headers or {}))


async def test_a_client_it_cannot_reach_into_gets_the_headers_as_a_dict() -> None:
    other = OtherClient()
    section = frames.header_section(frames.header_line("Request-Id", "r-2"), frames.header_line("K", "v"))
    await frames.publish(other, "x", b"{}", section, reply="_INBOX.b.2")
    assert other.published == [("x", b"{}", "_INBOX.b.2", {"Request-Id": "r-2", "K": "v"})]
    frames.publish_nowait(other, "y", b"[]", section)  # (its publish, awaited by a task of its own)
    await asyncio.sleep(0)
    assert other.published[1:] == [("y", b"[]", "", {"Request-Id": "r-2", "K": "v"})]
