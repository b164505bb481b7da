"""`./dev bench edges`: a victim's latency while each attack of issue 29 runs, beside the same
requests idle: at the REST and MCP gateways here, over the bus in bench/edges_bus.py
(Pareto fronts, refused floods, bad connects).

Starts `chronicle serve` on a fresh database with `chronicle http` and `chronicle mcp --http`
beside it. The victim (127.0.0.1) sends sequential requests, each on a new connection (the
case a flood of connections hurts most): `GET /api/conversations` at the REST gateway,
`initialize` at the MCP one. The attackers (127.0.0.2 and up, ten addresses) keep up:
1,100 connections that sent half a request (re-opened as the gateway closes them), or 1,000
distinct tokens of one user each waiting on a far minPosition (sent again as answered).
Prints p50/p99 and the requests not answered 200, per gateway and attack.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

import orjson

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from adapters.store.postgres import PostgresTarget, migrate
from bench import edges_bus
from bench.report import Report, show
from bench.servers import BenchServers, add_server_options, bench_servers
from bench.service import ServiceProcess

HALF_SENT = b"GET /api/conversations HTTP/1.1\r\nHost: x\r\n"
ATTACKERS = 10  # loopback addresses the attack comes from: 127.0.0.2 ...
INITIALIZE = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})


async def exchange(port: int, request: bytes, source: str = "127.0.0.1") -> int:
    """Send one request on a new connection; its status (0 when the connection failed)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return 0
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if length is not None:
            await reader.readexactly(length)
        return int(head.split(b" ", 2)[1])
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        return 0
    finally:
        writer.close()


async def victim(send: Callable[[], Awaitable[int]], samples: int) -> tuple[list[float], int]:
    latencies, failed = [], 0
    for _ in range(samples):
        started = time.perf_counter()
        status = await send()
        latencies.append((time.perf_counter() - started) * 1000)
        failed += status != 200
    return latencies, failed


async def half_sent_forever(port: int, stop: asyncio.Event, n: int) -> None:
    """One attacker connection that never finishes its request, opened again when closed."""
    while not stop.is_set():
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(f"127.0.0.{2 + n % ATTACKERS}", 0))
            writer.write(HALF_SENT)
            await wait_either(reader.read(), stop)  # until the gateway closes it, or the attack ends
            writer.close()
        await asyncio.sleep(0.05)


async def wait_either(work: Awaitable[object], stop: asyncio.Event) -> None:
    done = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({done, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for task in (done, stopped):
        task.cancel()
    if done.done() and not done.cancelled():
        done.exception()  # (retrieved: a reset connection is part of the attack)


async def far_position_forever(port: int, token: str, stop: asyncio.Event, n: int) -> None:
    """One of a user's many tokens, asking again and again for a position the log never reaches."""
    request = (f"GET /api/conversations?minPosition=999999999999 HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {token}\r\n\r\n").encode()
    while not stop.is_set():
        await wait_either(exchange(port, request, f"127.0.0.{2 + n % ATTACKERS}"), stop)
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def attack(workers: Sequence[Callable[[asyncio.Event], Awaitable[None]]], settle: float) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(worker(stop)) for worker in workers]
    await asyncio.sleep(settle)  # (the attack in place: a load, not a negative being proved)
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def measure(service: ServiceProcess, rest: int, mcp: int, args: argparse.Namespace, report: Report) -> None:
    token = service.token("victim")
    authority = TokenAuthority(secret=service.jwt_secret)
    rest_get = f"GET /api/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    mcp_post = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{mcp}\r\nAuthorization: Bearer {token}\r\n"
                f"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(INITIALIZE)}\r\n\r\n").encode() + INITIALIZE
    victims = {"REST GET /api/conversations": lambda: exchange(rest, rest_get),
               "MCP initialize": lambda: exchange(mcp, mcp_post)}
    for name, send in victims.items():
        await victim(send, 20)  # warm: the victim's NATS connection is open
        latencies, failed = await victim(send, args.samples)
        report.add_percentiles(f"{name}, idle", latencies, note=f"{failed} not 200")
        port = rest if name.startswith("REST") else mcp
        flood = [partial(half_sent_forever, port, n=n) for n in range(args.half_sent)]
        async with attack(flood, args.settle):
            latencies, failed = await victim(send, args.samples)
        report.add_percentiles(f"{name}, {args.half_sent:,} half-sent requests", latencies, note=f"{failed} not 200")
    tokens = [authority.issue("mallory", claims={"n": n}) for n in range(args.tokens)]
    waiting = [partial(far_position_forever, rest, tokens[n], n=n) for n in range(args.tokens)]
    async with attack(waiting, args.settle):
        latencies, failed = await victim(victims["REST GET /api/conversations"], args.samples)
    report.add_percentiles(f"REST GET /api/conversations, one user's {args.tokens:,} tokens waiting", latencies,
                           note=f"{failed} not 200")


def run(args: argparse.Namespace) -> tuple[Report, Path]:
    report = Report({"suite": "edges", "samples": args.samples, "half_sent": args.half_sent, "tokens": args.tokens,
                     "attacks": args.attacks, "refused": args.refused, "connects_per_second": args.connects_per_second,
                     "pinned": args.pin})
    with bench_servers(args.database_url, args.nats_url) as servers, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-edges-") as workdir:
        if set(args.attacks) - {"gateways"}:
            edges_bus.run(servers, Path(workdir), args, report)
        if "gateways" in args.attacks:
            gateways(servers, Path(workdir), args, report)
    return report, report.save()


def gateways(servers: BenchServers, workdir: Path, args: argparse.Namespace, report: Report) -> None:
    with servers.fresh_database(False) as url:
        migrate(PostgresTarget(url))
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir) / "service")
        service.workdir.mkdir()
        service.start()
        started: list[ServiceProcess] = []
        with service.stopped_afterwards():
            try:
                rest, mcp = free_port(), free_port()
                for kind, settings in (("http", {"CHRONICLE_HTTP_PORT": str(rest)}),
                                       ("mcp --http", {"CHRONICLE_MCP_PORT": str(mcp)})):
                    gateway = ServiceProcess(url, servers.nats_url, service.subject_prefix, service.jwt_secret,
                                             Path(workdir) / kind.split()[0], settings=settings)
                    gateway.workdir.mkdir()
                    gateway.start(command=kind)
                    started.append(gateway)
                asyncio.run(measure(service, rest, mcp, args, report))
            finally:
                for gateway in started:
                    if gateway.process is not None:
                        gateway.process.kill()
                        gateway.process.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench edges", description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=200, help="victim requests per case (default 200)")
    p.add_argument("--half-sent", type=int, default=1100, help="half-sent connections held open (default 1,100)")
    p.add_argument("--tokens", type=int, default=1000, help="one user's tokens waiting at once (default 1,000)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds an attack runs before measuring (default 3)")
    edges_bus.add_arguments(p)
    add_server_options(p)
    args = p.parse_args(argv)
    show(*run(args))


if __name__ == "__main__":
    main()
