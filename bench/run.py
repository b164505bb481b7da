"""The benchmark's phases in order: seed, start the service, measure over NATS, rebuild, report."""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from adapters.auth import TokenAuthority
from adapters.store.postgres import PostgresTarget, migrate
from bench.cpu import CpuMeter
from bench.lag import ProgressListener
from bench.load import SEARCH_KINDS, Samples, Workload, connect, sequential, sustained
from bench.rebuild import rebuild_each, rebuild_together
from bench.report import Report, over, percentile, under
from bench.seed import Dataset, Scale, seed
from bench.servers import bench_servers
from bench.service import ServiceProcess, positions, wait_for_read_models
from entrypoints.read_models import PROJECTIONS
from entrypoints.settings import Settings

READ_MODELS = [p.name for p in PROJECTIONS]
QUERY_AIM_MS = 20
LAG_AIM_MS = 50  # #33 (#2 asked for 100)
REBUILD_AIM = 20_000  # events/s, each read model (#2)
REBUILD_ALL_AIM = 50_000  # events/s, all of them in one pass (#33)
CATCH_UP_TIMEOUT = 120.0  # seconds for the read models to apply the last write of the load
STARTED = time.perf_counter()


@dataclass(frozen=True)
class Plan:
    scale: Scale
    seed: int
    batch_size: int
    samples: int
    duration: float
    concurrency: int
    max_requests: int
    active: int
    phase_time_limit: float
    build_timeout: float
    database_url: str | None
    nats_url: str | None
    keep: bool
    service_settings: dict[str, str] = field(default_factory=dict)  # CHRONICLE_* variables


