"""`./dev bench gateway`: what the REST API adds over NATS, side by side in one run.

Starts `chronicle serve` (no REST API of its own) and `chronicle http` beside it on a fresh
database, seeds a conversation of 100 messages, then alternates the same reads (one
each in turn) and rounds of writes over NATS (the typed client's connection, replies parsed with orjson) and over HTTP
(a keep-alive HTTP/1.1 connection written by hand, so the HTTP client's own cost is as small
as the NATS client's): `GET /api/conversations/:id` vs `conversations.get` p50/p95, and
`POST /api/conversations/:id/messages` vs `conversation.add_message` throughput with a
fixed number in flight. The aim (issue #19): the gateway adds less than 1 ms at p50.

The writes also go through a bare gateway (bench/anchor_servers.py: uvicorn and one plain
ASGI function forwarding to the same service), the ceiling for a Python gateway process on
this machine; each path's group commits are read from the service's metrics endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from uuid import UUID

import orjson
from chronicle_client.connection import ChronicleClient
from chronicle_contract.conversations import AddMessage, GetConversation

from adapters.embedded import free_port
from adapters.store.postgres import PostgresTarget, migrate
from bench.anchors import anchor
from bench.cpu import process_cpu_seconds
from bench.report import Report, over, percentile, show, under
from bench.servers import add_server_options, bench_servers
from bench.service import GROUP_COMMITS, ServiceProcess, metric_values

BARE = "bare gateway"


class RawHttp:
    """One keep-alive HTTP/1.1 connection: a request written, its reply read by Content-Length."""

    def __init__(self, port: int, token: str):
        self.port = port
        self.headers = f"Host: bench\r\nAuthorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    @classmethod
    async def open(cls, port: int, token: str) -> RawHttp:
        connection = cls(port, token)
        connection.reader, connection.writer = await asyncio.open_connection("127.0.0.1", port)
        return connection

    async def send(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        extra = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else ""
        self.writer.write(f"{method} {path} HTTP/1.1\r\n{self.headers}{extra}\r\n".encode() + body)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:  # the server closed an idle connection: open another
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            return await self.send(method, path, body)
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        answer = await self.reader.readexactly(length)
        if status == 408:  # the gateway closed a connection idle past its timeout (it says so first): another
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            return await self.send(method, path, body)
        return status, answer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def timed_reads(send: object, samples: int) -> list[float]:
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        await send()  # type: ignore[operator]
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def throughput(send_one: object, in_flight: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await send_one()  # type: ignore[operator]
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return done / (time.perf_counter() - started)


async def measure(
    nats_url: str, service: ServiceProcess, metrics_port: int, gateways: dict[str, tuple[int, int]],
    args: argparse.Namespace, report: Report,
) -> None:
    """`gateways`: the pid and port of `chronicle http` ("http") and of the bare gateway."""
    token = service.token("reader")
    client = await ChronicleClient.connect(nats_url, token, prefix=service.subject_prefix)
    (gateway_pid, port), (bare_pid, bare_port) = gateways["http"], gateways[BARE]
    https = [await RawHttp.open(port, token) for _ in range(args.in_flight)]
    bares = [await RawHttp.open(bare_port, token) for _ in range(args.in_flight)]
    try:
        conversation = (await client.conversations.start(title="gateway bench")).conversation_id
        for n in range(100):
            await client.conversations.add_message(conversation, "user", f"message {n} " + "lorem ipsum " * 20)
        written = (await client.conversations.start(title="gateway bench writes")).conversation_id
        get = GetConversation(conversation_id=conversation)
        path = f"/api/conversations/{conversation}"  # read: always 100 messages
        write_path = f"/api/conversations/{written}/messages"

        async def nats_get() -> None:
            reply, _ = await client._send(f"query.{get.action}", orjson.dumps({"conversation_id": str(conversation)}))
            orjson.loads(reply)

        async def http_get() -> None:
            status, body = await https[0].send("GET", path)
            assert status == 200, body
            orjson.loads(body)

        def nats_add(conversation_id: UUID) -> object:
            payload = AddMessage(conversation_id=conversation_id, role="user", content="hello").model_dump(mode="json")

            async def add() -> None:
                await client.request("cmd.conversation.add_message", payload)
            return add

        post_body = orjson.dumps({"role": "user", "content": "hello"})

        def http_add(connections: list[RawHttp]) -> object:
            pool: asyncio.Queue[RawHttp] = asyncio.Queue()  # each write takes a connection of its own
            for connection in connections:
                pool.put_nowait(connection)

            async def add() -> None:
                connection = await pool.get()
                try:
                    status, body = await connection.send("POST", write_path, post_body)
                    assert status == 201, (status, body)
                finally:
                    pool.put_nowait(connection)
            return add

        await timed_reads(nats_get, 50)  # warm up both paths (the gateway's user connection, statements)
        await timed_reads(http_get, 50)
        reads: dict[str, list[float]] = {"nats": [], "http": []}
        gateway_cpu = 0.0
        writes: dict[str, list[float]] = {"nats": [], "http": [], BARE: []}
        # CPU per write of each process, by path, one figure a round
        pids = {"service": service.pid, "gateway": gateway_pid, BARE: bare_pid}
        cpu: dict[str, dict[str, list[float]]] = {path: {name: [] for name in pids} for path in writes}
        commits: dict[str, list[float]] = {path: [0.0, 0.0] for path in writes}  # group commits, commands in them

        async def write_round(path: str, send_one: object) -> None:
            scraped = await asyncio.to_thread(metric_values, metrics_port, GROUP_COMMITS)  # (outside the CPU window)
            before, started = {name: process_cpu_seconds(pid) for name, pid in pids.items()}, time.perf_counter()
            writes[path].append(await throughput(send_one, args.in_flight, args.seconds))
            count = max(writes[path][-1] * (time.perf_counter() - started), 1.0)
            for name, pid in pids.items():
                cpu[path][name].append((process_cpu_seconds(pid) - before[name]) * 1e6 / count)
            after = await asyncio.to_thread(metric_values, metrics_port, GROUP_COMMITS)
            commits[path][0] += after[GROUP_COMMITS[0]] - scraped[GROUP_COMMITS[0]]
            commits[path][1] += after[GROUP_COMMITS[1]] - scraped[GROUP_COMMITS[1]]

        for _ in range(args.rounds):
            before = process_cpu_seconds(gateway_pid)
            for _ in range(args.samples):  # one each in turn, so both see the same machine
                reads["nats"] += await timed_reads(nats_get, 1)
                reads["http"] += await timed_reads(http_get, 1)
            gateway_cpu += process_cpu_seconds(gateway_pid) - before
            await write_round("nats", nats_add(written))
            await write_round("http", http_add(https))
            await write_round(BARE, http_add(bares))
    finally:
        for connection in https + bares:
            await connection.close()
        await client.close()
    report.add_percentiles("conversations.get (100 messages) over NATS", reads["nats"])
    report.add_percentiles("GET /api/conversations/:id (100 messages)", reads["http"])
    added = percentile(reads["http"], 50) - percentile(reads["nats"], 50)
    report.add("the gateway's CPU per GET", gateway_cpu * 1000 / len(reads["http"]), "ms")
    report.add("the gateway's addition at p50", added, "ms", under(1.0))
    report.add("add_message over NATS", statistics.median(writes["nats"]), "msg/s",
               note=f"{args.in_flight} in flight, median of {args.rounds} rounds of {args.seconds:.0f} s")
    report.add("POST /api/conversations/:id/messages", statistics.median(writes["http"]), "msg/s")
    report.add("POST as a share of add_message over NATS",
               100 * statistics.median(writes["http"]) / statistics.median(writes["nats"]), "%", over(80.0))
    report.add("the gateway's CPU per POST", statistics.median(cpu["http"]["gateway"]), "µs", note="median of the rounds")
    report.add("POST through the bare gateway", statistics.median(writes[BARE]), "msg/s",
               note=f"{100 * statistics.median(writes[BARE]) / statistics.median(writes['nats']):.1f}% of NATS's: "
                    "the ceiling of a Python gateway process here")
    report.add("the bare gateway's CPU per POST", statistics.median(cpu[BARE][BARE]), "µs")
    report.add("POST: the gateway's rate over the bare gateway's",
               100 * statistics.median(writes["http"]) / statistics.median(writes[BARE]), "%")
    for path, name in (("nats", "add_message over NATS"), ("http", "a POST"), (BARE, "a POST to the bare gateway")):
        report.add(f"the service's CPU per add_message from {name}", statistics.median(cpu[path]["service"]), "µs",
                   note=f"{commits[path][1] / max(commits[path][0], 1):.1f} commands a group commit")


def run(args: argparse.Namespace) -> tuple[Report, Path]:
    report = Report({"suite": "gateway", "samples": args.samples, "rounds": args.rounds, "in_flight": args.in_flight})
    with bench_servers(args.database_url, args.nats_url) as servers, servers.fresh_database(False) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-gateway-") as workdir:
        migrate(PostgresTarget(url))
        metrics_port = free_port()
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir) / "service",
                                       settings={"CHRONICLE_METRICS_PORT": str(metrics_port)})
        (Path(workdir) / "service").mkdir()
        service.start()
        with service.stopped_afterwards():
            port, bare_port = free_port(), free_port()
            gateway = ServiceProcess(url, servers.nats_url, service.subject_prefix, service.jwt_secret,
                                     Path(workdir) / "gateway", settings={"CHRONICLE_HTTP_PORT": str(port)})
            gateway.workdir.mkdir()
            gateway.start(command="http")
            add_message = f"{service.subject_prefix}.cmd.conversation.add_message"
            try:
                with anchor("gateway", servers.nats_url, add_message, str(bare_port)) as bare_pid:
                    gateways = {"http": (gateway.pid, port), BARE: (bare_pid, bare_port)}
                    asyncio.run(measure(servers.nats_url, service, metrics_port, gateways, args, report))
            finally:
                if gateway.process is not None:
                    gateway.process.terminate()
                    gateway.process.wait(30)
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench gateway", description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=500, help="reads per round and path (default 500)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of each write round (default 5)")
    p.add_argument("--in-flight", type=int, default=32, help="writes in flight (default 32)")
    add_server_options(p)
    args = p.parse_args(argv)
    show(*run(args))


if __name__ == "__main__":
    main()
