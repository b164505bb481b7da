"""`./dev bench faults`: the production shape on loopback, a part of it killed under load.

Scenarios (real processes, no containers):
- `nats-node`: a three-node NATS cluster from infra/nats/cluster.conf (closed bus, streams
  replicated 3 times) and three `chronicle serve` instances, each connected to its own
  node; the second node is killed (SIGKILL) mid-load.
- `instance`: two `chronicle serve` instances without projections plus a standalone
  projection engine (`chronicle projections run`); the first instance is killed mid-load.
- `projection-child`: one instance whose projection engine runs in its child process; the
  child is killed (SIGKILL) mid-load.
- `postgres-restart`: one instance on a Postgres of its own (embedded), restarted mid-load.
- `nats-restart`: one instance on a nats-server of its own, restarted mid-load.

The load: users writing messages back to back, each command sent again with the same
Idempotency-Key until it is answered `ok` (as a caller should after a timeout), HITL runs
paused before the kill and answered around it, each taken by an orchestrator waiting for
it, and artifact jobs requested before and after. A probe client that starts on what is
killed times the kill -> its first successful command. Then it checks: every command was
answered; the log holds each acknowledged message exactly once (0 lost, 0 duplicated);
every HITL answer arrived exactly once (a second take hears `taken`); every job ended
`completed`; the event feed holds each of the log's events once, in order; the read models
equal a rebuild (`chronicle projections verify`) and every hash chain verifies (`chronicle
audit verify`). Exits 1 when a check fails; tests/faults runs every scenario the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import nats.errors
from chronicle_client import ChronicleClient, ChronicleError

from adapters.embedded import EmbeddedNats, EmbeddedPostgres
from adapters.store.postgres import PostgresTarget, migrate
from bench.cluster import NatsCluster
from bench.report import Report
from bench.servers import BenchServers, add_server_options, bench_servers
from bench.service import ServiceProcess, chronicle_command, positions, unreported

SCENARIOS = ("nats-node", "instance", "projection-child", "postgres-restart", "nats-restart")
RETRY_WAIT = 0.2  # seconds between sends of an unanswered command
ANSWER_DEADLINE = 120.0  # seconds a command may take to be answered ok, retries included, before it counts as lost
CLIENT_TIMEOUT = 3.0  # the clients' request timeout: a request to a dead node is sent again soon
FAST_SETTINGS = {
    "CHRONICLE_JOB_ACK_WAIT": "5",  # a job held by a killed instance is taken over within seconds
    "CHRONICLE_PROJECTION_PROCESS": "false",  # (two cores: the fleet's processes are already many)
}
T = TypeVar("T")


class Unanswered(Exception):
    """A command that was never answered `ok`: counted as lost."""


async def until_ok(send: Callable[[], Awaitable[T]]) -> T:
    """The command's reply, sending it again (same Idempotency-Key, inside `send`) while the
    service or the bus is away."""
    deadline = time.monotonic() + ANSWER_DEADLINE
    while True:
        try:
            return await send()
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionReconnectingError):
            pass
        except ChronicleError as error:
            if error.code not in ("unavailable", "rate_limited"):
                raise
        if time.monotonic() > deadline:
            raise Unanswered(f"no ok within {ANSWER_DEADLINE} s")
        await asyncio.sleep(RETRY_WAIT)


@dataclass
class Tally:
    acknowledged: dict[uuid.UUID, int] = field(default_factory=dict)  # conversation -> messages answered ok
    answers: int = 0
    answers_expected: int = 0
    jobs_completed: int = 0
    jobs_expected: int = 0
    kill_to_first_ok: float = 0.0
    killed_at: float = 0.0


@dataclass
class Fleet:
    """What a scenario runs: the services' URLs for users, and how to kill the part under test."""

    users_url: str
    probe_url: str  # starts on what is killed
    services: list[ServiceProcess]
    kill: Callable[[], None]
    database_url: str
    subject_prefix: str
    token: Callable[..., str]  # (user, claims=None)

    @property
    def target(self) -> PostgresTarget:
        return PostgresTarget(self.database_url)


