"""`./dev bench edges`, the attacks on the bus: a victim's latency over NATS while one user
asks for costly Pareto fronts, floods the service with requests it refuses, or floods the
auth callout with bad connects, beside the same requests idle.

A closed nats-server (auth callout) of its own and a fresh `chronicle serve` with the
default per-user limits. The victim sends `sessions.list` one at a time (and, for the
connect flood, connects one at a time); every figure is the victim's, with the outcomes
that were not `ok` counted. With `--pin` the attacker gets a core of its own (CPU 1) and
the rest shares the other: what an attacker on another machine would leave, as near as
two cores allow.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import nats.errors
import orjson
from chronicle_client import ChronicleClient, ChronicleError

from adapters.auth import TokenAuthority
from adapters.embedded import BusSecrets, EmbeddedNats, free_port
from adapters.store.postgres import PostgresTarget, migrate
from bench.report import Report
from bench.servers import BenchServers
from bench.service import ServiceProcess, metric_values, unreported

PARETO_TRIALS, PARETO_OBJECTIVES = 2_000, 16
PARETO_IN_FLIGHT = 8  # the attacker's Pareto queries at once


async def ask(client: ChronicleClient, subject: str, payload: Mapping[str, object], *, token: str | None = None,
              timeout: float = 30.0) -> dict[str, object]:
    """One request as the client sends it, with a timeout and (optionally) another token in its header."""
    headers = {"Authorization": f"Bearer {token or client.token}"}
    reply = orjson.loads((await client.nc.request(f"{client.prefix}.{subject}", orjson.dumps(payload),
                                                   timeout=timeout, headers=headers)).data)
    if not reply.get("ok"):
        raise ChronicleError(reply["error"]["code"], reply["error"].get("message", ""))
    return dict(reply["data"])


async def victim_requests(client: ChronicleClient, samples: int, until: asyncio.Event | None = None) -> tuple[list[float], collections.Counter[str]]:
    """`samples` sessions.list one at a time (or, with `until`, as many as fit before it is set)."""
    latencies: list[float] = []
    outcomes: collections.Counter[str] = collections.Counter()
    while len(latencies) < samples if until is None else not until.is_set():
        started = time.perf_counter()
        try:
            await client.sessions.list()
            outcomes["ok"] += 1
        except ChronicleError as error:
            outcomes[error.code] += 1
        except Exception as error:  # (a timeout: counted, the victim goes on)
            outcomes[type(error).__name__] += 1
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies, outcomes


def not_ok(outcomes: collections.Counter[str]) -> str:
    bad = {code: n for code, n in outcomes.items() if code != "ok"}
    return ", ".join(f"{n} {code}" for code, n in sorted(bad.items())) or "all ok"


@contextlib.asynccontextmanager
async def running(work: Callable[[asyncio.Event], Awaitable[object]]) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.ensure_future(work(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


async def wide_optimization(client: ChronicleClient) -> object:
    """An optimization of PARETO_TRIALS trials, each scored on PARETO_OBJECTIVES metrics."""
    rng = random.Random(29)
    state = client.optimization(name="wide", optimizer="nsga", direction="maximize")
    round = await state.start_round()
    trials = [{"candidate": {"n": n}, "score": rng.random(),
               "metrics": {f"m{k}": rng.random() for k in range(PARETO_OBJECTIVES)}} for n in range(PARETO_TRIALS)]
    for start in range(0, len(trials), 500):
        await state.record_trials(round, trials[start:start + 500])
    return state.optimization_id


async def pareto_attack(service: ServiceProcess, url: str, victim: ChronicleClient, args: argparse.Namespace, report: Report) -> None:
    roles = {"roles": ["bulk"]} if args.pareto_attacker == "bulk" else {}
    token = TokenAuthority(secret=service.jwt_secret).issue("optimizer", claims=roles)
    attacker = await ChronicleClient.connect(url, token, prefix=service.subject_prefix)
    try:
        optimization_id = await wide_optimization(attacker)
        front_of = {"optimization_id": str(optimization_id), "objectives": [f"m{k}" for k in range(PARETO_OBJECTIVES)]}
        await ask(attacker, "query.optimizations.pareto", {**front_of, "min_position": attacker.last_position}, timeout=60)
        alone = []
        for _ in range(args.pareto_samples):
            started = time.perf_counter()
            front = await ask(attacker, "query.optimizations.pareto", front_of, timeout=60)
            alone.append((time.perf_counter() - started) * 1000)
        report.add_percentiles(f"optimizations.pareto round trip, {PARETO_TRIALS:,} trials x {PARETO_OBJECTIVES} objectives",
                               alone, note=f"front of {len(front['front']):,}")  # type: ignore[arg-type]
        subject = f"{service.subject_prefix}.query.optimizations.pareto"
        count, seconds = await asyncio.to_thread(service_seconds, int(service.settings["CHRONICLE_METRICS_PORT"]), subject)
        report.add("optimizations.pareto service time, mean (its chronicle_request_seconds)", seconds / count * 1000, "ms",
                   note=f"{count:.0f} queries, dispatch to reply")

        async def keep_asking(stop: asyncio.Event) -> None:
            async def one_after_another() -> None:
                while not stop.is_set():
                    with contextlib.suppress(ChronicleError, TimeoutError):
                        await ask(attacker, "query.optimizations.pareto", front_of, timeout=60)
            await asyncio.gather(*(one_after_another() for _ in range(PARETO_IN_FLIGHT)))

        async with running(keep_asking):
            await asyncio.sleep(0.5)  # (the attack in place: a load, not a negative being proved)
            latencies, outcomes = await victim_requests(victim, args.samples)
        report.add_percentiles(f"sessions.list, {PARETO_IN_FLIGHT} Pareto fronts at once", latencies, note=not_ok(outcomes))
    finally:
        await attacker.close()


def service_seconds(port: int, subject: str) -> tuple[float, float]:
    """The count and sum of a subject's chronicle_request_seconds, scraped from the service."""
    count, total = (f'chronicle_request_seconds_{part}{{subject="{subject}"}}' for part in ("count", "sum"))
    found = metric_values(port, (count, total))
    return found[count], found[total]


