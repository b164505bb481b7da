"""`./dev bench feed`: what the event feed costs and how far behind its follower is.

Against a fresh `chronicle serve` with the feed off, on (in its child process), on with a
follower, and on in the service's own event loop (CHRONICLE_FEED_PROCESS=false), in turn and
`--rounds` times: add_message from 8 users with 64 in flight for `--duration` seconds. The
follower (a `feed` token, `client.events.follow`, on the same machine) takes every event as
it is published; its lag is the time from the event's commit timestamp to its arrival.
Prints the medians over the rounds: events/s taken, follower lag p50/p99, and add_message
msg/s in each configuration (the difference is what the feed, and then a follower, cost on
these cores), with the CPU each message cost the service and Postgres (steadier than the
rate on a machine shared with other work). With `--catch-up SECONDS`, first the feed alone:
run in the bench's process over a log written with the feed off, its events/s and CPU per
event at full batches.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nats
import psycopg
from chronicle_client.connection import ChronicleClient
from chronicle_contract.events import events_stream

from adapters.auth import TokenAuthority
from adapters.read_side.event_feed import EventFeed, ensure_feed_stream
from adapters.read_side.tracking import ADD_TRACKING
from adapters.store.postgres import PostgresTarget, migrate
from bench.bus import add_message_rate
from bench.cpu import CpuMeter
from bench.report import Report, percentile, show
from bench.servers import BenchServers, add_server_options, bench_servers
from bench.service import ServiceProcess, add_service_setting_option, service_settings

KINDS = ("off", "on", "followed", "on in the service's loop")
RATE = "add_message msg/s (64 in flight)"


async def measure(service: ServiceProcess, kind: str, duration: float) -> dict[str, float]:
    if kind != "followed":
        return await loaded(service, duration)
    token = TokenAuthority(secret=service.jwt_secret).issue("bench-loader", claims={"roles": ["feed"]})
    follower = await ChronicleClient.connect(service.nats_url, token, prefix=service.subject_prefix)
    lags: list[float] = []

    async def follow() -> None:
        async for event in follower.events.follow(0):
            lags.append((datetime.now(UTC) - event.timestamp).total_seconds() * 1000)

    following = asyncio.create_task(follow())
    began = time.perf_counter()
    figures = await loaded(service, duration)
    seconds = time.perf_counter() - began
    published = len(lags)
    while True:  # then until the follower has the last of them
        await asyncio.sleep(0.2)
        if len(lags) == published:
            break
        published = len(lags)
    following.cancel()
    await follower.close()
    return {
        **figures,
        "events/s taken by the follower": len(lags) / seconds,
        "follower lag p50 ms": percentile(lags, 50),
        "follower lag p99 ms": percentile(lags, 99),
    }


async def loaded(service: ServiceProcess, duration: float) -> dict[str, float]:
    """add_message's rate, and the CPU each message cost the service and Postgres: on cores
    shared with other work the rate follows the machine's load, the CPU per message much less."""
    meter = CpuMeter(service.pid, str(PostgresTarget(service.database_url).params["dbname"]))
    meter.start()
    rate = await add_message_rate(service.nats_url, service, duration)
    cores = meter.stop()
    figures = {"add_message msg/s (64 in flight)": rate}
    for name, label in (("service", "service"), ("projections", "its child processes (projections, feed)"),
                        ("postgres", "postgres")):
        if name in cores and rate:
            figures[f"CPU µs per add_message: {label}"] = cores[name] / rate * 1e6
    return figures


def one_round(kind: str, servers: BenchServers, workdir: Path, duration: float,
              settings: dict[str, str] | None = None) -> dict[str, float]:
    workdir.mkdir(parents=True)
    with servers.fresh_database(False) as url:
        migrate(PostgresTarget(url))
        feed = "false" if kind == "off" else "true"
        in_child = "false" if kind == KINDS[3] else "true"  # (the default: a child process of the service)
        service = ServiceProcess.fresh(url, servers.nats_url, workdir,
                                       {**(settings or {}), "CHRONICLE_EVENT_FEED": feed, "CHRONICLE_FEED_PROCESS": in_child})
        service.start()
        with service.stopped_afterwards():
            return asyncio.run(measure(service, kind, duration))


