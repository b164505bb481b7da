"""The REST and MCP gateways attacked as a second client would, on loopback: half-sent
requests by the thousand, one user's many tokens, MCP without a token, a stop with a
client attached, a bus that is not there, and docs pages that must load offline.
Attackers bind their own loopback addresses (127.0.0.2 and up), the victim uses 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import httpx
import nats
import orjson
import pytest
from chronicle_contract.bus import signals_prefix
from chronicle_contract.jobs import job_progress
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.clients import UserClients, claimed_expiry
from entrypoints.gateways.http_guard import HttpLimits
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.mcp import streamable_http_app
from entrypoints.gateways.rest import build_app
from tests.conftest import fresh_chronicle
from tests.servers import TestServers
from tests.waiting import eventually

HALF_SENT = b"GET /api/conversations HTTP/1.1\r\nHost: x\r\n"  # and nothing more
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "edges", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

Serve = Callable[..., Awaitable[HttpServer]]


def port_of(server: HttpServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


@pytest.fixture
async def serve(chronicle: Chronicle) -> AsyncIterator[Serve]:
    """`await serve("rest" | "mcp", limits=None, clients=None)`: a gateway of this test's own."""
    started: list[HttpServer] = []

    async def make(kind: str, limits: HttpLimits | None = None, clients: UserClients | None = None) -> HttpServer:
        prefix = chronicle.settings.subject_prefix
        app = (build_app(clients if clients is not None else UserClients(chronicle.nats_url, prefix)) if kind == "rest"
               else streamable_http_app(chronicle.nats_url, prefix))
        server = await HttpServer(app, "127.0.0.1", free_port(), limits).start()
        started.append(server)
        return server

    yield make
    for server in started:
        await server.stop()


@asynccontextmanager
async def sockets(port: int, count: int, addresses: int, first: bytes) -> AsyncIterator[list[asyncio.StreamWriter]]:
    """`count` connections spread over `addresses` loopback addresses from 127.0.0.2, each
    having sent `first`; all closed afterwards."""
    writers: list[asyncio.StreamWriter] = []

    async def one(n: int) -> None:
        with suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(f"127.0.0.{2 + n % addresses}", 0))
            writers.append(writer)
            writer.write(first)
            await writer.drain()

    try:
        for start in range(0, count, 100):  # (the listen backlog is finite: 100 at a time)
            await asyncio.gather(*(one(n) for n in range(start, min(count, start + 100))))
        yield writers
    finally:
        for writer in writers:
            writer.close()


async def timed(request: Awaitable[httpx.Response]) -> tuple[int, float]:
    started = time.perf_counter()
    response = await request
    return response.status_code, time.perf_counter() - started


@pytest.mark.parametrize("kind", ["rest", "mcp"])
async def test_a_thousand_half_sent_requests_leave_others_served(
    kind: str, serve: Serve, authority: TokenAuthority
) -> None:
    """1,100 sockets that sent half a request, from ten addresses (under each one's cap):
    another client's request answers 200 within 1 s while they stay open."""
    server = await serve(kind)
    token = authority.issue(f"victim-{uuid.uuid4().hex[:8]}")
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as victim:

        async def request() -> httpx.Response:
            if kind == "rest":
                return await victim.get("/api/conversations")
            return await victim.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)

        assert (await request()).status_code == 200  # (its NATS connection is open: what is timed is the gateway)
        async with sockets(port_of(server), 1100, 10, HALF_SENT) as held:
            assert len(held) == 1100
            for _ in range(3):
                async with httpx.AsyncClient(base_url=server.url, headers=victim.headers) as fresh:  # a new connection
                    victim = fresh
                    status, seconds = await timed(request())
                assert status == 200 and seconds < 1.0, (status, seconds)


async def test_one_address_is_capped(serve: Serve) -> None:
    server = await serve("rest", HttpLimits(max_per_address=20))
    async with sockets(port_of(server), 20, 1, HALF_SENT) as held:
        assert len(held) == 20
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server), local_addr=("127.0.0.2", 0))
        try:  # the 21st from the same address: answered 429 and closed at once
            assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 429 ")
        finally:
            writer.close()
        async with httpx.AsyncClient(base_url=server.url) as other:  # another address is served
            assert (await other.get("/api/conversations")).status_code == 401


async def test_a_request_not_completed_in_seconds_is_closed(serve: Serve) -> None:
    server = await serve("rest", HttpLimits(header_timeout=1.0, body_timeout=1.0))
    for first, answer in ((b"", b"HTTP/1.1 408 "), (HALF_SENT, b"HTTP/1.1 408 "),
                          (b"POST /api/conversations HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{", b"")):
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
        writer.write(first)
        try:  # read() returns once the server closes the connection
            assert (await asyncio.wait_for(reader.read(), 3)).startswith(answer), first
        finally:
            writer.close()


