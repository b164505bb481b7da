"""Full rebuild of every read model from the first event, in process, as `chronicle projections rebuild`.

`./dev bench rebuild` seeds a history into a fresh database and rebuilds every read model
three ways, for `--rounds` (the order reversed every other round): in one pass with a helper
process (`rebuild_all`, what `chronicle projections rebuild all` and the first start do:
each event read and decoded once for all read models but the heaviest, which the helper
loads meanwhile in a pass of its own), in one pass in one process (before the helper), and
side by side with a thread and a pass of its own per read model (before the one pass).
Then `projections verify` of every read model (each rebuilt aside on its own and compared
with the live tables). Prints events/s of the log for each way, and what a read model's
COPY of a batch and its read of the log cost a row in text (as before) and in binary (as now).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg.sql import SQL

from adapters.read_side.rebuild import rebuild, rebuild_all, side_by_side
from adapters.read_side.verify import verify
from adapters.read_side.view import binary_types
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget, migrate
from bench.cpu import process_cpu_seconds, stat_fields
from bench.report import Report, over
from bench.seed import Scale, seed
from bench.servers import add_server_options, bench_servers
from bench.service import positions
from entrypoints.read_models import PROJECTIONS, postgres_read_model, postgres_read_models
from entrypoints.rebuild_helper import rebuild_helper
from entrypoints.settings import Settings

REBUILD_AIM = 50_000  # events/s (#33)


@dataclass(frozen=True)
class Rebuilt:
    name: str
    log_events: int  # positions read through: the whole log
    applied: int  # events of the types this read model handles
    seconds: float

    @property
    def log_events_per_second(self) -> float:
        return self.log_events / self.seconds

    @property
    def applied_per_second(self) -> float:
        return self.applied / self.seconds


def rebuild_together(target: PostgresTarget, settings: Settings, helped: bool = True) -> float:
    """Seconds to rebuild every read model at once in one pass over the log, as `chronicle
    projections rebuild all` does: with a helper process loading all of them but the
    heaviest meanwhile, or (`helped` False, the way before the helper, kept to compare)
    all of them in this process."""
    started = time.perf_counter()
    rebuild_all(
        target,
        postgres_read_models(settings, PROJECTIONS),
        batch_size=settings.projection_batch_size,
        helper=rebuild_helper(settings, target) if helped else None,
    )
    return time.perf_counter() - started


def rebuild_in_threads(target: PostgresTarget, settings: Settings) -> float:
    """Seconds to rebuild every read model with a thread and a pass over the log each, sharing
    one key ring (the way before the one pass; kept to compare)."""
    started = time.perf_counter()
    with contextlib.closing(KeyRing(target)) as keys:
        side_by_side({
            f"rebuild-{r.name}": functools.partial(rebuild, target, r, batch_size=settings.projection_batch_size,
                                                   keys=keys)
            for r in postgres_read_models(settings, PROJECTIONS)
        })
    return time.perf_counter() - started


def rebuild_each(target: PostgresTarget, settings: Settings, log_events: int) -> list[Rebuilt]:
    """Rebuild each read model in turn (nothing else running), timing each."""
    results = []
    for projection_class in PROJECTIONS:
        started = time.perf_counter()
        applied = rebuild(
            target,
            postgres_read_model(settings, projection_class),
            batch_size=settings.projection_batch_size,
        )
        results.append(Rebuilt(projection_class.name, log_events, applied, time.perf_counter() - started))
    return results


WAYS: dict[str, Callable[[PostgresTarget, Settings], float]] = {
    "one pass and a helper process": rebuild_together,
    "one pass in one process": functools.partial(rebuild_together, helped=False),
    "a thread and a pass each": rebuild_in_threads,
}


def cpu_per_row(conn: psycopg.Connection, rows: int, work: Callable[[], None]) -> tuple[float, float | None]:
    """µs of CPU a row that `work()` costs this thread and the connection's Postgres backend
    (None when the backend's /proc is not readable: a server on another host)."""
    backend_pid = conn.info.backend_pid
    local = bool(stat_fields(backend_pid))
    before, started = process_cpu_seconds(backend_pid), time.thread_time()
    work()
    python = (time.thread_time() - started) * 1e6 / rows
    backend = (process_cpu_seconds(backend_pid) - before) * 1e6 / rows if local else None
    return python, backend


def shown(figure: tuple[float, float | None]) -> str:
    return f"{figure[0]:.1f} µs" + ("" if figure[1] is None else f" + Postgres {figure[1]:.1f} µs")


def formats(report: Report, url: str, rows: int = 100, batches: int = 300) -> None:
    """What a read model pays a row, in text as before and in binary as it does now: COPYing
    `rows` sealed messages (the history's messages table: uuid, bigint, ~400 bytes sealed),
    and reading `rows` events of the log (each event's state comes as it is, not as hex)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE copied (conversation_id uuid, seq bigint, message bytea)")
        types = binary_types(conn.cursor(), SQL("copied").format(), ["conversation_id", "seq", "message"])
        values = [(uuid.uuid4(), seq, os.urandom(400)) for seq in range(rows)]

        def copy(binary: bool) -> None:
            for _ in range(batches):
                with conn.cursor() as cur, cur.copy(
                    "COPY copied (conversation_id, seq, message) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")
                ) as copy:
                    if binary:
                        copy.set_types(types)
                    for row in values:
                        copy.write_row(row)

        def read(binary: bool) -> None:
            for batch in range(batches):
                conn.execute(READ_EVENTS, (batch * rows, rows), prepare=True, binary=binary).fetchall()

        for name, work in (("COPY of sealed messages", copy), ("read of the log's events", read)):
            text, binary = (cpu_per_row(conn, rows * batches, functools.partial(work, b)) for b in (False, True))
            report.add(f"a read model's {name}, {rows} at a time, per row", binary[0], "µs",
                       note=f"binary: {shown(binary)}; text: {shown(text)}")


READ_EVENTS = (
    "SELECT notification_id, originator_id, originator_version, topic, state FROM chronicle.events"
    " WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
)


def run(scale: Scale, rounds: int, database_url: str | None) -> Report:
    load_before = os.getloadavg()
    report = Report({"suite": "rebuild", "scale": vars(scale), "rounds": rounds})
    settings = Settings.model_construct()  # the service's defaults
    with bench_servers(database_url, None) as servers, servers.fresh_database(False) as url:
        target = PostgresTarget(url)
        migrate(target)
        print(f"seeding {scale.messages:,} messages", flush=True)
        seed(target, scale)
        head, _ = positions(target)
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        for n in range(rounds):
            for way in (list(WAYS) if n % 2 == 0 else list(WAYS)[::-1]):
                print(f"round {n + 1}/{rounds}: rebuild all, {way}", flush=True)
                seconds[way].append(WAYS[way](target, settings))
        formats(report, url)
        rebuild_together(target, settings)  # the live tables verified below are the one pass's
        results = [verify(target, postgres_read_model(settings, p), batch_size=settings.projection_batch_size)
                   for p in PROJECTIONS]
    load_after = os.getloadavg()
    for way, values in seconds.items():
        rates = [head / s for s in values]
        report.add(f"rebuild all, {way}", statistics.median(rates), "events/s", over(REBUILD_AIM),
                   note=f"{head:,} events; rounds {min(rates):,.0f}–{max(rates):,.0f}")
    report.add("read models equal to each rebuilt on its own (verify)", sum(r.ok for r in results), "",
               note=f"of {len(results)}")
    report.details.update(load_before=load_before, load_after=load_after, seconds=seconds)
    print(f"load average: {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end")
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench rebuild", description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000, help="messages seeded (default 200,000)")
    p.add_argument("--conversations", type=int, default=4_000, help="conversations seeded (default 4,000)")
    p.add_argument("--users", type=int, default=20, help="users owning them (default 20)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of every way, in turn (default 2)")
    add_server_options(p, nats=False)
    args = p.parse_args(argv)
    report = run(Scale(users=args.users, conversations=args.conversations, messages=args.messages),
                 args.rounds, args.database_url)
    print(report.table())
    print(f"\nsaved {report.save()}")


if __name__ == "__main__":
    main()
