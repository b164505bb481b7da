"""`./dev bench anchors`: Chronicle beside two anchors, measured side by side in one run.

Starts (a) a bare nats-py responder that answers with a small JSON, the ceiling for a Python
service on this bus; (b) the design card's stack used plainly: eventsourcing's Application on
its Postgres recorder, one save per request, answering over NATS (bench/anchor_servers.py);
(c) `chronicle serve` as `./dev serve` runs it, per-user limits off as for a bulk pipeline.
Then, from one client connection with 100 requests in flight, drives add_message against each
for the same `--duration`, `--rounds` times with each target first in turn. Before that, the
NATS round trip (one request at a time to the bare responder) and Chronicle's conversations.get
(100 messages), list and search one at a time, their p95 reported as multiples of the round
trip's p50. Prints the table with the machine's load average at the start and the end, the
CPU per add_message by process, and Chronicle's group commits during its rounds (from its
metrics endpoint: commands in one, ms each, the share of the time its writer spent in them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import orjson
from chronicle_client.connection import ChronicleClient
from nats.aio.client import Client as NATS

from adapters.embedded import free_port
from adapters.store.postgres import PostgresTarget, migrate
from bench.budget import sampled, shares
from bench.cpu import CpuMeter, milliseconds_each
from bench.load import Samples, sequential, sustained
from bench.report import RESULTS_DIR, Report, over, percentile, show, under
from bench.servers import add_server_options, bench_servers
from bench.service import GROUP_COMMITS, ServiceProcess, add_service_setting_option, metric_values, service_settings

PROFILE = RESULTS_DIR / "anchors-service.pyspy"  # the profiled round's stacks, py-spy's raw (folded) format
TARGETS = ("bare responder", "card stack, plainly", "chronicle")
IN_FLIGHT = 100
CONVERSATIONS = 100
READ_MESSAGES = 100
CONTENT = "a message of the anchors bench"
READ_WORD = "lighthouse"


@contextlib.contextmanager
def anchor(kind: str, nats_url: str, subject: str, *more: str) -> Iterator[int]:
    """One anchor process (bench/anchor_servers.py), stopped on exit; yields its pid."""
    process = subprocess.Popen([sys.executable, "-m", "bench.anchor_servers", kind, nats_url, subject, *more],
                               stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"anchor {kind} did not start (exit {process.poll()})")
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def raw_add_message(nc: NATS, subject: str, conversations: list[str], rng: random.Random) -> Callable[[], Awaitable[int]]:
    async def call() -> int:
        payload = {"conversation_id": rng.choice(conversations), "role": "user", "content": CONTENT}
        reply = await nc.request(subject, orjson.dumps(payload), timeout=30)
        return int(orjson.loads(reply.data)["data"]["position"])
    return call


async def read_figures(client: ChronicleClient, reader: ChronicleClient, samples: int,
                       meter: CpuMeter) -> tuple[dict[str, list[float]], dict[str, float]]:
    """conversations.get of a conversation of 100 messages, list and search, one at a time:
    their latencies, and the service's CPU µs per read (steadier than a latency on a
    machine shared with other work)."""
    started = await client.conversations.start(title="anchors bench, the one read")
    conversation_id = started.conversation_id
    for n in range(READ_MESSAGES):
        await client.conversations.add_message(conversation_id, "user", f"note {n} about the {READ_WORD} and tides")
    while len((await reader.conversations.get(conversation_id)).messages) < READ_MESSAGES:
        await asyncio.sleep(0.05)  # the reader never wrote: wait for the read model to catch up
    limit = 60.0
    reads: dict[str, Callable[[], Awaitable[object]]] = {
        "conversations.get (100 messages)": lambda: reader.conversations.get(conversation_id),
        "conversations.list": lambda: reader.conversations.list(),
        "conversations.search": lambda: reader.conversations.search(READ_WORD),
    }
    latencies, cpu = {}, {}
    for name, read in reads.items():
        for _ in range(20):  # warmed up outside the meter
            await read()
        meter.start()
        done = await sequential(name, read, count=samples, time_limit=limit, warmup=0)
        used = meter.stop()
        latencies[name] = done.latencies_ms
        if used:
            cpu[name] = milliseconds_each(used, done.seconds, len(done.latencies_ms))["service"] * 1000
    return latencies, cpu


@dataclass
class Measured:
    round_trip: list[float]
    reads: dict[str, list[float]]
    read_cpu_us: dict[str, float]  # the service's CPU µs per read, by read
    rates: dict[str, list[float]] = field(default_factory=dict)
    cpu_ms: list[dict[str, float]] = field(default_factory=list)  # per Chronicle round: CPU ms per message
    service_shares: dict[str, float] = field(default_factory=dict)  # the profiled round's service samples
    # per Chronicle round: (seconds, group commits, commands in them, seconds the writer spent on them)
    group_commits: list[tuple[float, float, float, float]] = field(default_factory=list)


async def measure(nats_url: str, service: ServiceProcess, metrics_port: int, subjects: dict[str, str], rounds: int,
                  duration: float, samples: int, profile: Path | None) -> Measured:
    nc = await nats.connect(nats_url, pending_size=64 * 1024 * 1024)
    token = service.token("anchors-bench")
    client = ChronicleClient(nc, token, prefix=service.subject_prefix, timeout=30)
    reader = ChronicleClient(nc, token, prefix=service.subject_prefix, timeout=30)
    rng = random.Random(7)
    try:
        bare = raw_add_message(nc, subjects["bare responder"], [str(uuid.uuid4())], rng)
        round_trip = (await sequential("round trip", bare, count=(samples or 200) * 5, time_limit=60)).latencies_ms
        meter = CpuMeter(service.pid, str(PostgresTarget(service.database_url).params["dbname"]))
        # (no reads for a service without read models: --samples 0)
        reads, read_cpu = await read_figures(client, reader, samples, meter) if samples else ({}, {})
        conversations = [(await client.conversations.start(title="anchors bench")).conversation_id
                         for _ in range(CONVERSATIONS)]

        async def chronicle_add_message() -> int:
            reply = await client.conversations.add_message(rng.choice(conversations), "user", CONTENT)
            return reply.position or 0

        plain_ids = [str(c) for c in conversations]
        operations = {
            "bare responder": bare,
            "card stack, plainly": raw_add_message(nc, subjects["card stack, plainly"], plain_ids, rng),
            "chronicle": chronicle_add_message,
        }
        measured = Measured(round_trip, reads, read_cpu, {target: [] for target in TARGETS})

        async def load(target: str) -> Samples:
            done = await sustained(target, operations[target], concurrency=IN_FLIGHT, duration=duration,
                                   max_requests=10**9)
            if done.errors:
                print(f"  {done.errors} requests failed", flush=True)
            return done

        for n in range(rounds):
            for target in TARGETS[n % 3:] + TARGETS[:n % 3]:
                print(f"round {n + 1}/{rounds}: add_message against the {target}", flush=True)
                if target == "chronicle":  # (scraped outside the CPU meter's window)
                    before = await asyncio.to_thread(metric_values, metrics_port, GROUP_COMMITS)
                meter.start()
                done = await load(target)
                if target == "chronicle":
                    cores = meter.stop()
                    measured.cpu_ms.append(milliseconds_each(cores, done.seconds, len(done.latencies_ms)))
                    after = await asyncio.to_thread(metric_values, metrics_port, GROUP_COMMITS)
                    count, commands, busy = (after[name] - before[name] for name in GROUP_COMMITS)
                    measured.group_commits.append((done.seconds, count, commands, busy))
                measured.rates[target].append(done.throughput)
        if profile is not None:  # one more round against Chronicle, sampled (not counted in the rates)
            print("profiled round: add_message against the chronicle", flush=True)
            with sampled(service.pid, profile, duration) as sampling:
                await load("chronicle")
            if sampling and profile.exists():
                measured.service_shares = shares(profile.read_text())
        return measured
    finally:
        await nc.drain()


def run(rounds: int, duration: float, samples: int, database_url: str | None, profile: bool,
        settings: dict[str, str] | None = None) -> tuple[Report, Path]:
    """`settings`: more CHRONICLE_* variables for the service under test."""
    load_before = os.getloadavg()
    report = Report({"suite": "anchors", "rounds": rounds, "duration": duration, "in_flight": IN_FLIGHT,
                     "service_settings": settings or {}})
    with (bench_servers(database_url, None) as servers,
          tempfile.TemporaryDirectory(prefix="chronicle-bench-anchors-") as workdir,
          servers.fresh_database(False) as card_url,
          servers.fresh_database(False) as chronicle_url):
        migrate(PostgresTarget(chronicle_url))
        metrics_port = free_port()
        service = ServiceProcess.fresh(chronicle_url, servers.nats_url, Path(workdir),
                                       settings={**(settings or {}), "CHRONICLE_METRICS_PORT": str(metrics_port)})
        subjects = {"bare responder": f"anchors.{secrets.token_hex(4)}.bare",
                    "card stack, plainly": f"anchors.{secrets.token_hex(4)}.card"}
        with (anchor("bare", servers.nats_url, subjects["bare responder"]),
              anchor("card", servers.nats_url, subjects["card stack, plainly"], card_url)):
            service.start()
            with service.stopped_afterwards():
                PROFILE.parent.mkdir(parents=True, exist_ok=True)
                measured = asyncio.run(measure(servers.nats_url, service, metrics_port, subjects, rounds, duration,
                                               samples, PROFILE if profile else None))
    load_after = os.getloadavg()
    round_trip, reads, rates = measured.round_trip, measured.reads, measured.rates
    rtt = percentile(round_trip, 50)
    report.add("NATS round trip p50 (bare responder, one in flight)", rtt, "ms")
    report.add("NATS round trip p99", percentile(round_trip, 99), "ms")
    for name, latencies in reads.items():
        p95 = percentile(latencies, 95)
        report.add(f"{name} p50", percentile(latencies, 50), "ms")
        report.add(f"{name} p95", p95, "ms")
        aim = under(5) if name.startswith("conversations.get") else None
        report.add(f"{name} p95 / round trip p50", p95 / rtt, "x", aim)
        if name in measured.read_cpu_us:
            report.add(f"{name}: service CPU per read", measured.read_cpu_us[name], "µs")
    medians = {target: statistics.median(values) for target, values in rates.items()}
    for target in TARGETS:
        spread = "–".join(f"{v:,.0f}" for v in (min(rates[target]), max(rates[target])))
        report.add(f"add_message/s, {IN_FLIGHT} in flight: {target}", medians[target], "msg/s",
                   note=f"rounds {spread}")
    report.add("chronicle / card stack", medians["chronicle"] / medians["card stack, plainly"], "x", over(10))
    report.add("chronicle / bare responder", medians["chronicle"] / medians["bare responder"] * 100, "%", over(50))
    add_group_commits(report, measured)
    add_budget(report, measured)
    report.details.update(rates=rates, cpu_ms=measured.cpu_ms, service_shares=measured.service_shares,
                          group_commits=measured.group_commits,
                          load_before=load_before, load_after=load_after)
    print(f"load average: {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end")
    return report, report.save()


def add_group_commits(report: Report, measured: Measured) -> None:
    """Chronicle's group commits over its add_message rounds (the sums of its rounds): the
    commands one held, how long one took, and the share of the time the writer spent in
    them (the rest it waited for commands: docs/performance.md, "Writes")."""
    seconds, count, commands, busy = (sum(r[n] for r in measured.group_commits) for n in range(4))
    if not count:
        return
    report.add("group commits during add_message: commands in one", commands / count, "",
               note=f"{count / seconds:,.0f} a second, {busy / count * 1000:.2f} ms each")
    report.add("group commits during add_message: the writer's share of the time", busy / seconds * 100, "%")


def add_budget(report: Report, measured: Measured) -> None:
    """CPU ms per add_message by process (the mean over Chronicle's rounds), and the service's
    share split by component when a profiled round ran."""
    if not measured.cpu_ms or not measured.cpu_ms[0]:
        return
    per_message = {name: statistics.mean(r[name] for r in measured.cpu_ms) for name in measured.cpu_ms[0]}
    for name in ("service", "projections", "postgres", "nats", "bench", "machine"):
        report.add(f"CPU per add_message: {name}", per_message[name] * 1000, "µs")
    for component, share in sorted(measured.service_shares.items(), key=lambda item: -item[1]):
        report.add(f"  service: {component}", per_message["service"] * share * 1000, "µs",
                   note=f"{share:.0%} of its samples")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench anchors", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="rounds of the three targets, each first in turn (default 2)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of add_message per target and round (default 10)")
    p.add_argument("--samples", type=int, default=200,
                   help="reads of each kind, one at a time (default 200; 0: none, for a service run without read "
                        "models, e.g. --service-setting run_projections=false)")
    add_server_options(p, nats=False)
    p.add_argument("--profile", action="store_true",
                   help="one more Chronicle round sampled with py-spy: the service's CPU split by component "
                        f"(its stacks kept in {PROFILE.relative_to(RESULTS_DIR.parent.parent)})")
    add_service_setting_option(p)
    args = p.parse_args(argv)
    show(*run(args.rounds, args.duration, args.samples, args.database_url, args.profile,
              service_settings(args.service_setting)))


if __name__ == "__main__":
    main()
