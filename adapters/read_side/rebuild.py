"""Rebuilding a read model from the first event into fresh tables, swapped in when done."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import psycopg
from psycopg.sql import SQL, Identifier

from adapters.read_side.batcher import Batcher
from adapters.read_side.gin_merger import merging
from adapters.read_side.parking import apply_isolating, passing_errors
from adapters.read_side.together import apply_together
from adapters.read_side.tracking import (
    LOCK_TRACKING,
    PROGRESS_CHANNEL,
    SET_TRACKING,
    head_position,
    tracked_position,
    tracked_version,
)
from adapters.read_side.view import ReadModel, create_schema, postgres_view, vacuum_analyze
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget

log = logging.getLogger(__name__)

# maintenance_work_mem while a rebuild builds its bulk (GIN) indexes: the default 64 MB
# holds the entries of a few hundred thousand messages, and a larger build spills and merges.
INDEX_BUILD_MEMORY = "256MB"
FINISHING_AT_ONCE = 2  # read models finished side by side after one pass (each its own connection)

def rebuild(
    target: PostgresTarget,
    read_model: ReadModel,
    *,
    batch_size: int = 2000,
    progress: Callable[[int, int], None] = lambda done, total: None,
    only_if_outdated: bool = False,
    keys: KeyRing | None = None,
) -> int:
    """Rebuild a read model from the first event into fresh tables, then swap them in.

    Queries keep reading the old tables until the swap, which happens in one transaction
    holding the live tracking row, so the live runner pauses for just that moment. Bulk
    (GIN) indexes are built once after loading (a view's `merged_while_loading` ones are
    made with their table and merged while it loads), and the tables are vacuumed and analysed
    before they go live. One rebuild per read model at a time, fleet-wide; with
    `only_if_outdated`, a rebuild that finds the read model current (another process just
    built it) does nothing. Returns the number of events applied. Without `keys`, a key
    ring of its own reads the sealed content.
    """
    with contextlib.ExitStack() as owned:
        if keys is None:
            keys = KeyRing(target)
            owned.callback(keys.close)
        return _rebuild(target, read_model, batch_size, progress, only_if_outdated, keys)


class Rebuilding:
    """One read model's rebuild in its phases: `begin` (fresh tables, tracking from zero),
    loading (a batcher per read model, or one pass for several), then `finish` (bulk indexes,
    vacuum, catch-up and swap in one transaction holding the live tracking row)."""

    def __init__(self, read_model: ReadModel, batch_size: int, keys: KeyRing):
        self.name = read_model.name
        self.live = read_model.build()
        self.scratch = read_model.build(f"{read_model.live_schema}__rebuild")
        self.live_view, self.scratch_view = postgres_view(self.live), postgres_view(self.scratch)
        self.batcher = Batcher(self.scratch, f"{self.name}__rebuild", batch_size, keys)
        self.batch_size = batch_size
        self.lock = f"rebuild:{self.name}"

    def begin(self, conn: psycopg.Connection, only_if_outdated: bool) -> bool:
        """Take the read model's rebuild lock and lay fresh tables; False (and the lock let
        go) when `only_if_outdated` and the read model is current."""
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (self.lock,))
        if only_if_outdated and tracked_version(conn, self.name) == self.live.version:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self.lock,))
            return False
        with conn.transaction():
            create_schema(conn, self.scratch_view, defer_bulk_indexes=True)
            conn.execute("DELETE FROM chronicle.projections WHERE name = %s", (self.batcher.tracking_name,))
            # What was parked is tried again: fixed, it is applied; else parked anew.
            conn.execute("DELETE FROM chronicle.parked WHERE consumer = %s", (self.name,))
            self.batcher.ensure_tracking(conn)
        return True

    def apply_alone(self, conn: psycopg.Connection, up_to: int) -> tuple[int, int]:
        """The next batch for this read model alone; an event it cannot apply is parked.
        Returns (events applied, new position)."""
        try:
            return self.batcher.apply_batch(conn, up_to=up_to)
        except passing_errors(self.scratch):
            raise
        except Exception:  # some event of the batch this projection cannot apply: park it
            log.exception("rebuild batch failed; finding the event", extra={"projection": self.name})
            count = apply_isolating(conn, self.batcher, up_to=up_to)
            return count, tracked_position(conn, self.batcher.tracking_name)

    def finish(self, conn: psycopg.Connection) -> tuple[int, int]:
        """Bulk indexes, vacuum, then the swap; returns (events applied catching up, position).
        The rebuild lock stays with the connection that took it, until `release`."""
        applied = 0
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (INDEX_BUILD_MEMORY,))
        for statement in self.scratch_view.create_statements(deferred=True):
            conn.execute(statement)
        conn.execute("RESET maintenance_work_mem")
        vacuum_analyze(conn, self.scratch_view.schema)
        with conn.transaction():
            Batcher(self.live, self.name, self.batch_size).ensure_tracking(conn)
            conn.execute(LOCK_TRACKING, (self.name,))
            while True:  # catch up with what arrived meanwhile, holding the live row
                count, position = self.batcher.apply_batch_in(conn)
                applied += count
                if count == 0:
                    break
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(self.live_view.schema)))
            conn.execute(SQL("ALTER SCHEMA {} RENAME TO {}").format(
                Identifier(self.scratch_view.schema), Identifier(self.live_view.schema)))
            conn.execute(SET_TRACKING, (position, self.live.version, self.name))
            conn.execute("DELETE FROM chronicle.projections WHERE name = %s", (self.batcher.tracking_name,))
            conn.execute("SELECT pg_notify(%s, %s)", (PROGRESS_CHANNEL, f"{self.name}:{position}"))
        return applied, position

    def release(self, conn: psycopg.Connection) -> None:
        """Let go of the rebuild lock `begin` took on this connection."""
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self.lock,))


def _rebuild(
    target: PostgresTarget,
    read_model: ReadModel,
    batch_size: int,
    progress: Callable[[int, int], None],
    only_if_outdated: bool,
    keys: KeyRing,
) -> int:
    rebuilding = Rebuilding(read_model, batch_size, keys)
    applied = 0
    with target.connect(autocommit=True) as conn:
        if not rebuilding.begin(conn, only_if_outdated):
            return 0
        total = head_position(conn)
        with merging(target, merged_while_loading([rebuilding])):
            while True:
                count, position = rebuilding.apply_alone(conn, total)
                applied += count
                progress(position, total)
                if position >= total:
                    break
        caught_up, position = rebuilding.finish(conn)
        rebuilding.release(conn)
        progress(position, max(total, position))
    return applied + caught_up


def merged_while_loading(rebuilding: list[Rebuilding]) -> list[str]:
    """The scratch schemas with a GIN index to merge while loading (PostgresView.merged_while_loading)."""
    return [r.scratch_view.schema for r in rebuilding if r.scratch_view.merged_while_loading]


Progress = Callable[[str, int, int], None]  # (read model, position reached, position to reach)


class Apart(Protocol):
    """A helper process loading and finishing (`load`) read models of a rebuild that this
    process began: their fresh tables laid and their rebuild locks held here."""

    def result(self) -> dict[str, int]:
        """Events applied per read model, once it has ended; raises what failed it."""

    def stop(self) -> None:
        """Ended now (killed if still running)."""


class Helper(Protocol):
    """What starts helper processes for rebuilds of long logs. All read models but the
    heaviest go to the helper: the search read model alone takes about as long as all
    the others together, Python and Postgres work a second core can do meanwhile."""

    from_events: int  # a rebuild of a shorter log does without (starting one costs more than it saves)

    def start(self, names: list[str], total: int, batch_size: int, progress: Progress) -> Apart:
        """A helper loading the named read models up to the log's position `total`."""


