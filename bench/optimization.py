"""`./dev bench optimization`: trial.record throughput and latency, and optimizations.history time.

Starts `chronicle serve` on a fresh database, then over NATS: records trials into one round
with 1 recorder, then with 8 concurrent recorders (each its own connection, all into one
round, as parallel evaluation workers do), then with those recorders keeping 8 trials
outstanding each (the service's capacity rather than its round trip), then 1 and 8
recorders sending populations of 50 with trial.record_many; seeds an
optimization of 100 rounds x 100 trials and times its full history (every page, as
`client.optimizations.history` follows them) and one page. Aims (issue 6): over 1,000
trials/s, history under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson

from adapters.postgres import PostgresTarget, migrate
from bench.report import Report, over, timed_async, under
from bench.servers import bench_servers
from bench.service import ServiceProcess, positions, wait_for_read_models
from services import contract_optimization as o
from services.client import ChronicleClient

TRIALS_PER_SECOND_AIM = 1_000.0
HISTORY_AIM_MS = 100.0
DEFAULT_PAGE_TRIALS: int = o.OptimizationHistory.model_fields["max_trials"].default
READ_MODELS = ["optimizations", "lineage"]
PARAMETERS = ("learning_rate", "temperature", "top_p", "dropout", "weight_decay")


@dataclass(frozen=True)
class Plan:
    trials: int = 3_000  # recorded by the lone recorder
    recorders: int = 8
    trials_per_recorder: int = 1_000
    in_flight: int = 8  # per recorder in the last phase; 1 skips it
    batch: int = 50  # trials per trial.record_many request
    rounds: int = 100  # of the optimization whose history is read
    trials_per_round: int = 100
    history_runs: int = 20
    database_url: str | None = None
    nats_url: str | None = None
    keep: bool = False


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


async def measure_recording(
    clients: list[ChronicleClient], optimization_id: UUID, plan: Plan, report: Report
) -> None:
    """One round per phase: the lone recorder, the concurrent recorders, then the same
    recorders each with `in_flight` trials outstanding (what the service can take)."""
    rng = random.Random(1)
    lone = clients[0]
    phases = [
        ("trial.record, 1 recorder", 1, 1, plan.trials),
        (f"trial.record, {plan.recorders} recorders", plan.recorders, 1, plan.trials_per_recorder),
    ]
    if plan.in_flight > 1:
        phases.append((f"trial.record, {plan.recorders} recorders x {plan.in_flight} in flight",
                       plan.recorders, plan.in_flight, plan.trials_per_recorder))
    for label, recorders, in_flight, per_recorder in phases:
        round_id = (await lone.optimizations.start_round(optimization_id)).round_id
        await record(lone, round_id, min(100, per_recorder // 10), rng)  # warm-up: caches, connections
        per_task = per_recorder // in_flight
        started = time.perf_counter()
        latencies = await asyncio.gather(*(
            record(client, round_id, per_task, random.Random(rng.random()))
            for client in clients[:recorders] for _ in range(in_flight)
        ))
        elapsed = time.perf_counter() - started
        await lone.optimizations.end_round(round_id)
        total = recorders * in_flight * per_task
        report.add(f"{label}: throughput", total / elapsed, "trials/s", over(TRIALS_PER_SECOND_AIM),
                   note=f"{total:,} trials in {elapsed:.1f} s")
        report.add_percentiles(f"{label}: latency", [ms for part in latencies for ms in part])
    for recorders in (1, plan.recorders):
        label = f"trial.record_many, {recorders} recorder{'s' if recorders > 1 else ''}, batches of {plan.batch}"
        round_id = (await lone.optimizations.start_round(optimization_id)).round_id
        per_recorder = plan.trials if recorders == 1 else plan.trials_per_recorder
        started = time.perf_counter()
        latencies = await asyncio.gather(*(
            record_batches(client, round_id, per_recorder, plan.batch, random.Random(rng.random()))
            for client in clients[:recorders]
        ))
        elapsed = time.perf_counter() - started
        await lone.optimizations.end_round(round_id)
        total = recorders * per_recorder
        report.add(f"{label}: throughput", total / elapsed, "trials/s", over(TRIALS_PER_SECOND_AIM),
                   note=f"{total:,} trials in {elapsed:.1f} s")
        report.add_percentiles(f"{label}: latency per request", [ms for part in latencies for ms in part])


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
    """Every page as the wire carries it (no client-side validation): reply bytes and pages."""
    headers = {"Authorization": f"Bearer {client.token}"}
    subject = f"{client.prefix}.query.optimizations.history"
    total, pages, cursor = 0, 0, {}
    while True:
        payload = {"optimization_id": str(optimization_id), "max_trials": max_trials, **cursor}
        msg = await client.nc.request(subject, orjson.dumps(payload), timeout=client.timeout, headers=headers)
        total, pages = total + len(msg.data), pages + 1
        reply = orjson.loads(msg.data)
        if not reply.get("ok"):
            raise RuntimeError(f"history failed: {reply.get('error')}")
        if reply["data"]["next_after_round"] is None:
            return total, pages
        cursor = {"after_round": reply["data"]["next_after_round"]}
        if reply["data"].get("next_after_trial") is not None:
            cursor["after_trial"] = reply["data"]["next_after_trial"]


async def measure_history(
    clients: list[ChronicleClient], plan: Plan, target: PostgresTarget, report: Report
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
    if len(rounds) != plan.rounds or sum(len(r.trials) for r in rounds) != trials:
        raise RuntimeError(f"history has {len(rounds)} rounds, {sum(len(r.trials) for r in rounds)} trials")
    size, pages = await raw_history(reader, optimization_id, page)
    shape = f"{plan.rounds} rounds x {plan.trials_per_round} trials, {pages} page(s) of max_trials {page:,}"
    report.add_percentiles("optimizations.history (client, every page)", await timed_async(
        plan.history_runs, lambda: api.history(optimization_id, max_trials=page)),
        aim_p95=under(HISTORY_AIM_MS), note=shape)
    report.add_percentiles("optimizations.history (wire only, every page)", await timed_async(
        plan.history_runs, lambda: raw_history(reader, optimization_id, page)), note="no client-side validation")
    report.add("optimizations.history reply size", size / 1024, "KiB", note=f"{size:,} bytes, {pages} page(s)")
    first = await api.history_page(optimization_id, max_trials=page)
    report.add_percentiles("optimizations.history one page (client)", await timed_async(
        plan.history_runs, lambda: api.history_page(optimization_id, max_trials=page)),
        note=f"max_trials {page:,}: {len(first.rounds)} rounds")


def run(plan: Plan) -> tuple[Report, Path]:
    report = Report({"suite": "optimization", **asdict(plan)})
    with bench_servers(plan.database_url, plan.nats_url) as servers, servers.fresh_database(plan.keep) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-optimization-") as workdir:
        report.details["server_settings"] = servers.server_settings()
        target = PostgresTarget(url)
        migrate(target)
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir))
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
                    await measure_recording(clients, optimization_id, plan, report)
                    await measure_history(clients, plan, target, report)

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
    p.add_argument("--rounds", type=int, help=f"rounds of the history read (default {defaults.rounds})")
    p.add_argument("--trials-per-round", type=int, help=f"trials per round of it (default {defaults.trials_per_round})")
    p.add_argument("--history-runs", type=int, help=f"timed history reads (default {defaults.history_runs})")
    p.add_argument("--database-url", help="PostgreSQL URL to CREATE DATABASE from (default: local or embedded)")
    p.add_argument("--nats-url", help="NATS URL (default: local or embedded)")
    p.add_argument("--keep", action="store_true",
                   help="keep the bench database afterwards (for EXPLAIN ANALYZE); its URL is printed")
    args = p.parse_args(argv)
    chosen = {**(QUICK if args.quick else {}), **{
        name: value for name, value in vars(args).items() if name in asdict(defaults) and value is not None
    }}
    report, path = run(Plan(**chosen))
    print(report.table())
    print(f"\nsaved {path}")