def forged(token: str) -> str:
    """The token with another signature: well formed, refused by its signature."""
    head, body, _ = token.split(".")
    return f"{head}.{body}.{base64.urlsafe_b64encode(os.urandom(32)).rstrip(b'=').decode()}"


async def flood_refused(url: str, prefix: str, token: str, count: int, window: int, seconds: float) -> dict[str, int]:
    """One user's `count` requests refused three ways in turn: over budget, a forged token in
    the header, an invalid payload; `window` of them in flight. Put off the bus (the flood
    brake), the attacker connects again at once and goes on, for at most `seconds` in all.
    Outcomes by code (`kicked`: cut off with the connection), connects refused, the rate."""
    bad = forged(token)
    sent = collections.Counter[str]()
    slots = asyncio.Semaphore(window)

    live: set[asyncio.Future[None]] = set()

    async def cut_off() -> None:  # its requests in flight go with the connection
        for task in live:
            task.cancel()

    options = {"allow_reconnect": False, "max_reconnect_attempts": 0, "error_cb": unreported, "closed_cb": cut_off}
    mallory = await ChronicleClient.connect(url, token, prefix=prefix, nats_options=options)
    print("flooding", flush=True)  # (the victim's timing starts with the flood)

    async def one(n: int, client: ChronicleClient) -> None:
        try:
            kind = n % 3
            payload: dict[str, object] = {"limit": 0} if kind == 2 else {}
            await ask(client, "query.sessions.list", payload, token=bad if kind == 1 else token, timeout=5)
            sent["ok"] += 1
        except ChronicleError as error:
            sent[error.code] += 1
        except (nats.errors.Error, asyncio.CancelledError):  # (cut off with the connection)
            sent["kicked"] += 1
        except Exception as error:
            sent[type(error).__name__] += 1
        finally:
            slots.release()

    started = time.perf_counter()
    deadline = started + seconds
    tasks, n = [], 0
    while n < count and time.perf_counter() < deadline:
        if mallory.nc.is_closed:
            try:
                mallory = await ChronicleClient.connect(url, token, prefix=prefix, nats_options=options)
            except nats.errors.Error:
                sent["connect_refused"] += 1
                continue
            sent["connects_again"] += 1
        await slots.acquire()
        task = asyncio.ensure_future(one(n, mallory))
        live.add(task)
        task.add_done_callback(live.discard)
        tasks.append(task)
        n += 1
    await asyncio.gather(*tasks, return_exceptions=True)
    with contextlib.suppress(Exception):  # (kicked as it closes)
        await mallory.close()
    return {**sent, "sent": n, "per_second": round(n / (time.perf_counter() - started))}


