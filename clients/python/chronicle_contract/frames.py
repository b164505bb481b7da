"""NATS messages whose header section is framed once, not on every publish.

nats-py encodes a header dict anew on each publish: a regular-expression check, a strip,
a translate and two encodes per header, ~3.7 µs a header on a slow machine, and with a
bearer token's 200 characters more than the rest of the publish (a client's request: 56
µs of its CPU with the dict, 40 with the section framed ahead). Most of Chronicle's
headers repeat (a client's token on every request, the feed's stream name on every
event), so their lines are framed once (`header_line`) and joined per message
(`header_section`); `publish` sends such a section as nats-py would send the dict.
tests/unit/test_frames.py holds it to nats-py's own framing, byte for byte.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Coroutine
from typing import Any

from nats import errors
from nats.aio.client import Client
from nats.protocol.command import hpub_cmd

SECTION_START = b"NATS/1.0\r\n"
LINE_END = b"\r\n"
NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name: an HTTP token, as nats-py checks it
NOT_IN_A_SUBJECT = re.compile(r"[ \t\r\n]")
# What publish reaches into: nats-py's own publish does the same with these (2.x).
INTERNALS = ("_send_command", "_flush_pending", "_flush_queue", "_flusher_task", "_pending", "_max_payload",
             "_max_pending_size", "_pending_data_size", "stats")


def header_line(name: str, value: str) -> bytes:
    """One header as nats-py frames it: the name checked (ValueError unless a token), the
    value stripped and a CR or LF in it made a space, so that nothing it holds can end the
    section early and smuggle in another header or message."""
    value = value.strip()
    if "\r" in value or "\n" in value:
        value = value.replace("\r", " ").replace("\n", " ")
    return _named(name) + value.encode() + LINE_END


@functools.lru_cache(maxsize=64)  # (a few names, each checked once)
def _named(name: str) -> bytes:
    name = name.strip()
    if not NAME.fullmatch(name):
        raise ValueError(f"not a header name: {name!r}")
    return name.encode() + b": "


def header_section(*lines: bytes) -> bytes:
    """A message's header section from lines `header_line` framed."""
    return SECTION_START + b"".join(lines) + LINE_END


def headers_of(section: bytes) -> dict[str, str]:
    """The headers a section frames, as a dict (for a client nats-py cannot be reached into)."""
    headers = {}
    for line in section[len(SECTION_START):].split(LINE_END):
        name, separator, value = line.decode().partition(": ")
        if separator:
            headers[name] = value
    return headers


def reachable(nc: Any) -> bool:
    """Whether this connection's client has what `publish` reaches into (nats-py 2.x does),
    asked once per client class."""
    kind = type(nc)
    known = _reachable.get(kind)
    if known is None:
        known = _reachable[kind] = isinstance(nc, Client) and all(hasattr(nc, name) for name in INTERNALS)
    return known


_reachable: dict[type, bool] = {}


async def publish(nc: Client, subject: str, payload: bytes, section: bytes, *, reply: str = "") -> None:
    """`nc.publish(subject, payload, reply=reply, headers=...)` with the header section
    already framed: the same checks, the same bytes on the wire, the same flushing."""
    if not reachable(nc):
        await nc.publish(subject, payload, reply=reply, headers=headers_of(section))
        return
    await nc._send_command(_framed(nc, subject, payload, section, reply))
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()


def publish_nowait(nc: Client, subject: str, payload: bytes, section: bytes, *, reply: str = "") -> None:
    """`publish` from a plain callback, on the connection's event loop: the message joins
    what the connection's flusher writes next, and the flusher is woken. Never waits: past
    the connection's pending limit (where nats-py's publish would wait for the flush) the
    message is kept all the same and the flush already asked for writes it."""
    if not reachable(nc):
        _unawaited(nc.publish(subject, payload, reply=reply, headers=headers_of(section)))
        return
    command = _framed(nc, subject, payload, section, reply)
    nc._pending.append(command)
    nc._pending_data_size += len(command)
    flushes = nc._flush_queue
    if flushes is not None and flushes.empty() and nc.is_connected:  # (reconnecting: sent once connected)
        if nc._flusher_task is None or nc._flusher_task.done():
            _unawaited(nc._flush_pending())  # (it writes inline then)
        else:
            flushes.put_nowait(asyncio.get_running_loop().create_future())  # (the flusher settles it)


def _framed(nc: Client, subject: str, payload: bytes, section: bytes, reply: str) -> bytes:
    """The HPUB command of one message, after nats-py's own checks (its stats counted)."""
    for name in (subject, reply) if reply else (subject,):
        if not name or NOT_IN_A_SUBJECT.search(name):
            raise errors.BadSubjectError
    if nc.is_closed:
        raise errors.ConnectionClosedError
    if nc.is_draining_pubs:
        raise errors.ConnectionDrainingError
    size = len(payload)
    if not nc.is_connected and (nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size):
        raise errors.OutboundBufferLimitError  # (reconnecting, and nothing may be buffered meanwhile)
    if size > nc._max_payload:
        raise errors.MaxPayloadError
    nc.stats["out_msgs"] += 1
    nc.stats["out_bytes"] += size
    return hpub_cmd(subject, reply, section, payload)


_unsettled: set[asyncio.Task[Any]] = set()  # (a task is kept until it is done)


def _unawaited(publishing: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.get_running_loop().create_task(publishing)
    _unsettled.add(task)
    task.add_done_callback(_unsettled.discard)
