"""`./dev bench fairness`: other users' latency while one user floods, with the default per-user limits.

Starts `chronicle serve` on a fresh database with its default limits (seed 001's: 100
requests a minute per user), then `--users` users each list their conversations once a
second (well inside the limit) for `--seconds`: first alone (idle), then while one more
user sends 100 times that rate (and more in flight than its share). Prints the users'
p50/p99 in both phases, how many of the flood's requests were served and refused, and the
ratio of the p99s; the aim (issue #18) is at most 2x. With `--instances N`, N services share
the queue group (one runs the projections): the flood's served count shows that a user has
one budget across them (N budgets when each counted alone).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import tempfile
import time
from pathlib import Path

from chronicle_client import ChronicleClient, ChronicleError

from adapters.store.postgres import PostgresTarget, migrate
from bench.report import Report, percentile, show, under
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess, add_service_setting_option, service_settings

NORMAL_PER_SECOND = 1.0
FLOOD_FACTOR = 100


async def steady_user(client: ChronicleClient, seconds: float, latencies: list[float], errors: list[str]) -> None:
    """One request a second (the phase's users start spread over the first second)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        try:
            await client.conversations.list()
            latencies.append((time.perf_counter() - started) * 1000)
        except ChronicleError as error:
            errors.append(error.code)
        await asyncio.sleep(max(0.0, 1.0 / NORMAL_PER_SECOND - (time.perf_counter() - started)))


async def flood(client: ChronicleClient, seconds: float, outcomes: dict[str, int]) -> None:
    """100 times the normal rate, each request fired without waiting for the last."""
    deadline = time.perf_counter() + seconds
    pending: set[asyncio.Task[object]] = set()

    async def one() -> None:
        try:
            await client.conversations.list()
            outcomes["served"] += 1
        except ChronicleError as error:
            outcomes[error.code] = outcomes.get(error.code, 0) + 1

    while time.perf_counter() < deadline:
        task = asyncio.create_task(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
        await asyncio.sleep(1.0 / (NORMAL_PER_SECOND * FLOOD_FACTOR))
    await asyncio.gather(*pending)


async def phase(users: list[ChronicleClient], seconds: float, flooder: ChronicleClient | None) -> dict[str, object]:
    latencies: list[float] = []
    errors: list[str] = []
    outcomes = {"served": 0}

    async def staggered(n: int, client: ChronicleClient) -> None:
        await asyncio.sleep(n / len(users))
        await steady_user(client, seconds, latencies, errors)

    work = [staggered(n, c) for n, c in enumerate(users)]
    if flooder is not None:
        work.append(flood(flooder, seconds, outcomes))
    await asyncio.gather(*work)
    return {"latencies": latencies, "errors": errors, "flood": outcomes}


async def measure(url: str, service: ServiceProcess, users: int, seconds: float, report: Report) -> None:
    clients = [
        await ChronicleClient.connect(url, service.token(f"steady-{n}"), prefix=service.subject_prefix)
        for n in range(users)
    ]
    flooder = await ChronicleClient.connect(url, service.token("flooder"), prefix=service.subject_prefix)
    try:
        for client in clients:  # something to list
            await client.conversations.start(title="fair share")
        await phase(clients, 3.0, None)  # warm up (pooled connections, prepared statements): not measured
        idle = await phase(clients, seconds, None)
        loaded = await phase(clients, seconds, flooder)
    finally:
        for client in (*clients, flooder):
            await client.close()
    idle_p99 = percentile(idle["latencies"], 99)  # type: ignore[arg-type]
    loaded_p99 = percentile(loaded["latencies"], 99)  # type: ignore[arg-type]
    report.add_percentiles("steady users, alone", idle["latencies"], note=f"{users} users, 1 list/s each")  # type: ignore[arg-type]
    report.add_percentiles("steady users, one user flooding", loaded["latencies"])  # type: ignore[arg-type]
    report.add("p99 with the flood / p99 alone", loaded_p99 / idle_p99 if idle_p99 else 0.0, "x", under(2.0))
    report.add("steady users' errors (both phases)", len(idle["errors"]) + len(loaded["errors"]))  # type: ignore[arg-type]
    flood_outcomes: dict[str, int] = loaded["flood"]  # type: ignore[assignment]
    report.add("flood requests served", flood_outcomes.get("served", 0),
               note=f"{FLOOD_FACTOR} x the normal rate for {seconds:.0f} s")
    report.add("flood requests refused (rate_limited)", flood_outcomes.get("rate_limited", 0))


def run(
    users: int, seconds: float, database_url: str | None, nats_url: str | None, instances: int = 1,
    settings: dict[str, str] | None = None,
) -> tuple[Report, Path]:
    report = Report({"suite": "fairness", "users": users, "seconds": seconds, "instances": instances, **(settings or {})})
    with bench_servers(database_url, nats_url) as servers, servers.fresh_database(False) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-fairness-") as workdir, contextlib.ExitStack() as stack:
        migrate(PostgresTarget(url))
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir), settings)
        service.limited = True  # the service's default limits are what this measures
        service.start()
        stack.enter_context(service.stopped_afterwards())
        for n in range(1, instances):  # more of the same service: its subjects, secret and database
            (Path(workdir) / f"instance-{n}").mkdir()
            other = dataclasses.replace(
                service, workdir=Path(workdir) / f"instance-{n}", process=None,
                settings={**service.settings, "CHRONICLE_RUN_PROJECTIONS": "false"},
            )
            other.start()
            stack.enter_context(other.stopped_afterwards())
        asyncio.run(measure(servers.nats_url, service, users, seconds, report))
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench fairness", description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=20, help="steady users (default 20)")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of each phase (default 20)")
    p.add_argument("--instances", type=int, default=1, help="services sharing the queue group (default 1)")
    add_server_options(p)
    add_service_setting_option(p)
    args = p.parse_args(argv)
    show(*run(args.users, args.seconds, args.database_url, args.nats_url, args.instances,
              service_settings(args.service_setting)))


if __name__ == "__main__":
    main()