async def refused_flood(service: ServiceProcess, url: str, victim: ChronicleClient, args: argparse.Namespace, report: Report) -> None:
    """The victim's reads while another process floods (in the victim's, the flood's replies
    would slow the victim's own event loop)."""
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.edges_bus", "refused", url, service.subject_prefix, service.token("mallory"),
        str(args.refused), str(args.window), str(args.flood_seconds), stdout=asyncio.subprocess.PIPE,
    )
    if args.pin:
        pin(attacker.pid, ATTACKER_CPU)
    assert attacker.stdout is not None
    await attacker.stdout.readline()  # connected: the flood starts now, and the victim's timing with it
    done = asyncio.Event()
    output = asyncio.ensure_future(attacker.communicate())
    output.add_done_callback(lambda _: done.set())
    latencies, outcomes = await victim_requests(victim, 0, until=done)
    out, _ = await output
    sent = orjson.loads(out.splitlines()[-1])
    rate, total = sent.pop("per_second"), sent.pop("sent")
    connects = {key: sent.pop(key) for key in ("connect_refused", "connects_again") if key in sent}
    report.add_percentiles(
        f"sessions.list, one user's flood of {args.refused:,} refused requests", latencies,
        note=f"{not_ok(outcomes)}; {total:,} sent ({rate:,}/s): {not_ok(collections.Counter(sent))}"
             + "".join(f", {n:,} {key.replace('_', ' ')}" for key, n in connects.items()),
    )


async def bad_connect(host: str, port: int, token: str) -> bool:
    """A raw connect with `token`; whether the server refused it."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        await reader.readline()  # INFO
        connect = orjson.dumps({"auth_token": token, "verbose": False, "pedantic": False, "protocol": 1, "headers": True})
        writer.write(b"CONNECT " + connect + b"\r\nPING\r\n")
        return (await reader.readline()).startswith(b"-ERR")
    finally:
        writer.close()


async def flood_connects(host: str, port: int, per_second: int, good: str, stop: asyncio.Event) -> dict[str, int]:
    """Bad connects at `per_second` (forged signatures, malformed strings and one token refused
    again and again, in turn) until `stop`; how many were sent and how many not refused."""
    forged_once = forged(good)
    tokens = [lambda: forged(good), lambda: base64.urlsafe_b64encode(os.urandom(24)).decode(), lambda: forged_once]
    pending: set[asyncio.Future[bool]] = set()
    results: list[bool] = []
    n, started = 0, time.perf_counter()
    while not stop.is_set():
        due = int((time.perf_counter() - started) * per_second)
        while n < due and len(pending) < 2_000:
            task = asyncio.ensure_future(bad_connect(host, port, tokens[n % 3]()))
            pending.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(lambda done: results.append(not done.cancelled() and done.exception() is None
                                                               and done.result()))
            n += 1
        await asyncio.sleep(0.005)
    await asyncio.gather(*pending, return_exceptions=True)
    return {"sent": n, "per_second": round(n / (time.perf_counter() - started)), "not_refused": results.count(False)}


async def attacker_process(argv: list[str]) -> None:
    """`python -m bench.edges_bus connects HOST PORT PER_SECOND TOKEN` (until SIGTERM) or
    `python -m bench.edges_bus refused URL PREFIX TOKEN COUNT WINDOW SECONDS`: an attack in a process
    of its own; prints its counts as JSON."""
    if argv[0] == "refused":
        url, prefix, token, count, window, seconds = argv[1:7]
        print(orjson.dumps(await flood_refused(url, prefix, token, int(count), int(window), float(seconds))).decode(), flush=True)
        return
    host, port, per_second, good = argv[1], int(argv[2]), int(argv[3]), argv[4]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(orjson.dumps(await flood_connects(host, port, per_second, good, stop)).decode(), flush=True)


SERVERS_CPU, ATTACKER_CPU = {0}, {1}  # --pin: the attack on a core of its own


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of a process, and of its children, onto `cpus` (threads made later
    inherit it from their maker)."""
    with contextlib.suppress(OSError):  # (a thread or a child may end as we look)
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), cpus)
            for child in (task / "children").read_text().split():
                pin(int(child), cpus)


