"""`./dev bench jobs`: jobs/s and latency through the whole job pipeline with the built-in agent and 1, 2, 4 workers.

For each worker count: a fresh database and a fresh `chronicle serve` on it
(CHRONICLE_AGENT=offline, CHRONICLE_JOB_WORKERS=N, subjects of its own), one bench user
with one session. A few unmeasured jobs warm it up; then `--jobs` jobs are requested at
once (at most `--in-flight` requests outstanding; the jobs themselves all queue) and
followed to their end through one subscription on the user's `<signals>.jobs.*.progress`, for jobs/s
and request→completed latency under load; then `--sequential` jobs one at a time, for the
latency at low load. Every worker count gets the same jobs: a few sentences of chat text,
the type cycling quiz, summary, layout, options {"chunks": 0} (no retrieval: the agent
plans from the request's own sentences), each job in a session of its own (made before
any is timed). The session is what keeps them apart: the dedup fingerprint covers user,
session, type, sources and options but not the content, so jobs differing only in content
would be answered by the one already active (and options admit only the named ones).

Pipeline overhead per job: a job's request→completed time (one at a time) minus the time
the offline agent takes for that same job's plan, generate_from_plan and validate, timed
in this process before any service runs (median of AGENT_RUNS). The progress messages
carry each event's timestamp, which splits the service's side into queued, planning,
generating and validating. Aim (the jobs issue): pipeline overhead p50 under 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from chronicle_client.connection import ChronicleClient
from chronicle_contract.bus import signals_prefix

from adapters.generation.agent_offline import OfflineAgent
from adapters.store.postgres import PostgresTarget, migrate
from bench.corpus import Corpus
from bench.cpu import CpuMeter, milliseconds_each
from bench.load import connect
from bench.report import Report, percentile, under
from bench.run import say
from bench.servers import BenchServers, add_server_options, bench_servers
from bench.service import ServiceProcess
from domain.job_results import ARTIFACT_TYPES
from services.ports.agent import JobSpec

OVERHEAD_AIM_MS = 20.0
AGENT_RUNS = 3  # per job; the median is kept
ENDED = ("completed", "failed")
USER = "jobs-bench"
READ_BACK = 3  # finished jobs read back with jobs.get and artifacts.get
# Spans between the job's events, by their timestamps: (name, from event, to event). A
# worker claims a pending job with its first record and records what comes within 50 ms
# in one commit, so with a quick agent "queued" runs from the request to that one commit
# and the phases, all in it, show as 0.
SPANS = (("queued", "Requested", "PhaseStarted"), ("planning", "PhaseStarted", "PlanStored"),
         ("generating", "PlanStored", "Generated"), ("validating", "Generated", "Completed"))


@dataclass(frozen=True)
class Plan:
    jobs: int = 200  # requested at once, per worker count
    sequential: int = 50  # one at a time, per worker count
    workers: tuple[int, ...] = (1, 2, 4)
    in_flight: int = 32  # job.request commands outstanding while submitting
    warmup: int = 3
    timeout: float = 300.0  # seconds a phase's jobs have to end
    seed: int = 1
    database_url: str | None = None
    nats_url: str | None = None
    keep: bool = False


QUICK = {"jobs": 40, "sequential": 15}


@dataclass(frozen=True)
class BenchJob:
    number: int  # the key of its agent time and of its session
    spec: JobSpec


def bench_jobs(corpus: Corpus, numbers: range) -> list[BenchJob]:
    """One job per number: 2-5 sentences of chat, the type cycling."""
    jobs = []
    for number in numbers:
        sentences = [corpus.text(corpus.rng.randint(6, 16))[0] for _ in range(corpus.rng.randint(2, 5))]
        spec = JobSpec(artifact_type=ARTIFACT_TYPES[number % len(ARTIFACT_TYPES)], content=" ".join(sentences),
                       options={"chunks": 0})
        jobs.append(BenchJob(number, spec))
    return jobs


async def agent_times(jobs: list[BenchJob]) -> tuple[dict[int, float], int]:
    """Each job's agent time in ms (plan, generate_from_plan, validate; median of AGENT_RUNS),
    and how many of its results the agent itself finds invalid (each would cost a retry)."""
    agent, times, invalid = OfflineAgent(), {}, 0
    for job in jobs:
        spec, runs = job.spec, []
        for _ in range(AGENT_RUNS):
            started = time.perf_counter()
            plan = await agent.plan(spec, [])
            result = await agent.generate_from_plan(spec, plan, [], 1)
            problems = await agent.validate(spec, result)
            runs.append((time.perf_counter() - started) * 1000)
        times[job.number] = statistics.median(runs)
        invalid += bool(problems)
    return times, invalid


class Progress:
    """Every job's progress messages, from one subscription on the user's `<signals>.jobs.*.progress`."""

    def __init__(self) -> None:
        self.updates: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.ended: dict[str, float] = {}  # job id: when (perf_counter) its end arrived
        self.waiting: dict[str, asyncio.Future[float]] = {}

    async def received(self, message: Any) -> None:
        arrived = time.perf_counter()
        update = orjson.loads(message.data)
        job_id = update["job_id"]
        self.updates[job_id].append(update)
        if update["status"] in ENDED and job_id not in self.ended:
            self.ended[job_id] = arrived
            future = self.waiting.pop(job_id, None)
            if future is not None and not future.done():
                future.set_result(arrived)

    async def end_of(self, job_id: str) -> float:
        """When the job's end arrived, waiting for it if it has not yet (its end may come
        before its request's reply does)."""
        if job_id in self.ended:
            return self.ended[job_id]
        return await self.waiting.setdefault(job_id, asyncio.get_running_loop().create_future())

    def last(self, job_id: str) -> dict[str, Any]:
        """The job's latest update by log position (messages may arrive out of order)."""
        return max(self.updates.get(job_id, []), key=lambda update: update["position"], default={})

    def spans_ms(self, job_id: str) -> dict[str, float] | None:
        """The SPANS of the job by its events' timestamps (the service's clock), or None when
        one is missing. A phase's first start and an event's last occurrence count."""
        at: dict[str, datetime] = {}
        for update in self.updates.get(job_id, []):
            event = update["event"]
            if event != "PhaseStarted" or event not in at:
                at[event] = datetime.fromisoformat(update["at"])
        if any(event not in at for _, start, end in SPANS for event in (start, end)):
            return None
        return {name: (at[end] - at[start]).total_seconds() * 1000 for name, start, end in SPANS} | {
            "service": (at["Completed"] - at["Requested"]).total_seconds() * 1000}