async def test_one_users_many_tokens_take_no_other_users_place(
    chronicle: Chronicle, serve: Serve, authority: TokenAuthority
) -> None:
    """Mallory's 60 distinct valid tokens, each waiting on a far minPosition, against a
    gateway that holds 50 connections: Alice's connection is not evicted and she is served."""
    clients = UserClients(chronicle.nats_url, chronicle.settings.subject_prefix, max_open=50)
    server = await serve("rest", clients=clients)
    alice = authority.issue(f"alice-{uuid.uuid4().hex[:8]}")
    mallory = f"mallory-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {alice}"}) as web:
        assert (await web.get("/api/conversations")).status_code == 200
        tokens = [authority.issue(mallory, claims={"n": n}) for n in range(60)]
        assert len(set(tokens)) == 60
        writers = []
        try:
            for token in tokens:
                _, writer = await asyncio.open_connection("127.0.0.1", port_of(server), local_addr=("127.0.0.2", 0))
                writer.write(f"GET /api/conversations?minPosition=999999999999 HTTP/1.1\r\nHost: x\r\n"
                             f"Authorization: Bearer {token}\r\n\r\n".encode())
                writers.append(writer)
            # Each is in progress (the gateway answered none of them: they wait on the position).
            await eventually(lambda: len(server.server.server_state.tasks) >= 50, "mallory's requests in progress", 10)
            status, seconds = await timed(web.get("/api/conversations"))
            assert status == 200 and seconds < 1.0, (status, seconds)
        finally:
            for writer in writers:
                writer.close()


async def test_mcp_over_http_answers_nothing_without_a_valid_token(
    serve: Serve, authority: TokenAuthority
) -> None:
    server = await serve("mcp")
    valid = authority.issue(f"mcp-{uuid.uuid4().hex[:8]}")
    forged = TokenAuthority(secret="another-secret-that-is-long-enough-for-hs256!").issue("mcp-someone")
    tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=server.url, headers=MCP_HEADERS) as http:
        for body in (INITIALIZE, tools_list):
            for headers in ({}, {"Authorization": f"Bearer {forged}"}, {"Authorization": "Bearer not-a-jwt"}):
                refused = await http.post("/mcp", json=body, headers=headers)
                assert refused.status_code == 401, (body["method"], headers, refused.text)
            answered = await http.post("/mcp", json=body, headers={"Authorization": f"Bearer {valid}"})
            assert answered.status_code == 200, answered.text


def gateway_environment(chronicle: Chronicle, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    env.update({"CHRONICLE_NATS_URL": chronicle.nats_url, "CHRONICLE_SUBJECT_PREFIX": chronicle.settings.subject_prefix,
                "CHRONICLE_METRICS_PORT": "0", **settings})
    return env


async def test_mcp_over_http_stops_within_seconds_with_a_client_attached(
    chronicle: Chronicle, authority: TokenAuthority
) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "mcp", "--http"], stderr=subprocess.PIPE,
                               env=gateway_environment(chronicle, CHRONICLE_MCP_PORT=str(port)))
    try:
        assert process.stderr is not None
        ready = await asyncio.wait_for(asyncio.to_thread(read_until_ready, process.stderr), 60)
        assert ready
        token = authority.issue(f"mcp-{uuid.uuid4().hex[:8]}")
        headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=60) as http:  # a client attached: the server's event stream open
            async with http.stream("GET", f"http://127.0.0.1:{port}/mcp", headers=headers) as stream:
                assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
                process.send_signal(signal.SIGINT)
                started = time.monotonic()
                code = await asyncio.wait_for(asyncio.to_thread(process.wait), 60)
                assert time.monotonic() - started < 5 and code == 0, (time.monotonic() - started, code)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def read_until_ready(stream: object) -> bool:
    for line in stream:  # type: ignore[attr-defined]
        with suppress(orjson.JSONDecodeError):
            if orjson.loads(line).get("msg") == "ready":
                return True
    return False


async def test_stdio_mcp_with_its_bus_unreachable_answers_a_tool_error_in_seconds(
    chronicle: Chronicle, authority: TokenAuthority
) -> None:
    env = gateway_environment(chronicle, CHRONICLE_NATS_URL=f"nats://127.0.0.1:{free_port()}",  # nothing listens
                              CHRONICLE_TOKEN=authority.issue("stdio-user"))
    server = StdioServerParameters(command=sys.executable, args=["-m", "entrypoints.cli", "mcp"], env=env)
    async with Client(server, read_timeout_seconds=30) as client:
        started = time.monotonic()
        called = await client.call_tool("get_history", {})
        message = called.content[0]
        assert called.is_error and isinstance(message, TextContent) and "unavailable" in message.text
        assert time.monotonic() - started < 5