def rebuild_all(
    target: PostgresTarget,
    read_models: list[ReadModel],
    *,
    batch_size: int = 2000,
    progress: Progress = lambda name, done, total: None,
    only_if_outdated: bool = False,
    keys: KeyRing | None = None,
    helper: Helper | None = None,
) -> dict[str, int]:
    """Rebuild several read models in one pass over the log: each event is read, opened
    and decoded once and applied by every read model that wants it, a batch of them per
    transaction with all their tracking positions; then each is swapped in as `rebuild`
    does. A batch some read model cannot apply is applied read model by read model
    instead (the failing event parked), and the pass goes on. The read models are then
    finished (bulk indexes, vacuum, swap) `FINISHING_AT_ONCE` at a time. With a `helper`
    and a log of its `from_events` or more, this process loads and finishes only the
    heaviest read model, and the helper's process the others meanwhile, in a pass of its
    own. Returns events applied per read model (those found current with
    `only_if_outdated` are left out)."""
    with contextlib.ExitStack() as owned:
        if keys is None:
            keys = KeyRing(target)
            owned.callback(keys.close)
        # (locks in name order: two rebuilds of overlapping sets cannot deadlock)
        everyone = sorted((Rebuilding(r, batch_size, keys) for r in read_models), key=lambda r: r.name)
        with target.connect(autocommit=True) as conn:
            rebuilding = [r for r in everyone if r.begin(conn, only_if_outdated)]
            if not rebuilding:
                return {}
            total = head_position(conn)
            here, there = rebuilding, []
            if helper is not None and len(rebuilding) > 1 and total >= helper.from_events:
                heaviest = max(rebuilding, key=lambda r: r.live.weight)
                here, there = [heaviest], [r for r in rebuilding if r is not heaviest]
            with contextlib.ExitStack() as helping:
                apart = None
                if helper is not None and there:
                    log.info("rebuilding with a helper process", extra={
                        "here": [r.name for r in here], "helper": [r.name for r in there], "events": total})
                    apart = helper.start([r.name for r in there], total, batch_size, progress)
                    helping.callback(apart.stop)
                result = load(target, conn, here, total, batch_size, progress)
                if apart is not None:
                    result.update(apart.result())
            for r in rebuilding:
                r.release(conn)
        return result