@dataclass
class JobRun:
    job: BenchJob
    sent: float = 0.0
    job_id: str | None = None
    ended: float | None = None
    error: str | None = None

    @property
    def latency_ms(self) -> float:
        assert self.ended is not None, "the job did not end"
        return (self.ended - self.sent) * 1000


class Driver:
    """One service's jobs, requested by the bench user's client and followed through `progress`."""

    def __init__(self, client: ChronicleClient, sessions: dict[int, UUID], progress: Progress, timeout: float):
        self.client, self.sessions, self.progress, self.timeout = client, sessions, progress, timeout

    async def run(self, job: BenchJob, gate: asyncio.Semaphore, deadline: float) -> JobRun:
        """Request the job (holding `gate` while the request is out) and wait for its end."""
        run, spec = JobRun(job), job.spec
        async with gate:
            run.sent = time.perf_counter()
            try:
                reply = await self.client.jobs.request(spec.content, spec.artifact_type,
                                                       session_id=self.sessions[job.number], options=spec.options)
            except Exception as error:
                run.error = f"request: {type(error).__name__}: {error}"
                return run
        if not reply.created:
            run.error = "deduplicated: an active job answered the request"
            return run
        run.job_id = str(reply.job_id)
        try:
            run.ended = await asyncio.wait_for(self.progress.end_of(run.job_id), max(deadline - time.monotonic(), 0.1))
        except TimeoutError:
            run.error = "did not end in time"
            return run
        end = self.progress.last(run.job_id)
        if end.get("status") != "completed" or not end.get("artifact_id"):
            run.error = f"{end.get('status')}: {end.get('error')}"
        return run

    async def at_once(self, jobs: list[BenchJob], in_flight: int) -> list[JobRun]:
        gate, deadline = asyncio.Semaphore(in_flight), time.monotonic() + self.timeout
        return list(await asyncio.gather(*(self.run(job, gate, deadline) for job in jobs)))

    async def one_at_a_time(self, jobs: list[BenchJob]) -> list[JobRun]:
        gate, deadline = asyncio.Semaphore(1), time.monotonic() + self.timeout
        return [await self.run(job, gate, deadline) for job in jobs]

    async def read_back(self, runs: list[JobRun]) -> list[str]:
        """The last few finished jobs and their artifacts, read through the queries: what is wrong."""
        wrong = []
        for run in [run for run in runs if run.error is None][-READ_BACK:]:
            assert run.job_id is not None
            end = self.progress.last(run.job_id)
            self.client.observed(end["position"])  # the read models include the job's end
            job = await self.client.jobs.get(UUID(run.job_id))
            artifact = await self.client.artifacts.get(job.artifact_id) if job.artifact_id else None
            if job.status != "completed" or str(job.artifact_id) != end["artifact_id"] or artifact is None \
                    or artifact.origin != "job":
                wrong.append(f"job {run.job_id} reads back as {job.status} with artifact {job.artifact_id}")
        return wrong