def cpu_seconds(pid: int) -> float:
    """The user and system CPU a process has used (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def connect_flood(
    service: ServiceProcess, url: str, nats_pid: int, args: argparse.Namespace, report: Report
) -> None:
    """A user connecting now and then, alone and while another process sends bad connects."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 4222
    good = service.token("connector")
    failed = collections.Counter[str]()

    async def victim_connects(count: int) -> list[float]:
        """A connect that fails (the server's 2 s wait for the callout, or ours of 5 s) counts
        with the time it took; none is tried again."""
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            try:
                client = await asyncio.wait_for(ChronicleClient.connect(url, good, prefix=service.subject_prefix, nats_options={
                    "allow_reconnect": False, "max_reconnect_attempts": 0, "connect_timeout": 5,
                    "error_cb": unreported}), 5.0)
            except Exception as error:
                failed[type(error).__name__] += 1
            else:
                await client.close()
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.02)
        return latencies

    alone = await victim_connects(args.connect_samples)
    report.add_percentiles("a user's connect, idle", alone, note=not_ok(failed))
    failed.clear()
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.edges_bus", "connects", host, str(port), str(args.connects_per_second), good,
        stdout=asyncio.subprocess.PIPE,
    )
    if args.pin:
        pin(attacker.pid, ATTACKER_CPU)
    processes = {"nats-server": nats_pid, "service (callout included)": service.pid, "attacker": attacker.pid}
    try:
        await asyncio.sleep(1.0)  # (the attack in place: a load, not a negative being proved)
        before, started = {name: cpu_seconds(pid) for name, pid in processes.items()}, time.perf_counter()
        latencies = await victim_connects(args.connect_samples)
        spent = {name: cpu_seconds(pid) - before[name] for name, pid in processes.items()}
        elapsed = time.perf_counter() - started
    finally:
        attacker.terminate()
        out, _ = await attacker.communicate()
    for name, seconds in spent.items():
        report.add(f"CPU during the connect flood: {name}", seconds / elapsed * 100, "% of a core")
    sent = orjson.loads(out.splitlines()[-1]) if out.strip() else {"per_second": 0, "not_refused": -1}
    report.add_percentiles(f"a user's connect, {args.connects_per_second:,} bad connects/s", latencies,
                           note=f"{not_ok(failed)}; {sent['per_second']:,}/s reached, {sent['not_refused']} not refused")