def say(message: str) -> None:
    print(f"[bench {time.perf_counter() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


class Every:
    """Lets a progress callback speak at most once per `seconds`."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.last = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last >= self.seconds:
            self.last = now
            return True
        return False


def summary(samples: Samples) -> dict[str, Any]:
    values = samples.latencies_ms
    return {
        "count": len(values),
        "errors": samples.errors,
        "in_flight": samples.in_flight,
        "seconds": round(samples.seconds, 3),
        "per_second": round(samples.throughput, 1),
        **{f"p{p}_ms": round(percentile(values, p), 3) for p in (50, 90, 95, 99)},
        "max_ms": round(max(values), 3) if values else None,
        "mean_ms": round(sum(values) / len(values), 3) if values else None,
    }


# --- phases -------------------------------------------------------------------------------


def seed_history(target: PostgresTarget, plan: Plan, report: Report) -> Dataset:
    say(f"seeding {plan.scale.messages:,} messages in {plan.scale.conversations:,} conversations "
        f"for {plan.scale.users:,} users")
    every = Every(10)

    def progress(done: int, total: int) -> None:
        if every.due():
            say(f"  seeded {done:,} / {total:,} messages")

    dataset = seed(target, plan.scale, seed=plan.seed, batch_size=plan.batch_size, progress=progress)
    say(f"seeded {dataset.events:,} events in {dataset.seconds:.1f} s")
    report.add("seed: events inserted directly", dataset.events_per_second, "events/s",
               note=f"{dataset.events:,} events in {dataset.seconds:.0f} s")
    report.details["dataset"] = {
        "events": dataset.events,
        "messages": dataset.messages,
        "conversations": len(dataset.owner_of),
        "conversations_with_100_messages": len(dataset.long_conversations),
        "users": len(dataset.users),
    }
    return dataset


def build_read_models(
    service: ServiceProcess, target: PostgresTarget, report: Report, timeout: float, names: list[str] = READ_MODELS
) -> None:
    """Start the service on the seeded log and time its read models' build from zero."""
    say("starting chronicle serve; its projections build the read models from the events")
    service.start()
    head, _ = positions(target)
    every = Every(15)

    def progress(current: dict[str, int]) -> None:
        if every.due():
            say("  build: " + ", ".join(f"{n} {current.get(n, 0):,}/{head:,}" for n in names))

    reached = wait_for_read_models(target, names, head, since=service.started_at, timeout=timeout,
                                   progress=progress)
    slowest = max(reached.values())
    say(f"read models built in {slowest:.1f} s: " + ", ".join(f"{n} {s:.1f} s" for n, s in reached.items()))
    report.add(f"initial build, {len(names)} read models in parallel", head / slowest, "events/s",
               note=f"{head:,} events in {slowest:.0f} s from process start")
    report.details["initial_build_seconds"] = {n: round(s, 2) for n, s in reached.items()}


async def measure_reads(workload: Workload, plan: Plan, report: Report) -> None:
    reads = {
        "conversations.list": workload.list_conversations,
        "conversations.get (100 messages)": workload.get_long_conversation,
    }
    for name, operation in reads.items():
        say(f"measuring {name}")
        samples = await sequential(name, operation, count=plan.samples, time_limit=plan.phase_time_limit)
        report.add_percentiles(name, samples.latencies_ms, aim_p95=under(QUERY_AIM_MS))
        report.details[name] = summary(samples)

    per_kind = max(plan.samples // len(SEARCH_KINDS), 1)
    searches = []
    for kind in SEARCH_KINDS:
        say(f"measuring conversations.search ({kind})")
        samples = await sequential(f"search ({kind})", partial(workload.search, kind), count=per_kind,
                                   time_limit=plan.phase_time_limit / len(SEARCH_KINDS))
        report.details[f"conversations.search ({kind})"] = summary(samples)
        searches.append(samples)
    everything = [v for s in searches for v in s.latencies_ms]
    report.add_percentiles("conversations.search", everything, aim_p95=under(QUERY_AIM_MS),
                           note=f"{len(SEARCH_KINDS)} query kinds, {per_kind} each")
    for samples in searches:
        report.add(f"  search {samples.name.removeprefix('search ')} p95", percentile(samples.latencies_ms, 95), "ms")


async def measure_one_at_a_time(workload: Workload, plan: Plan, report: Report) -> Samples:
    say("measuring add_message, one in flight")
    one = await sequential("add_message", workload.add_message, count=plan.samples, time_limit=plan.phase_time_limit)
    report.add_percentiles("add_message (one in flight)", one.latencies_ms)
    report.details["add_message (one in flight)"] = summary(one)
    return one


async def measure_sustained(
    workload: Workload, plan: Plan, service: ServiceProcess, database: str, report: Report
) -> Samples:
    say(f"sustained add_message: {plan.concurrency} in flight for {plan.duration:.0f} s")
    meter = CpuMeter(service.pid, database)
    meter.start()
    load = await sustained("add_message sustained", workload.add_message, concurrency=plan.concurrency,
                           duration=plan.duration, max_requests=plan.max_requests)
    cores = meter.stop()
    report.add("add_message sustained throughput", load.throughput, "msg/s",
               note=f"{plan.concurrency} in flight, {len(load.latencies_ms):,} in {load.seconds:.0f} s")
    report.add("  add_message under load p50", percentile(load.latencies_ms, 50), "ms")
    report.add("  add_message under load p99", percentile(load.latencies_ms, 99), "ms")
    report.details["add_message sustained"] = summary(load)
    if cores:
        report.add("  CPU busy under load", cores["machine"], "cores",
                   note=", ".join(f"{name} {cores[name]:.2f}" for name in ("service", "projections", "postgres", "bench")))
        report.details["cpu_cores_under_load"] = cores
    return load


async def measure_writes(
    workload: Workload, plan: Plan, target: PostgresTarget, service: ServiceProcess, report: Report
) -> tuple[Samples, Samples, ProgressListener]:
    """Writes one at a time, then sustained, while a listener records when read models apply them."""
    listener = ProgressListener(target, READ_MODELS)
    await asyncio.to_thread(listener.start)
    try:
        one = await measure_one_at_a_time(workload, plan, report)
        load = await measure_sustained(workload, plan, service, target.params["dbname"], report)
        written = [position for position, _ in one.writes + load.writes]
        if written:
            await asyncio.to_thread(wait_for_read_models, target, READ_MODELS, max(written),
                                    since=time.perf_counter(), timeout=CATCH_UP_TIMEOUT)
    finally:
        listener.stop()
    return one, load, listener


def report_lag(report: Report, listener: ProgressListener, one: Samples, load: Samples) -> None:
    lags, unapplied = listener.lags_ms(load.writes)
    report.add_percentiles("projection lag under load, all read models", lags["all"], aim_p99=under(LAG_AIM_MS),
                           note=f"{len(lags['all']):,} writes")
    for name in READ_MODELS:
        report.add(f"  lag under load p99, {name}", percentile(lags[name], 99), "ms")
    idle, idle_unapplied = listener.lags_ms(one.writes)
    report.add("projection lag, one write at a time p99", percentile(idle["all"], 99), "ms")
    report.details["projection_lag_ms"] = {
        "under_load": {n: {f"p{p}": round(percentile(v, p), 2) for p in (50, 95, 99)} for n, v in lags.items()},
        "one_at_a_time": {n: {f"p{p}": round(percentile(v, p), 2) for p in (50, 95, 99)} for n, v in idle.items()},
        "writes_never_applied": unapplied + idle_unapplied,
    }


async def measure(plan: Plan, service: ServiceProcess, target: PostgresTarget, dataset: Dataset,
                  report: Report) -> None:
    """Every NATS phase, reads first so they see the seeded history unchanged."""
    nc = await connect(service.nats_url)
    try:
        workload = Workload(nc, service.subject_prefix, TokenAuthority(secret=service.jwt_secret), dataset,
                            plan.seed, plan.active)
        await measure_reads(workload, plan, report)
        one, load, listener = await measure_writes(workload, plan, target, service, report)
        report_lag(report, listener, one, load)
    finally:
        await nc.drain()


def rebuild_read_models(target: PostgresTarget, settings: Settings, report: Report) -> None:
    head, _ = positions(target)
    say(f"rebuilding each read model from the first of {head:,} events")
    rebuilt = rebuild_each(target, settings, head)
    for r in rebuilt:
        report.add(f"rebuild {r.name}", r.log_events_per_second, "events/s", over(REBUILD_AIM),
                   note=f"{r.applied:,} applied in {r.seconds:.0f} s")
    total = sum(r.seconds for r in rebuilt)
    report.add("rebuild all, one after another", head / total, "events/s", over(REBUILD_AIM),
               note=f"{total:.0f} s")
    together = rebuild_together(target, settings)
    report.add("rebuild all, one pass", head / together, "events/s", over(REBUILD_ALL_AIM),
               note=f"{together:.0f} s, as `chronicle projections rebuild all`")
    report.details["rebuild"] = [asdict(r) for r in rebuilt]


def configuration(plan: Plan, settings: Settings, postgres: dict[str, str]) -> dict[str, Any]:
    return {
        "plan": asdict(plan),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "postgres": postgres},
        "service_settings": settings.model_dump(
            include={"group_commit_max_batch", "aggregate_cache_size", "projection_batch_size", "query_pool_size",
                     "max_in_flight", "search_language"}
        ),
    }


def run(plan: Plan) -> tuple[Report, Path]:
    """Run every phase against a fresh database; returns the report and where it was saved."""
    settings = Settings.model_construct()  # the service's defaults: the service gets no other settings
    with bench_servers(plan.database_url, plan.nats_url) as servers, \
            servers.fresh_database(plan.keep) as database_url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-service-") as workdir:
        postgres = servers.server_settings()
        report = Report(configuration(plan, settings, postgres))
        target = PostgresTarget(database_url)
        say(f"database {target.describe()}, NATS {servers.nats_url}; Postgres "
            + ", ".join(f"{k}={v}" for k, v in postgres.items()))
        migrate(target)
        dataset = seed_history(target, plan, report)
        # The seeded history would be backfilled into the event feed while this measures;
        # `./dev bench feed` measures the feed's own cost.
        feed_off = {"CHRONICLE_EVENT_FEED": "false", **plan.service_settings}
        service_process = ServiceProcess.fresh(database_url, servers.nats_url, Path(workdir), feed_off)
        with service_process.stopped_afterwards(say) as service:
            build_read_models(service, target, report, plan.build_timeout)
            asyncio.run(measure(plan, service, target, dataset, report))
        rebuild_read_models(target, settings, report)
        failed = sum(v.get("errors", 0) for v in report.details.values() if isinstance(v, dict))
        report.add("failed requests", failed, aim=under(1))
        if plan.keep:
            say(f"kept database: {database_url}")
    return report, report.save()
