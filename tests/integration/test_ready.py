"""Ready means ready: the moment a start returns (when `chronicle serve` logs `ready`), every
endpoint answers normally on a fresh database, the read models it reads already built."""

from __future__ import annotations

import asyncio
import contextlib
import types
import typing
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit
from uuid import UUID

import nats
import orjson
import pytest
from chronicle_contract.conversations import StartConversation
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import bootstrap
from entrypoints.routes import ROUTES, subject
from tests.conftest import JWT_SECRET, make_settings
from tests.servers import TestServers


def sample(annotation: Any) -> Any:
    """A plausible value of a field's type: enough to get past validation to the work."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return sample(args[0])
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)))
    if origin is Literal:
        return args[0]
    if origin in (list, tuple):
        return [] if origin is list else [sample(a) for a in args]
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return payload(annotation.model_fields)
    return {UUID: str(uuid.uuid4()), str: "hello", int: 1, float: 0.5, bool: True}.get(annotation, "hello")


def payload(fields: dict[str, FieldInfo]) -> dict[str, Any]:
    return {name: sample(info.annotation) for name, info in fields.items() if info.is_required()}


FULL = {  # requests whose samples would stop at validation: given whole, so they reach the work
    "conversation.add_message": {"role": "user", "content": "hello"},
    "job.request": {"content": "Photosynthesis turns light into sugar.", "artifact_type": "summary"},
    "artifact.generate": {"query": "a login form"},
    "conversations.search": {"q": "hello"},
    "artifacts.search": {"q": "hello"},
}


@pytest.mark.timeout(120)
async def test_every_endpoint_answers_at_the_instant_a_start_returns(servers: TestServers, tmp_path: Path) -> None:


    with servers.fresh_database() as url:
        settings = make_settings(url, servers.nats_url, tmp_path)
        chronicle = await bootstrap(settings)
        nc = await nats.connect(chronicle.nats_url)
        try:
            token = TokenAuthority(secret=JWT_SECRET).issue(f"first-{uuid.uuid4().hex[:8]}")
            answers = {}
            for table in ROUTES:  # every kind of request, straight away
                for request_type in (entry.request for entry in table):
                    body = {**payload(request_type.model_fields), **FULL.get(request_type.action, {})}
                    if request_type.action == "conversation.add_message":
                        started = orjson.loads((await nc.request(
                            subject(settings.subject_prefix, StartConversation),
                            b"{}", headers={"Authorization": f"Bearer {token}"}, timeout=10)).data)
                        body["conversation_id"] = started["data"]["conversation_id"]
                    reply = await nc.request(subject(settings.subject_prefix, request_type), orjson.dumps(body),
                                             headers={"Authorization": f"Bearer {token}"}, timeout=10)
                    answers[request_type.action] = orjson.loads(reply.data)
        finally:
            await nc.close()
            await chronicle.stop()
    failed = {action: a["error"] for action, a in answers.items()
              if not a["ok"] and a["error"]["code"] in ("unavailable", "internal")}
    assert failed == {}
    assert len(answers) == sum(len(t) for t in ROUTES)
    worked = {action for action, a in answers.items() if a["ok"]}
    assert {"conversation.add_message", "job.request", "conversations.search", "conversations.list",
            "artifacts.search", "artifact.generate", "hitl.list", "optimizations.list"} <= worked


async def test_a_start_that_outwaits_its_timeout_names_the_read_models_still_built(
    servers: TestServers, tmp_path: Path
) -> None:
    with servers.fresh_database() as url:
        chronicle = await bootstrap(make_settings(url, servers.nats_url, tmp_path, ready_timeout=0.001))
        try:
            assert chronicle.rebuilding and set(chronicle.rebuilding) <= {p.name for p in chronicle.projections}
        finally:
            await chronicle.stop()


@contextlib.asynccontextmanager
async def late_subscriptions(nats_url: str, held: bytes, seconds: float) -> AsyncIterator[str]:
    """A proxy to the NATS server at `nats_url` that holds back, for `seconds`, whatever a
    client writes from its first `SUB` of a subject starting with `held` on (order kept, as
    a slow network or a busy server would); its URL. What a client writes before that SUB,
    a PING included, goes through at once."""
    server = urlsplit(nats_url)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: bool) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                at = data.find(b"SUB " + held) if hold else -1
                if at >= 0:
                    writer.write(data[:at])
                    await writer.drain()
                    await asyncio.sleep(seconds)
                    data = data[at:]
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(server.hostname, server.port)
        await asyncio.gather(pipe(client_reader, server_writer, True), pipe(server_reader, client_writer, False))

    proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield f"nats://127.0.0.1:{proxy.sockets[0].getsockname()[1]}"
    finally:
        proxy.close()


async def test_a_start_returns_once_the_server_has_the_endpoints_subscriptions(
    servers: TestServers, tmp_path: Path
) -> None:
    """Ready means the server routes requests to this instance: with the endpoints'
    subscriptions reaching the server half a second late, the first request sent the
    instant a start returns is answered (nats-py's flush sent its PING ahead of them, and
    that request found no responders: a flaky restart test, seen under load)."""
    with servers.fresh_database() as url:
        settings = make_settings(url, servers.nats_url, tmp_path)
        prefix = settings.subject_prefix
        async with late_subscriptions(servers.nats_url, f"{prefix}.".encode(), 0.5) as slow_url:
            chronicle = await bootstrap(settings.model_copy(update={"nats_url": slow_url}))
            nc = await nats.connect(servers.nats_url)  # (straight to the server, not held back)
            try:
                token = TokenAuthority(secret=JWT_SECRET).issue("early")
                reply = await nc.request(subject(prefix, StartConversation), b"{}",
                                         headers={"Authorization": f"Bearer {token}"}, timeout=10)
                assert orjson.loads(reply.data)["ok"]
            finally:
                await nc.close()
                await chronicle.stop()