@dataclass
class Measured:
    """One worker count's results."""

    workers: int
    load: list[JobRun] = field(default_factory=list)
    sequential: list[JobRun] = field(default_factory=list)
    warmup: list[JobRun] = field(default_factory=list)
    load_seconds: float = 0.0
    cores: dict[str, float] = field(default_factory=dict)  # during the load, by CpuMeter
    spans: list[tuple[JobRun, dict[str, float]]] = field(default_factory=list)  # of the sequential jobs
    read_back_wrong: list[str] = field(default_factory=list)

    def failures(self) -> list[str]:
        return [run.error for run in [*self.warmup, *self.load, *self.sequential] if run.error] + self.read_back_wrong


async def drive(service: ServiceProcess, nats_url: str, database: str, specs: dict[str, list[BenchJob]],
                plan: Plan, measured: Measured) -> None:
    client = await ChronicleClient.connect(nats_url, service.token(USER), prefix=service.subject_prefix, timeout=30.0)
    try:
        progress = Progress()
        progress_subjects = f"{signals_prefix(service.subject_prefix, USER)}.jobs.*.progress"
        subscription = await client.nc.subscribe(progress_subjects, cb=progress.received)
        sessions = {job.number: (await client.sessions.create(f"jobs bench {job.number}", kind="generation")).session_id
                    for group in specs.values() for job in group}
        driver = Driver(client, sessions, progress, plan.timeout)
        measured.warmup = await driver.one_at_a_time(specs["warmup"])

        say(f"  {len(specs['load'])} jobs at once")
        meter = CpuMeter(service.pid, database)
        meter.start()
        started = time.perf_counter()
        measured.load = await driver.at_once(specs["load"], plan.in_flight)
        measured.load_seconds = max((run.ended for run in measured.load if run.ended), default=started) - started
        measured.cores = meter.stop()

        say(f"  {len(specs['sequential'])} jobs one at a time")
        measured.sequential = await driver.one_at_a_time(specs["sequential"])
        measured.spans = [(run, spans) for run in measured.sequential
                          if run.job_id and run.error is None and (spans := progress.spans_ms(run.job_id))]
        measured.read_back_wrong = await driver.read_back(measured.sequential)
        await subscription.unsubscribe()
    finally:
        await client.close()