async def connect(fleet: Fleet, user: str, url: str | None = None) -> ChronicleClient:
    return await ChronicleClient.connect(
        url or fleet.users_url, fleet.token(user), prefix=fleet.subject_prefix, timeout=CLIENT_TIMEOUT,
        nats_options={"max_reconnect_attempts": -1, "reconnect_time_wait": 0.2, "dont_randomize": url is not None,
                      "error_cb": unreported},
    )


async def writer(client: ChronicleClient, name: str, stop: asyncio.Event, tally: Tally) -> None:
    started = await until_ok(partial(client.conversations.start, title=f"fault {name}", idempotency_key=f"{name}-start"))
    conversation = started.conversation_id
    tally.acknowledged[conversation] = 0
    n = 0
    while not stop.is_set():
        key = f"{name}-{n}"
        await until_ok(partial(client.conversations.add_message, conversation, "user", f"message {n}", idempotency_key=key))
        tally.acknowledged[conversation] += 1
        n += 1


async def probe(fleet: Fleet, killed: asyncio.Event, tally: Tally) -> None:
    """Commands from a client that starts on what is killed; the time from the kill to its first ok."""
    client = await connect(fleet, "probe", fleet.probe_url)
    try:
        started = await until_ok(partial(client.conversations.start, title="probe", idempotency_key="probe-start"))
        tally.acknowledged[started.conversation_id] = 0
        await killed.wait()
        await until_ok(partial(
            client.conversations.add_message, started.conversation_id, "user", "after the kill",
            idempotency_key="probe-after"))
        tally.kill_to_first_ok = time.monotonic() - tally.killed_at
        tally.acknowledged[started.conversation_id] += 1
    finally:
        await client.close()


async def hitl_runs(client: ChronicleClient, count: int, killed: asyncio.Event, tally: Tally) -> None:
    """Runs paused before the kill, answered around it; each orchestrator takes its answer."""
    tally.answers_expected = count
    conversation = (await until_ok(partial(
        client.conversations.start, title="fault hitl", idempotency_key=f"hitl-{client.user}"))).conversation_id
    runs = [
        await until_ok(partial(
            client.hitl.pause, conversation, step=f"step {n}", prompt="approve?", run_id=f"run-{n}",
            idempotency_key=f"pause-{n}"))
        for n in range(count)
    ]

    async def orchestrate(handle: Any, n: int) -> None:
        answer = await handle.wait_for_resume(timeout=ANSWER_DEADLINE)
        if answer.feedback != f"answer {n}":
            raise AssertionError(f"run {n} got another run's answer: {answer.feedback!r}")
        tally.answers += 1

    orchestrators = [asyncio.create_task(orchestrate(run, n)) for n, run in enumerate(runs)]
    for n, run in enumerate(runs):
        if n == count // 2:
            await killed.wait()  # half answered before the kill, half after
        await until_ok(partial(
            client.hitl.resume, run.run_id, approved=True, feedback=f"answer {n}", idempotency_key=f"resume-{n}"))
    await asyncio.gather(*orchestrators)
    for run in runs:  # exactly once: nobody takes an answer twice
        taken = await until_ok(partial(client.hitl.take, run.run_id))
        if taken.status != "taken":
            raise AssertionError(f"run {run.run_id}: a second take heard {taken.status!r}, not 'taken'")


async def jobs(client: ChronicleClient, count: int, killed: asyncio.Event, tally: Tally) -> None:
    tally.jobs_expected = count
    requested = []
    for n in range(count):
        if n == count // 2:
            await killed.wait()
        requested.append(await until_ok(partial(
            client.jobs.request, f"a landing page, variant {n}", "layout", idempotency_key=f"job-{n}")))
    for job in requested:
        view = await client.jobs.wait(job.job_id, timeout=ANSWER_DEADLINE)
        if view.status != "completed":
            raise AssertionError(f"job {job.job_id} ended {view.status}: {view.error}")
        tally.jobs_completed += 1


