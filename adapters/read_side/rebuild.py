"""Rebuilding a read model from the first event into fresh tables, swapped in when done."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable

from psycopg.sql import SQL, Identifier

from adapters.read_side.batcher import Batcher
from adapters.read_side.parking import apply_isolating, passing_errors
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
    (GIN) indexes are built once after loading, and the tables are vacuumed and analysed
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


def _rebuild(
    target: PostgresTarget,
    read_model: ReadModel,
    batch_size: int,
    progress: Callable[[int, int], None],
    only_if_outdated: bool,
    keys: KeyRing,
) -> int:
    name = read_model.name
    live = read_model.build()
    scratch = read_model.build(f"{read_model.live_schema}__rebuild")
    live_view, scratch_view = postgres_view(live), postgres_view(scratch)
    batcher = Batcher(scratch, f"{name}__rebuild", batch_size, keys)
    applied = 0
    with target.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"rebuild:{name}",))
        if only_if_outdated and tracked_version(conn, name) == live.version:
            return 0
        with conn.transaction():
            create_schema(conn, scratch_view, defer_bulk_indexes=True)
            conn.execute("DELETE FROM chronicle.projections WHERE name = %s", (batcher.tracking_name,))
            # What was parked is tried again: fixed, it is applied; else parked anew.
            conn.execute("DELETE FROM chronicle.parked WHERE consumer = %s", (name,))
            batcher.ensure_tracking(conn)
        total = head_position(conn)
        while True:
            try:
                count, position = batcher.apply_batch(conn, up_to=total)
            except passing_errors(scratch):
                raise
            except Exception:  # some event of the batch this projection cannot apply: park it
                log.exception("rebuild batch failed; finding the event", extra={"projection": name})
                count = apply_isolating(conn, batcher, up_to=total)
                position = tracked_position(conn, batcher.tracking_name)
            applied += count
            progress(position, total)
            if position >= total:
                break
        for statement in scratch_view.create_statements(deferred=True):
            conn.execute(statement)
        vacuum_analyze(conn, scratch_view.schema)
        with conn.transaction():
            Batcher(live, name, batch_size).ensure_tracking(conn)
            conn.execute(LOCK_TRACKING, (name,))
            while True:  # catch up with what arrived meanwhile, holding the live row
                count, position = batcher.apply_batch_in(conn)
                applied += count
                if count == 0:
                    break
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(live_view.schema)))
            conn.execute(
                SQL("ALTER SCHEMA {} RENAME TO {}").format(Identifier(scratch_view.schema), Identifier(live_view.schema))
            )
            conn.execute(SET_TRACKING, (position, live.version, name))
            conn.execute("DELETE FROM chronicle.projections WHERE name = %s", (batcher.tracking_name,))
            conn.execute("SELECT pg_notify(%s, %s)", (PROGRESS_CHANNEL, f"{name}:{position}"))
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"rebuild:{name}",))
        progress(position, max(total, position))
    return applied


def rebuild_all(
    target: PostgresTarget,
    read_models: list[ReadModel],
    *,
    batch_size: int = 2000,
    progress: Callable[[str, int, int], None] = lambda name, done, total: None,
) -> dict[str, int]:
    """Rebuild several read models side by side (one thread each: while one waits on
    Postgres another runs Python), sharing one key ring; returns events applied per read model."""
    applied: dict[str, int] = {}

    def one(keys: KeyRing, read_model: ReadModel) -> None:
        applied[read_model.name] = rebuild(
            target,
            read_model,
            batch_size=batch_size,
            progress=lambda done, total: progress(read_model.name, done, total),
            keys=keys,
        )

    with contextlib.closing(KeyRing(target)) as keys:
        side_by_side({f"rebuild-{r.name}": functools.partial(one, keys, r) for r in read_models})
    return applied


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