async def remove_streams(nats_url: str, prefix: str) -> None:
    """The service's JetStream streams (jobs, progress, HITL, uploads): named after its prefix."""
    nc = await connect(nats_url)
    try:
        js, mine = nc.jetstream(), prefix.replace(".", "_").upper()
        for info in await js.streams_info():
            if info.config.name and info.config.name.startswith((f"{mine}_", f"OBJ_{mine}_")):
                await js.delete_stream(info.config.name)
    finally:
        await nc.close()


def measure(servers: BenchServers, workers: int, specs: dict[str, list[BenchJob]], plan: Plan) -> Measured:
    """A fresh database and service with `workers` job workers, and its jobs run."""
    measured = Measured(workers)
    with servers.fresh_database(plan.keep) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-jobs-") as workdir:
        target = PostgresTarget(url)
        migrate(target)
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir),
                                       {"CHRONICLE_AGENT": "offline", "CHRONICLE_JOB_WORKERS": str(workers)})
        try:
            with service.stopped_afterwards(say):
                service.start()
                asyncio.run(drive(service, servers.nats_url, target.params["dbname"], specs, plan, measured))
        finally:
            if plan.keep:
                say(f"kept database {url} and the streams of {service.subject_prefix}")
            else:
                asyncio.run(remove_streams(servers.nats_url, service.subject_prefix))
    return measured


def add_rows(report: Report, measured: Measured, agent_ms: dict[int, float]) -> None:
    label = f"{measured.workers} worker{'s' if measured.workers != 1 else ''}"
    done = [run for run in measured.load if run.error is None]
    seconds = measured.load_seconds
    report.add(f"{label}: throughput", len(done) / seconds if seconds else float("nan"), "jobs/s",
               note=f"{len(done)} of {len(measured.load)} jobs in {seconds:.1f} s, all queued at once")
    report.add_percentiles(f"{label}: request→completed, all at once", [run.latency_ms for run in done],
                           note="includes the wait behind the jobs queued before")
    if measured.cores and done:
        per_job = milliseconds_each(measured.cores, seconds, len(done))
        agent_mean = statistics.mean(agent_ms[run.job.number] for run in done)
        report.add(f"{label}: service CPU per job", per_job["service"], "ms",
                   note=f"of which agent ~{agent_mean:.1f}; projections {per_job['projections']:.1f} ms"
                        f" and Postgres {per_job['postgres']:.1f} ms more")

    quiet = [run for run in measured.sequential if run.error is None]
    report.add_percentiles(f"{label}: request→completed, one at a time", [run.latency_ms for run in quiet])
    overhead = [run.latency_ms - agent_ms[run.job.number] for run in quiet]
    report.add(f"{label}: pipeline overhead per job p50", percentile(overhead, 50), "ms", under(OVERHEAD_AIM_MS),
               note="one at a time, minus the agent's time on the same job")
    report.add(f"{label}: pipeline overhead per job p95", percentile(overhead, 95), "ms")
    p50: dict[str, float] = {}
    if measured.spans:
        p50 = {name: statistics.median(spans[name] for _, spans in measured.spans) for name in measured.spans[0][1]}
        p50["messaging"] = statistics.median(run.latency_ms - spans["service"] for run, spans in measured.spans)
        report.add(f"{label}:   of which in the service, p50", p50["service"], "ms",
                   note=", ".join(f"{name} {p50[name]:.1f}" for name, _, _ in SPANS)
                   + f"; outside it (messaging) {p50['messaging']:.1f}")
    report.details.setdefault("settings", {})[label] = {
        "load_seconds": round(seconds, 3), "cores_during_load": measured.cores,
        "span_p50_ms": {name: round(ms, 2) for name, ms in p50.items()},
        "failures": len(measured.failures()), "first_failure": next(iter(measured.failures()), None),
    }


