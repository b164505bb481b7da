"""`./dev bench optimization`: trial.record throughput and latency, and optimizations.history time.

Starts `chronicle serve` on a fresh database, then over NATS records trials into one round
per phase, each phase labelled with its mode:
- trial.record, one trial per request: 1 recorder, then 8 concurrent recorders (each its
  own connection, all into one round, as parallel evaluation workers do), then those
  recorders keeping 8 requests outstanding each (the service's capacity rather than its
  round trip);
- trial.record_many, populations of 50 per request: 1 and 8 recorders;
- the client helper's `state.record_trial`, 1 and 8 recorders each making 32 overlapping
  calls (a population evaluated concurrently): overlapping calls leave together as one
  trial.record_many request, each caller still gets its own trial after its commit.
Then it seeds an optimization of 100 rounds x 100 trials and times its full history
(every page, as `client.optimizations.history` fetches them: the first, then the pages
it plans, a few at a time) with the CPU each process spent on it, the first page and
one planned page. Aims (issue 6): over 1,000 trials/s, history under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from chronicle_client.connection import ChronicleClient
from chronicle_client.optimizations import PAGES_IN_FLIGHT, OptimizationState, RoundHandle
from chronicle_contract.optimizations import OptimizationHistory

from adapters.store.postgres import PostgresTarget, migrate
from bench.cpu import CpuMeter, milliseconds_each
from bench.report import Report, over, show, timed_async, under
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess, add_service_setting_option, positions, service_settings, wait_for_read_models

TRIALS_PER_SECOND_AIM = 1_000.0
HISTORY_AIM_MS = 100.0
DEFAULT_PAGE_TRIALS: int = OptimizationHistory.model_fields["max_trials"].default
READ_MODELS = ["optimizations", "lineage"]
PARAMETERS = ("learning_rate", "temperature", "top_p", "dropout", "weight_decay")


@dataclass(frozen=True)
class Plan:
    trials: int = 3_000  # recorded by the lone recorder
    recorders: int = 8
    trials_per_recorder: int = 1_000
    in_flight: int = 8  # per recorder in the last phase; 1 skips it
    batch: int = 50  # trials per trial.record_many request
    helper_in_flight: int = 32  # overlapping state.record_trial calls per recorder; 0 skips them
    rounds: int = 100  # of the optimization whose history is read
    trials_per_round: int = 100
    history_runs: int = 20
    database_url: str | None = None
    nats_url: str | None = None
    keep: bool = False
    service_settings: dict[str, str] = field(default_factory=dict)  # CHRONICLE_* variables


QUICK = {"trials": 300, "trials_per_recorder": 100, "rounds": 20, "trials_per_round": 50, "history_runs": 5}


def trial_fields(rng: random.Random) -> dict[str, Any]:
    """A parameter-search trial: five floats in, a score and three metrics out."""
    candidate = {name: round(rng.uniform(0.0, 1.0), 6) for name in PARAMETERS}
    accuracy = rng.uniform(0.5, 0.95)
    return {
        "candidate": candidate,
        "score": accuracy,
        "metrics": {"accuracy": accuracy, "latency_ms": rng.uniform(20, 400), "cost_usd": rng.uniform(0, 0.02)},
        "extras": {"origin": rng.choice(["fresh", "mutation", "crossover"])},
    }


async def record(client: ChronicleClient, round_id: UUID, count: int, rng: random.Random) -> list[float]:
    """Record `count` trials one after another; each one's latency in ms."""
    latencies = []
    for _ in range(count):
        fields = trial_fields(rng)
        started = time.perf_counter()
        await client.optimizations.record_trial(round_id, **fields)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def record_batches(client: ChronicleClient, round_id: UUID, count: int, batch: int, rng: random.Random) -> list[float]:
    """Record `count` trials `batch` at a time (trial.record_many); each request's latency in ms."""
    latencies = []
    for start in range(0, count, batch):
        trials = [trial_fields(rng) for _ in range(min(batch, count - start))]
        started = time.perf_counter()
        await client.optimizations.record_trials(round_id, trials)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def add_cpu_per_trial(report: Report, label: str, cores: dict[str, float], seconds: float, trials: int) -> None:
    """Where a phase's CPU went, per trial: on two shared cores this is what bounds throughput."""
    if cores:
        per_trial = milliseconds_each(cores, seconds, trials)
        parts = ("service", "projections", "postgres", "nats", "bench")
        report.add(f"{label}: CPU per trial, whole machine", per_trial["machine"], "ms",
                   note=", ".join(f"{name} {per_trial[name]:.2f}" for name in parts))