ASSET = re.compile(rb"""(?:src|href)\s*[=:]\s*["']([^"']+)["']|url\(["']?([^)"']+)""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_serve_their_own_assets(page: str, serve: Serve) -> None:
    server = await serve("rest")
    async with httpx.AsyncClient(base_url=server.url) as http:
        html = await http.get(page)
        assert html.status_code == 200
        assets = {a or b for a, b in ASSET.findall(html.content)} - {b""}
        assert assets, html.text
        for asset in assets:
            assert asset.startswith(b"/") and not asset.startswith(b"//"), asset  # this gateway's own
            fetched = await http.get(asset.decode())
            assert fetched.status_code == 200 and fetched.content, asset


# -- a user's connection outlives the token that opened it ----------------------------------

TOKEN_SECONDS = 4  # short-lived tokens: the bus closes a connection when the token that opened it expires


@pytest.fixture(scope="module")
async def closed(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    """A Chronicle whose embedded NATS requires credentials (the auth callout), without job
    workers (a requested job stays queued: its event stream stays open)."""
    async with fresh_chronicle(
        servers, tmp_path_factory.mktemp("expiring"), None, embedded_nats_auth=True, job_workers=0,
    ) as (chronicle, _):
        yield chronicle


async def sse_events(response: httpx.Response, events: list[tuple[str, dict[str, Any]]]) -> None:
    kind = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, orjson.loads(line[6:])))


async def test_requests_and_a_stream_outlive_the_token_that_opened_the_users_connection(
    closed: Chronicle, authority: TokenAuthority
) -> None:
    """A user sends a fresh 4-second token with each request, four at a time, across the
    first token's expiry (the bus then closes the connection it opened): every request
    answers 200, and an event stream opened on the first connection carries on (a progress
    message published after that expiry arrives on it)."""
    prefix = closed.settings.subject_prefix
    clients = UserClients(closed.nats_url, prefix)
    server = await HttpServer(build_app(clients), "127.0.0.1", free_port()).start()
    user = f"expiring-{uuid.uuid4().hex[:8]}"

    def token(seconds: int = TOKEN_SECONDS) -> dict[str, str]:
        return {"Authorization": f"Bearer {authority.issue(user, ttl_seconds=seconds)}"}

    first = token()
    expires = claimed_expiry(first["Authorization"].removeprefix("Bearer "))
    events: list[tuple[str, dict[str, Any]]] = []
    service = await nats.connect(closed.servers.service_nats_url)  # (publishes the job's progress, as the service)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as web:
            requested = await web.post("/api/jobs", json={"content": "Tulips open in spring.", "artifactType": "summary"},
                                       headers=first)
            assert requested.status_code == 202, requested.text
            job_id = requested.json()["jobId"]
            async with web.stream("GET", f"/api/jobs/{job_id}/events", headers=token(120)) as stream:
                assert stream.status_code == 200, await stream.aread()
                reading = asyncio.ensure_future(sse_events(stream, events))
                await eventually(lambda: events, "the job's state now, first on the stream")
                statuses: list[int] = []
                while time.time() < expires + 1.5:  # (the bus closed the first connection at `expires`)
                    answers = await asyncio.gather(*(web.get("/api/conversations", headers=token()) for _ in range(4)))
                    statuses += [answer.status_code for answer in answers]
                assert set(statuses) == {200}, [s for s in statuses if s != 200]
                assert clients.rolled_over >= 1
                progress = job_progress(signals_prefix(prefix, user), uuid.UUID(job_id))

                def completed() -> bool:
                    return any(kind == "progress" and event["status"] == "completed" for kind, event in events)

                async def published() -> bool:
                    if not completed():
                        await service.publish(progress, orjson.dumps({"job_id": job_id, "status": "completed",
                                                                      "progress": 100}))
                    return completed()

                await eventually(published, "a progress message to reach the stream after the first token expired", 10)
                await asyncio.wait_for(reading, 10)  # the stream ends after the final state
        assert events[0][0] == "job" and events[-2][0] == "progress" and events[-1][0] == "job"
        assert events[-2][1] == {"jobId": job_id, "status": "completed", "progress": 100}
    finally:
        await service.close()
        await server.stop()
        await clients.close()