def run(plan: Plan) -> tuple[Report, Path]:
    if plan.jobs < 1 or plan.sequential < 1 or plan.in_flight < 1 or not plan.workers \
            or min(plan.workers) < 1:
        raise SystemExit("need --jobs, --sequential, --in-flight and every worker count >= 1")
    report = Report({"suite": "jobs", **asdict(plan)})
    corpus = Corpus(random.Random(plan.seed))
    counts = {"warmup": plan.warmup, "load": plan.jobs, "sequential": plan.sequential}
    specs, first = {}, 0
    for name, count in counts.items():
        specs[name] = bench_jobs(corpus, range(first, first + count))
        first += count

    say(f"timing the offline agent on the {first} jobs, in this process")
    agent_ms, invalid = asyncio.run(agent_times([spec for group in specs.values() for spec in group]))
    sequential_agent = [agent_ms[job.number] for job in specs["sequential"]]
    report.add("agent time per job (in-process) p50", percentile(sequential_agent, 50), "ms",
               note=f"plan + generate + validate, median of {AGENT_RUNS} runs each; {invalid} results invalid")
    report.add("agent time per job (in-process) p95", percentile(sequential_agent, 95), "ms")

    failures: dict[str, list[str]] = {}
    with bench_servers(plan.database_url, plan.nats_url) as servers:
        report.details["server_settings"] = servers.server_settings()
        for workers in plan.workers:
            say(f"{workers} job worker(s): fresh database and service")
            measured = measure(servers, workers, specs, plan)
            add_rows(report, measured, agent_ms)
            failures[str(workers)] = measured.failures()
    failed = sum(len(found) for found in failures.values())
    report.add("failed, unfinished or wrong jobs", failed, aim=under(1),
               note=", ".join(f"{len(found)} with {workers}" for workers, found in failures.items()))
    report.details["failures"] = {workers: found[:5] for workers, found in failures.items() if found}
    return report, report.save()


def worker_counts(text: str) -> tuple[int, ...]:
    counts = tuple(int(part) for part in text.split(",") if part.strip())
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("worker counts are whole numbers >= 1, e.g. 1,2,4")
    return counts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench jobs", description=__doc__.splitlines()[0])
    defaults = Plan()
    p.add_argument("--quick", action="store_true", help=f"a smoke-test scale (about a minute or two): {QUICK}")
    p.add_argument("--jobs", type=int, help=f"jobs requested at once, per worker count (default {defaults.jobs})")
    p.add_argument("--sequential", type=int,
                   help=f"jobs run one at a time, per worker count (default {defaults.sequential})")
    p.add_argument("--workers", type=worker_counts, default=defaults.workers,
                   help="comma-separated job worker counts, one fresh service each (default 1,2,4)")
    p.add_argument("--in-flight", type=int, default=defaults.in_flight,
                   help=f"job.request commands outstanding while submitting (default {defaults.in_flight})")
    p.add_argument("--warmup", type=int, default=defaults.warmup,
                   help=f"unmeasured jobs first, one at a time (default {defaults.warmup})")
    p.add_argument("--timeout", type=float, default=defaults.timeout,
                   help=f"seconds a phase's jobs have to end (default {defaults.timeout:.0f})")
    p.add_argument("--seed", type=int, default=defaults.seed, help="random seed of the jobs' text")
    add_server_options(p)
    p.add_argument("--keep", action="store_true",
                   help="keep the bench databases and the services' streams afterwards; they are printed")
    args = p.parse_args(argv)
    given = {name: value for name, value in vars(args).items() if name in asdict(defaults) and value is not None}
    plan = replace(defaults, **{**(QUICK if args.quick else {}), **given})
    started = time.perf_counter()
    report, path = run(plan)
    print(report.table())
    print(f"\nsaved {path}; took {time.perf_counter() - started:.0f} s")