async def published_from_scratch(url: str, nats_url: str) -> tuple[int, float, float]:
    """The feed (adapters/read_side/event_feed.py) run in this process over the whole log into
    a stream of its own, as a feed that starts behind does: (events, seconds, CPU seconds of
    this process). Its batches are full here (500 events), as in a catch-up."""
    prefix = f"benchfeed{secrets.token_hex(3)}"
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_feed_stream(js, prefix, 600)
    feed = EventFeed(url, nc, js, prefix)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(ADD_TRACKING, (feed.name, 1))
            await feed.resume(conn)
            cpu, began = time.process_time(), time.perf_counter()
            published = 0
            while taken := await feed.relay_batch(conn):
                published += taken
            cpu, seconds = time.process_time() - cpu, time.perf_counter() - began
        held = (await js.stream_info(events_stream(prefix))).state.messages
        if held != published:
            raise RuntimeError(f"the stream holds {held} messages, {published} were published")
        return published, seconds, cpu
    finally:
        await js.delete_stream(events_stream(prefix))
        await nc.close()


def catch_up(servers: BenchServers, workdir: Path, duration: float, report: Report) -> None:
    """add_message with the feed off for `duration` seconds, then the feed over that log, three times."""
    workdir.mkdir(parents=True)
    with servers.fresh_database(False) as url:
        migrate(PostgresTarget(url))
        service = ServiceProcess.fresh(url, servers.nats_url, workdir, {"CHRONICLE_EVENT_FEED": "false"})
        service.start()
        with service.stopped_afterwards():
            asyncio.run(add_message_rate(service.nats_url, service, duration))
        runs = [asyncio.run(published_from_scratch(url, servers.nats_url)) for _ in range(3)]
    events = runs[0][0]
    report.add("feed catch-up: events/s", statistics.median(n / seconds for n, seconds, _ in runs),
               note=f"{events:,} events, 3 runs")
    report.add("feed catch-up: CPU µs per event (the feed's process)",
               statistics.median(cpu / n * 1e6 for n, _, cpu in runs))


def run(rounds: int, duration: float, database_url: str | None, catch_up_seconds: float = 0.0,
        kinds: tuple[str, ...] = KINDS, settings: dict[str, str] | None = None) -> tuple[Report, Path]:
    report = Report({"suite": "feed", "rounds": rounds, "duration": duration, "kinds": list(kinds),
                     "service_settings": settings or {}})
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    with bench_servers(database_url, None) as servers, tempfile.TemporaryDirectory(prefix="chronicle-bench-feed-") as w:
        if catch_up_seconds:
            print("catch-up: writing with the feed off, then the feed over the log", flush=True)
            catch_up(servers, Path(w) / "catch-up", catch_up_seconds, report)
        for n in range(rounds):
            for kind in kinds[n % len(kinds):] + kinds[:n % len(kinds)]:  # each configuration first in turn
                print(f"round {n + 1}/{rounds}: feed {kind}", flush=True)
                results[kind].append(one_round(kind, servers, Path(w) / f"{n}-{kind}", duration, settings))
    off = statistics.median(r[RATE] for r in results["off"]) if rounds and "off" in results else 0.0
    for kind in kinds if rounds else ():
        for metric in results[kind][0]:
            value = statistics.median(r[metric] for r in results[kind])
            per_kind = metric.startswith(("add_message", "CPU"))
            note = f"{(value - off) / off * 100:+.1f}% vs off" if metric == RATE and kind != "off" and off else ""
            report.add(f"{metric}: feed {kind}" if per_kind else metric, value, note=note)
    report.details["rounds"] = results
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench feed", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds of off, on, followed and on in the service's loop (CHRONICLE_FEED_PROCESS=false), rotating (default 3; 0 with --catch-up: that alone)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of add_message load per round (default 10)")
    add_server_options(p, nats=False)
    p.add_argument("--catch-up", type=float, default=0.0, metavar="SECONDS",
                   help="first, SECONDS of add_message with the feed off, then the feed run in this process over "
                        "that log: its events/s and CPU per event at full batches (default 0: skipped)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help=f"the configurations measured, comma-separated (default all: {','.join(KINDS)})")
    add_service_setting_option(p)
    args = p.parse_args(argv)
    kinds = tuple(kind.strip() for kind in args.kinds.split(","))
    if unknown := [kind for kind in kinds if kind not in KINDS]:
        p.error(f"--kinds: unknown {unknown}; known: {', '.join(KINDS)}")
    show(*run(args.rounds, args.duration, args.database_url, args.catch_up, kinds,
              service_settings(args.service_setting)))


if __name__ == "__main__":
    main()