async def measure(service: ServiceProcess, url: str, nats_pid: int, args: argparse.Namespace, report: Report) -> None:
    # The victim's own budget holds all its samples (the bulk role: 100 times the default).
    token = TokenAuthority(secret=service.jwt_secret).issue("victim", claims={"roles": ["bulk"]})
    victim = await ChronicleClient.connect(url, token, prefix=service.subject_prefix)
    try:
        await victim_requests(victim, 20)  # warm
        latencies, outcomes = await victim_requests(victim, args.samples)
        report.add_percentiles("sessions.list, idle", latencies, note=not_ok(outcomes))
        attacks = set(args.attacks)
        if "pareto" in attacks:
            await pareto_attack(service, url, victim, args, report)
        if "refused" in attacks:
            await refused_flood(service, url, victim, args, report)
    finally:
        await victim.close()
    if "connects" in attacks:
        await connect_flood(service, url, nats_pid, args, report)


def run(servers: BenchServers, workdir: Path, args: argparse.Namespace, report: Report) -> None:
    auth = BusSecrets.new()
    nats_server = EmbeddedNats(workdir / "nats", auth=auth)
    users_url = nats_server.start()
    settings = {"CHRONICLE_NATS_CALLOUT_URL": auth.callout_url(users_url), "CHRONICLE_NATS_CALLOUT_SEED": auth.issuer_seed,
                "CHRONICLE_METRICS_PORT": str(free_port())}  # (the Pareto query's service time is read there)
    if args.flood_refusals is not None:
        settings["CHRONICLE_FLOOD_REFUSALS"] = str(args.flood_refusals)
    if args.pareto_attacker == "user":  # (only the caps on requests at once decide what the attacker gets)
        settings.update({"CHRONICLE_LIMIT_REQUESTS_PER_MINUTE": "0", "CHRONICLE_LIMIT_HEAVY_PER_MINUTE": "0"})
    try:
        with servers.fresh_database(False) as url:
            migrate(PostgresTarget(url))
            service = ServiceProcess.fresh(url, auth.service_url(users_url), workdir / "bus-service", settings)
            service.limited = True  # the default per-user limits: what the attacks run into
            service.workdir.mkdir()
            service.start()
            with service.stopped_afterwards():
                assert nats_server.process is not None
                if args.pin:  # (the victim, this process, beside the servers)
                    for pid in (nats_server.process.pid, service.pid, os.getpid()):
                        pin(pid, SERVERS_CPU)
                asyncio.run(measure(service, users_url, nats_server.process.pid, args, report))
    finally:
        nats_server.stop()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--attacks", nargs="+", default=["gateways", "pareto", "refused", "connects"],
                   choices=["gateways", "pareto", "refused", "connects"], help="which attacks to run (default all)")
    p.add_argument("--pareto-samples", type=int, default=10, help="Pareto queries timed alone (default 10)")
    p.add_argument("--pareto-attacker", choices=["bulk", "user"], default="bulk",
                   help="the Pareto attacker's token: an optimizer's (the bulk role: 100 times each limit) or a plain "
                        "user's, with the per-minute budgets lifted for the run so that only the caps on requests at "
                        "once decide (default bulk)")
    p.add_argument("--refused", type=int, default=30_000, help="requests in the refused flood (default 30,000)")
    p.add_argument("--window", type=int, default=500, help="the refused flood's requests in flight (default 500)")
    p.add_argument("--flood-seconds", type=float, default=5.0,
                   help="how long the refused flood's attacker goes on, connecting again when put off the bus (default 5)")
    p.add_argument("--flood-refusals", type=int, default=None,
                   help="the service's CHRONICLE_FLOOD_REFUSALS (default: its own; 0: no flood brake, as before it)")
    p.add_argument("--connects-per-second", type=int, default=2_000, help="bad connects a second (default 2,000)")
    p.add_argument("--connect-samples", type=int, default=100, help="a user's connects timed per case (default 100)")
    p.add_argument("--pin", action="store_true",
                   help="the floods' attacker on CPU 1, nats-server, the service and the victim on CPU 0 (default: "
                        "all on the same cores, as the scheduler places them)")


if __name__ == "__main__":
    asyncio.run(attacker_process(sys.argv[1:]))