def load(
    target: PostgresTarget,
    conn: psycopg.Connection,
    rebuilding: list[Rebuilding],
    total: int,
    batch_size: int,
    progress: Progress = lambda name, done, total: None,
) -> dict[str, int]:
    """Load begun read models up to the log's position `total` in one pass on `conn`, then
    finish each (its own connection, `FINISHING_AT_ONCE` at a time, heaviest first).
    Returns events applied per read model."""
    applied: Counter[str] = Counter()
    batchers = [r.batcher for r in rebuilding]
    passing = tuple({error for r in rebuilding for error in passing_errors(r.scratch)})
    with merging(target, merged_while_loading(rebuilding)):
        while True:
            try:
                with conn.transaction():
                    _, done = apply_together(conn, batchers, batch_size, up_to=total)
            except passing:
                raise
            except Exception:  # some read model cannot apply an event of the batch
                log.exception("one-pass rebuild batch failed; applying read model by read model")
                done = Counter({r.batcher.tracking_name: r.apply_alone(conn, total)[0] for r in rebuilding})
            applied.update(done)
            positions: dict[str, int] = dict(conn.execute(
                "SELECT name, position FROM chronicle.projections WHERE name = ANY(%s)",
                ([b.tracking_name for b in batchers],)).fetchall())
            for r in rebuilding:
                progress(r.name, positions[r.batcher.tracking_name], total)
            if min(positions.values()) >= total:
                break
    result = {}

    def finish(r: Rebuilding) -> None:
        with target.connect(autocommit=True) as own:
            caught_up, position = r.finish(own)
        progress(r.name, position, max(total, position))
        result[r.name] = applied[r.batcher.tracking_name] + caught_up

    # Side by side: one read model's GIN index is built (Postgres, one core) while
    # another's is, or is vacuumed, or catches up (Python); heaviest first.
    with ThreadPoolExecutor(FINISHING_AT_ONCE, thread_name_prefix="rebuild-finish") as pool:
        finishing = [pool.submit(finish, r) for r in sorted(rebuilding, key=lambda r: -r.live.weight)]
    for future in finishing:
        future.result()  # (raises the first failure)
    return result


def side_by_side(calls: dict[str, Callable[[], object]]) -> None:
    """Run each call in its own named thread and wait for all; the first failure is raised
    once every one has finished."""
    failures: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as error:  # handed to the caller's thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(call,), name=name) for name, call in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