async def load(fleet: Fleet, users: int, seconds: float, hitl: int, job_count: int) -> Tally:
    tally, stop, killed = Tally(), asyncio.Event(), asyncio.Event()
    clients = [await connect(fleet, f"writer-{n}") for n in range(users)]
    orchestrator = await connect(fleet, "orchestrator")
    try:
        work = [asyncio.create_task(writer(c, f"w{n}", stop, tally)) for n, c in enumerate(clients)]
        work += [
            asyncio.create_task(probe(fleet, killed, tally)),
            asyncio.create_task(hitl_runs(orchestrator, hitl, killed, tally)),
            asyncio.create_task(jobs(orchestrator, job_count, killed, tally)),
        ]
        await asyncio.sleep(seconds / 2)
        tally.killed_at = time.monotonic()
        await asyncio.to_thread(fleet.kill)
        killed.set()
        await asyncio.sleep(seconds / 2)
        stop.set()
        await asyncio.gather(*work)
    finally:
        for client in [*clients, orchestrator]:
            await client.close()
    return tally


MESSAGES_ADDED = (
    "SELECT originator_id, count(*) FROM chronicle.events"
    " WHERE topic LIKE '%%MessageAdded' AND originator_id = ANY(%s) GROUP BY originator_id"
)


def stored_messages(target: PostgresTarget, conversations: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    with target.connect(autocommit=True) as conn:
        return dict(conn.execute(MESSAGES_ADDED, (conversations,)).fetchall())


def operator(database_url: str, workdir: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """A `chronicle` operator command on the scenario's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    env.update(CHRONICLE_DATABASE_URL=database_url, CHRONICLE_DATA_DIR=str(workdir / "operator"), CHRONICLE_LOG_LEVEL="WARNING")
    return subprocess.run([*chronicle_command(), *command], env=env, capture_output=True, text=True, timeout=600)


def check(report: Report, tally: Tally, target: PostgresTarget, database_url: str, workdir: Path) -> list[str]:
    """The checks, as rows of the report; the failures, in words."""
    failures = []
    stored = stored_messages(target, list(tally.acknowledged))
    acknowledged = sum(tally.acknowledged.values())
    lost = sum(max(0, n - stored.get(c, 0)) for c, n in tally.acknowledged.items())
    duplicated = sum(max(0, stored.get(c, 0) - n) for c, n in tally.acknowledged.items())
    report.add("messages acknowledged", acknowledged)
    report.add("lost", lost, note="aim 0")
    report.add("duplicated", duplicated, note="aim 0")
    report.add("HITL answers taken (of paused)", tally.answers, note=f"of {tally.answers_expected}")
    report.add("jobs completed", tally.jobs_completed, note=f"of {tally.jobs_expected}")
    report.add("kill -> probe's first ok s", tally.kill_to_first_ok)
    if lost or duplicated:
        failures.append(f"{lost} lost, {duplicated} duplicated of {acknowledged}")
    if tally.answers != tally.answers_expected:
        failures.append(f"{tally.answers} HITL answers of {tally.answers_expected}")
    if tally.jobs_completed != tally.jobs_expected:
        failures.append(f"{tally.jobs_completed} jobs completed of {tally.jobs_expected}")
    head, _ = positions(target)
    wait_until_projected(target, head)
    for name, command in (("read models equal a rebuild", ("projections", "verify")),
                          ("hash chains verify", ("audit", "verify", "--all"))):
        done = operator(database_url, workdir, *command)
        report.add(name, float(done.returncode == 0), note="1: yes")
        if done.returncode != 0:
            failures.append(f"chronicle {' '.join(command)} exited {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}")
    return failures


LOG_POSITIONS = "SELECT notification_id FROM chronicle.events ORDER BY notification_id"
FEED_DEADLINE = 60.0  # seconds for a follower to read the whole feed


async def check_feed(report: Report, fleet: Fleet) -> list[str]:
    """The event feed holds each of the log's events once, in its order (after
    wait_until_projected, its position is the log's head)."""
    with fleet.target.connect(autocommit=True) as conn:
        logged = [row[0] for row in conn.execute(LOG_POSITIONS)]
    follower = await ChronicleClient.connect(
        fleet.users_url, fleet.token("faults-feed", {"roles": ["feed"]}), prefix=fleet.subject_prefix,
        timeout=CLIENT_TIMEOUT, nats_options={"error_cb": unreported},
    )
    fed: list[int] = []
    try:
        events = follower.events.follow(0, batch=500)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FEED_DEADLINE):
                while len(fed) < len(logged):
                    fed.append((await anext(events)).position)
        await events.aclose()
    finally:
        await follower.close()
    report.add("feed holds the log once, in order", float(fed == logged), note="1: yes")
    if fed == logged:
        return []
    missing, extra = sorted(set(logged) - set(fed)), len(fed) - len(set(fed))
    return [f"the feed holds {len(fed)} events of the log's {len(logged)}: missing {missing[:10]}, {extra} duplicated"]


def wait_until_projected(target: PostgresTarget, head: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while min(positions(target)[1].values() or [0]) < head:
        if time.monotonic() > deadline:
            raise RuntimeError(f"read models did not reach {head} within {timeout} s: {positions(target)[1]}")
        time.sleep(0.1)


@contextlib.contextmanager
def nats_node_fleet(servers: BenchServers, database_url: str, workdir: Path) -> Iterator[Fleet]:
    """Three nodes, three instances (instance n on node n only: it finds the others through
    the cluster), the second node killed."""
    with NatsCluster(workdir / "cluster").running() as cluster, contextlib.ExitStack() as stack:
        # (Each one's own URL comes in its settings; the URL of all nodes is for removing its streams.)
        first = ServiceProcess.fresh(database_url, cluster.service_url(), workdir / "service-1",
                                     {**FAST_SETTINGS, **cluster.service_settings(0)})
        services = [first] + [
            ServiceProcess(database_url, cluster.service_url(), first.subject_prefix, first.jwt_secret,
                           workdir / f"service-{n + 1}", settings={**FAST_SETTINGS, **cluster.service_settings(n)})
            for n in (1, 2)
        ]
        for service in services:
            service.workdir.mkdir(parents=True)
            service.start()
            stack.enter_context(service.stopped_afterwards())
        yield Fleet(cluster.users_url(), cluster.users_url(first=1), services, cluster.nodes[1].kill,
                    database_url, first.subject_prefix, first.token)


@contextlib.contextmanager
def instance_fleet(servers: BenchServers, database_url: str, workdir: Path) -> Iterator[Fleet]:
    """Two instances without projections and a standalone projection engine; the first instance killed."""
    no_engine = {**FAST_SETTINGS, "CHRONICLE_RUN_PROJECTIONS": "false"}
    first = ServiceProcess.fresh(database_url, servers.nats_url, workdir / "service-1", no_engine)
    second = ServiceProcess(database_url, servers.nats_url, first.subject_prefix, first.jwt_secret,
                            workdir / "service-2", settings=no_engine)
    engine = ServiceProcess(database_url, servers.nats_url, first.subject_prefix, first.jwt_secret,
                            workdir / "engine", settings=FAST_SETTINGS)
    with contextlib.ExitStack() as stack:
        for process, command, ready in ((engine, "projections run", "projections running"),
                                        (first, "serve", "ready"), (second, "serve", "ready")):
            process.workdir.mkdir(parents=True)
            process.start(command=command, ready=ready)
            stack.enter_context(process.stopped_afterwards())
        # The probe's replies come from whichever instance takes them: on one NATS server,
        # it "starts on" the killed instance only by chance; its figure is the fleet's.
        yield Fleet(servers.nats_url, servers.nats_url, [first, second], first.kill,
                    database_url, first.subject_prefix, first.token)


@contextlib.contextmanager
def single(database_url: str, nats_url: str, workdir: Path, settings: dict[str, str]) -> Iterator[ServiceProcess]:
    service = ServiceProcess.fresh(database_url, nats_url, workdir / "service", {**FAST_SETTINGS, **settings})
    service.workdir.mkdir(parents=True, exist_ok=True)
    service.start()
    with service.stopped_afterwards():
        yield service


@contextlib.contextmanager
def projection_child_fleet(servers: BenchServers, database_url: str, workdir: Path) -> Iterator[Fleet]:
    """One instance with its projection engine in a child process; the child killed (the
    service starts another)."""
    with single(database_url, servers.nats_url, workdir, {"CHRONICLE_PROJECTION_PROCESS": "true"}) as service:
        def kill_child() -> None:
            # (Each thread's children are listed under that thread: the engine is started from a worker thread.)
            children = [c for task in Path(f"/proc/{service.pid}/task").iterdir()
                        for c in (task / "children").read_text().split()]
            if not children:
                raise RuntimeError("the service has no projection child to kill")
            for child in children:
                os.kill(int(child), signal.SIGKILL)

        yield Fleet(servers.nats_url, servers.nats_url, [service], kill_child, database_url,
                    service.subject_prefix, service.token)


@contextlib.contextmanager
def postgres_restart_fleet(servers: BenchServers, database_url: str, workdir: Path) -> Iterator[Fleet]:
    """One instance on a Postgres of its own (embedded), restarted under load."""
    postgres = EmbeddedPostgres(workdir / "postgres")
    url = postgres.start()
    try:
        migrate(PostgresTarget(url))
        with single(url, servers.nats_url, workdir, {}) as service:
            def restart() -> None:
                postgres.stop()
                postgres.start()

            yield Fleet(servers.nats_url, servers.nats_url, [service], restart, url,
                        service.subject_prefix, service.token)
    finally:
        postgres.stop()


@contextlib.contextmanager
def nats_restart_fleet(servers: BenchServers, database_url: str, workdir: Path) -> Iterator[Fleet]:
    """One instance on a nats-server of its own, restarted under load (same port, same store)."""
    server = EmbeddedNats(workdir / "nats")
    url = server.start()
    try:
        with single(database_url, url, workdir, {}) as service:
            def restart() -> None:
                server.stop()
                server.start()

            yield Fleet(url, url, [service], restart, database_url, service.subject_prefix, service.token)
    finally:
        server.stop()


FLEETS = {
    "nats-node": nats_node_fleet,
    "instance": instance_fleet,
    "projection-child": projection_child_fleet,
    "postgres-restart": postgres_restart_fleet,
    "nats-restart": nats_restart_fleet,
}


def run_scenario(
    scenario: str, *, users: int = 8, seconds: float = 10.0, hitl: int = 6, jobs_count: int = 4,
    database_url: str | None = None, nats_url: str | None = None, keep: Path | None = None,
) -> tuple[Report, list[str]]:
    """One scenario from a fresh database; its report and its failed checks (none: it passed).
    `keep`: a directory for the processes' logs and stores, kept afterwards."""
    report = Report({"suite": "faults", "scenario": scenario, "users": users, "seconds": seconds})
    with bench_servers(database_url, nats_url) as servers, servers.fresh_database(False) as url, \
            scratch_or(keep, f"chronicle-faults-{scenario}-") as workdir:
        migrate(PostgresTarget(url))
        with FLEETS[scenario](servers, url, Path(workdir)) as fleet:
            tally = asyncio.run(load(fleet, users, seconds, hitl, jobs_count))
            failures = check(report, tally, fleet.target, fleet.database_url, Path(workdir))
            return report, failures + asyncio.run(check_feed(report, fleet))


@contextlib.contextmanager
def scratch_or(keep: Path | None, prefix: str) -> Iterator[str]:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
            yield scratch
    else:
        keep.mkdir(parents=True)
        yield str(keep)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__.splitlines()[0])
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"which to run: {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--users", type=int, default=8, help="users writing back to back (default 8)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of load, the kill half-way (default 10)")
    add_server_options(p, nats=False)
    p.add_argument("--nats-url", help="NATS URL for the instance scenario (default: local or embedded)")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep the processes' logs and stores in DIR/SCENARIO (a new directory) afterwards")
    args = p.parse_args(argv)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenario {', '.join(sorted(unknown))}; choose from {', '.join(SCENARIOS)}")
    failed = False
    for scenario in args.scenarios or SCENARIOS:
        print(f"scenario {scenario}", flush=True)
        report, failures = run_scenario(
            scenario, users=args.users, seconds=args.seconds, database_url=args.database_url, nats_url=args.nats_url,
            keep=args.keep / scenario if args.keep else None,
        )
        print(report.table())
        print(f"saved {report.save()}")
        for failure in failures:
            print(f"FAILED: {failure}")
        failed = failed or bool(failures)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