async def measure_recording(
    clients: list[ChronicleClient], optimization_id: UUID, plan: Plan, report: Report, meter: CpuMeter
) -> None:
    """One round per phase: the lone recorder, the concurrent recorders, then the same
    recorders each with `in_flight` trials outstanding (what the service can take)."""
    rng = random.Random(1)
    lone = clients[0]
    phases = [
        ("trial.record (1 trial per request), 1 recorder, one at a time", 1, 1, plan.trials),
        (f"trial.record (1 trial per request), {plan.recorders} recorders, one at a time each",
         plan.recorders, 1, plan.trials_per_recorder),
    ]
    if plan.in_flight > 1:
        phases.append((f"trial.record (1 trial per request), {plan.recorders} recorders x {plan.in_flight} in flight",
                       plan.recorders, plan.in_flight, plan.trials_per_recorder))
    for label, recorders, in_flight, per_recorder in phases:
        round_id = (await lone.optimizations.start_round(optimization_id)).round_id
        await record(lone, round_id, min(100, per_recorder // 10), rng)  # warm-up: caches, connections
        per_task = per_recorder // in_flight
        meter.start()
        started = time.perf_counter()
        latencies = await asyncio.gather(*(
            record(client, round_id, per_task, random.Random(rng.random()))
            for client in clients[:recorders] for _ in range(in_flight)
        ))
        elapsed = time.perf_counter() - started
        cores = meter.stop()
        await lone.optimizations.end_round(round_id)
        total = recorders * in_flight * per_task
        report.add(f"{label}: throughput", total / elapsed, "trials/s", over(TRIALS_PER_SECOND_AIM),
                   note=f"{total:,} trials in {elapsed:.1f} s")
        report.add_percentiles(f"{label}: latency", [ms for part in latencies for ms in part])
        add_cpu_per_trial(report, label, cores, elapsed, total)
    for recorders in (1, plan.recorders):
        label = f"trial.record_many ({plan.batch} per request), {recorders} recorder{'s' if recorders > 1 else ''}"
        round_id = (await lone.optimizations.start_round(optimization_id)).round_id
        per_recorder = plan.trials if recorders == 1 else plan.trials_per_recorder
        meter.start()
        started = time.perf_counter()
        latencies = await asyncio.gather(*(
            record_batches(client, round_id, per_recorder, plan.batch, random.Random(rng.random()))
            for client in clients[:recorders]
        ))
        elapsed = time.perf_counter() - started
        cores = meter.stop()
        await lone.optimizations.end_round(round_id)
        total = recorders * per_recorder
        report.add(f"{label}: throughput", total / elapsed, "trials/s", over(TRIALS_PER_SECOND_AIM),
                   note=f"{total:,} trials in {elapsed:.1f} s")
        report.add_percentiles(f"{label}: latency per request", [ms for part in latencies for ms in part])
        add_cpu_per_trial(report, label, cores, elapsed, total)


async def record_through_helper(
    state: OptimizationState, round: RoundHandle, count: int, in_flight: int, rng: random.Random
) -> list[float]:
    """`in_flight` callers each recording one trial after another through the helper, as
    an optimizer's evaluation tasks do; each trial's latency in ms."""

    async def caller(calls: int, rng: random.Random) -> list[float]:
        latencies = []
        for _ in range(calls):
            fields = trial_fields(rng)
            started = time.perf_counter()
            await state.record_trial(round, candidate=fields["candidate"], score=fields["score"],
                                     metrics=fields["metrics"], extra=fields["extras"])
            latencies.append((time.perf_counter() - started) * 1000)
        return latencies

    parts = await asyncio.gather(*(caller(count // in_flight, random.Random(rng.random())) for _ in range(in_flight)))
    return [ms for part in parts for ms in part]


async def measure_helper(
    clients: list[ChronicleClient], optimization_id: UUID, plan: Plan, report: Report
) -> None:
    """Each recorder its own connection and its own OptimizationState (a worker's), all
    recording into one round through `state.record_trial` with overlapping calls."""
    rng = random.Random(3)
    for recorders in (1, plan.recorders):
        label = (f"state.record_trial (helper), {recorders} recorder{'s' if recorders > 1 else ''}"
                 f" x {plan.helper_in_flight} overlapping calls")
        states = [client.optimization(optimization_id) for client in clients[:recorders]]
        round = await states[0].start_round()
        await record_through_helper(states[0], round, plan.helper_in_flight * 4, plan.helper_in_flight, rng)  # warm-up
        per_recorder = plan.trials if recorders == 1 else plan.trials_per_recorder
        started = time.perf_counter()
        latencies = await asyncio.gather(*(
            record_through_helper(state, round, per_recorder, plan.helper_in_flight, random.Random(rng.random()))
            for state in states
        ))
        elapsed = time.perf_counter() - started
        await states[0].end_round(round)
        total = sum(len(part) for part in latencies)
        report.add(f"{label}: throughput", total / elapsed, "trials/s", over(TRIALS_PER_SECOND_AIM),
                   note=f"{total:,} trials in {elapsed:.1f} s")
        report.add_percentiles(f"{label}: latency per trial", [ms for part in latencies for ms in part])


async def seed_history(clients: list[ChronicleClient], plan: Plan) -> UUID:
    """One optimization of `rounds` x `trials_per_round`, rounds one after another (a round
    must end before the next starts), each round's trials recorded concurrently."""
    lone = clients[0]
    optimization_id = (await lone.optimizations.start(
        name="history bench", optimizer="random_search", project="bench", dataset="synthetic"
    )).optimization_id
    rng = random.Random(2)
    for _ in range(plan.rounds):
        round_id = (await lone.optimizations.start_round(optimization_id, extras={"population": 100})).round_id
        await record_batches(lone, round_id, plan.trials_per_round, plan.batch, rng)
        await lone.optimizations.end_round(round_id, extras={"selection_meta": {"kept": 10}})
    await lone.optimizations.stop(optimization_id, "budget exhausted")
    return optimization_id


async def raw_history(client: ChronicleClient, optimization_id: UUID, max_trials: int) -> tuple[int, int]:
    """Every page as the wire carries it, fetched as `client.optimizations.history` does
    (the pages a reply plans, PAGES_IN_FLIGHT at a time) but only parsed: reply bytes
    and pages."""
    headers = {"Authorization": f"Bearer {client.token}"}
    subject = f"{client.prefix}.query.optimizations.history"
    in_flight = asyncio.Semaphore(PAGES_IN_FLIGHT)

    async def fetch(cursor: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        payload = {"optimization_id": str(optimization_id), "max_trials": max_trials, **cursor}
        msg = await client.nc.request(subject, orjson.dumps(payload), timeout=client.timeout, headers=headers)
        reply = orjson.loads(msg.data)
        if not reply.get("ok"):
            raise RuntimeError(f"history failed: {reply.get('error')}")
        return len(msg.data), reply["data"]

    async def fetch_planned(cut: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        async with in_flight:
            return await fetch(cut)

    total, pages = 0, 0
    cursor: dict[str, Any] = {}
    while True:
        size, first = await fetch(cursor)
        planned = await asyncio.gather(*(fetch_planned(cut) for cut in first["planned"]))
        total, pages = total + size + sum(size for size, _ in planned), pages + 1 + len(planned)
        last = planned[-1][1] if planned else first
        if last["next_after_round"] is None:
            return total, pages
        cursor = {"after_round": last["next_after_round"]}
        if last.get("next_after_trial") is not None:
            cursor["after_trial"] = last["next_after_trial"]


async def measure_history(
    clients: list[ChronicleClient], plan: Plan, target: PostgresTarget, meter: CpuMeter, report: Report
) -> None:
    started = time.perf_counter()
    optimization_id = await seed_history(clients, plan)
    seeded = time.perf_counter()
    trials = plan.rounds * plan.trials_per_round
    report.add(f"history seeding (trial.record_many, batches of {plan.batch})",
               trials / (seeded - started), "trials/s",
               note=f"{plan.rounds} rounds x {plan.trials_per_round} trials in {seeded - started:.1f} s")
    head, _ = positions(target)
    caught_up = wait_for_read_models(target, READ_MODELS, head, since=seeded, timeout=300)
    report.add("read models caught up after seeding", max(caught_up.values()) * 1000, "ms")

    reader = clients[0]
    api = reader.optimizations
    report.details["nats_max_payload"] = reader.nc.max_payload
    page = DEFAULT_PAGE_TRIALS
    rounds = await api.history(optimization_id, max_trials=page)  # warm-up, and a check of what is timed
    if len(rounds) != plan.rounds or sum(len(r["trials"]) for r in rounds) != trials:
        raise RuntimeError(f"history has {len(rounds)} rounds, {sum(len(r['trials']) for r in rounds)} trials")
    size, pages = await raw_history(reader, optimization_id, page)
    shape = f"{plan.rounds} rounds x {plan.trials_per_round} trials, {pages} page(s) of max_trials {page:,}"
    meter.start()
    started = time.perf_counter()
    report.add_percentiles("optimizations.history (client, every page)", await timed_async(
        plan.history_runs, lambda: api.history(optimization_id, max_trials=page)),
        aim_p95=under(HISTORY_AIM_MS), note=shape)
    cores, seconds = meter.stop(), time.perf_counter() - started
    if cores:  # who spends what on one history: its parts run side by side on a few cores
        per_call = milliseconds_each(cores, seconds, plan.history_runs)
        report.add("optimizations.history CPU per call, client", per_call["bench"], "ms",
                   note=f"service {per_call['service']:.0f} ms, Postgres {per_call['postgres']:.0f} ms,"
                        f" whole machine {per_call['machine']:.0f} ms (NATS and anything else too)")
    report.add_percentiles("optimizations.history (wire only, every page)", await timed_async(
        plan.history_runs, lambda: raw_history(reader, optimization_id, page)),
        note="parsed only: rounds not joined, times not converted")
    report.add("optimizations.history reply size", size / 1024, "KiB", note=f"{size:,} bytes, {pages} page(s)")
    first = await api.history_page_json(optimization_id, max_trials=page)
    report.add_percentiles("optimizations.history first page (client)", await timed_async(
        plan.history_runs, lambda: api.history_page_json(optimization_id, max_trials=page)),
        note=f"{len(first['rounds'])} rounds and the plan of {len(first['planned'])} more pages")
    if first["planned"]:  # a full page, as the client fetches the planned ones
        cut = first["planned"][0]
        full = await api.history_page_json(optimization_id, max_trials=page, **cut)
        report.add_percentiles("optimizations.history one planned page (client)", await timed_async(
            plan.history_runs, lambda: api.history_page_json(optimization_id, max_trials=page, **cut)),
            note=f"{len(full['rounds'])} rounds")


def run(plan: Plan) -> tuple[Report, Path]:
    report = Report({"suite": "optimization", **asdict(plan)})
    with bench_servers(plan.database_url, plan.nats_url) as servers, servers.fresh_database(plan.keep) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-optimization-") as workdir:
        report.details["server_settings"] = servers.server_settings()
        target = PostgresTarget(url)
        migrate(target)
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir), plan.service_settings)
        service.start()
        try:
            async def drive() -> None:
                token = service.token("optimization-bench")
                async with AsyncExitStack() as stack:
                    clients = [
                        await stack.enter_async_context(
                            await ChronicleClient.connect(servers.nats_url, token, prefix=service.subject_prefix)
                        )
                        for _ in range(max(plan.recorders, 1))
                    ]
                    optimization_id = (await clients[0].optimizations.start(
                        name="record bench", optimizer="random_search", project="bench"
                    )).optimization_id
                    meter = CpuMeter(service.pid, target.params["dbname"])
                    await measure_recording(clients, optimization_id, plan, report, meter)
                    if plan.helper_in_flight > 0:
                        await measure_helper(clients, optimization_id, plan, report)
                    await measure_history(clients, plan, target, meter, report)

            asyncio.run(drive())
        finally:
            service.stop()
            if plan.keep:
                print(f"kept database: {url}")
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench optimization", description=__doc__.splitlines()[0])
    defaults = Plan()
    p.add_argument("--quick", action="store_true", help=f"a smoke-test scale (under a minute): {QUICK}")
    p.add_argument("--trials", type=int, help=f"trials the lone recorder records (default {defaults.trials:,})")
    p.add_argument("--recorders", type=int, default=defaults.recorders,
                   help=f"concurrent recorders, one connection each (default {defaults.recorders})")
    p.add_argument("--trials-per-recorder", type=int,
                   help=f"trials each concurrent recorder records (default {defaults.trials_per_recorder:,})")
    p.add_argument("--in-flight", type=int, default=defaults.in_flight,
                   help=f"trials each recorder keeps outstanding in a third phase; 1 skips it "
                        f"(default {defaults.in_flight})")
    p.add_argument("--batch", type=int, default=defaults.batch,
                   help=f"trials per trial.record_many request (default {defaults.batch})")
    p.add_argument("--helper-in-flight", type=int, default=defaults.helper_in_flight,
                   help=f"overlapping state.record_trial calls per recorder in the helper's phases; 0 skips them "
                        f"(default {defaults.helper_in_flight})")
    p.add_argument("--rounds", type=int, help=f"rounds of the history read (default {defaults.rounds})")
    p.add_argument("--trials-per-round", type=int, help=f"trials per round of it (default {defaults.trials_per_round})")
    p.add_argument("--history-runs", type=int, help=f"timed history reads (default {defaults.history_runs})")
    add_server_options(p)
    p.add_argument("--keep", action="store_true",
                   help="keep the bench database afterwards (for EXPLAIN ANALYZE); its URL is printed")
    add_service_setting_option(p)
    args = p.parse_args(argv)
    chosen = {**(QUICK if args.quick else {}), **{
        name: value for name, value in vars(args).items() if name in asdict(defaults) and value is not None
    }, "service_settings": service_settings(args.service_setting)}
    show(*run(Plan(**chosen)))
