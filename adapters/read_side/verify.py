"""Verifies a read model: rebuilds it from the events into scratch tables and compares row by row.

The scratch copy (`rm_NAME__verify`) is built with the projection's own code, exactly as
`rebuild` would, but is never swapped in: the live tables and their tracking row are only
read. Comparison is in SQL, one `EXCEPT ALL` each way per table, so duplicates count too.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.sql import SQL, Identifier

from adapters.read_side.batcher import Batcher
from adapters.read_side.compare import TableComparison, compare
from adapters.read_side.view import PostgresView, ReadModel, create_schema, postgres_view
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from projections.view import Projection

log = logging.getLogger(__name__)

SHOWN_DIFFERENCES = 10  # rows shown per read model
SAMPLE_TEXT = 160  # longer text values are cut when shown

TRACKING = SQL("SELECT position, version FROM chronicle.projections WHERE name = %s")
DELETE_TRACKING = SQL("DELETE FROM chronicle.projections WHERE name = %s")
# The lock `rebuild` holds: a swap must not replace the live tables mid-comparison, and
# two verifies of one read model would share the scratch schema.
LOCK_READ_MODEL = SQL("SELECT pg_advisory_lock(hashtext('rebuild:' || %s))")


@dataclass
class Verification:
    name: str
    position: int = 0
    tables: list[TableComparison] = field(default_factory=list)
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None and all(t.matches for t in self.tables)


def verify(
    target: PostgresTarget,
    read_model: ReadModel,
    *,
    batch_size: int = 2000,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Verification:
    """Rebuild a read model into scratch tables up to the live read model's position and
    compare; the scratch tables are dropped afterwards, whatever happens."""
    live = read_model.build()
    scratch = read_model.build(f"{read_model.live_schema}__verify")
    keys = KeyRing(target)
    batcher = Batcher(scratch, f"{read_model.name}__verify", batch_size, keys)
    with contextlib.closing(keys), target.connect(autocommit=True) as conn:
        conn.execute(LOCK_READ_MODEL, (read_model.name,))
        try:
            return _build_and_compare(conn, live, scratch, batcher, progress)
        finally:
            _drop_scratch(conn, postgres_view(scratch), batcher)


def _build_and_compare(
    conn: psycopg.Connection,
    live: Projection[Any],
    scratch: Projection[Any],
    batcher: Batcher,
    progress: Callable[[int, int], None],
) -> Verification:
    result = Verification(live.name)
    with conn.transaction():
        # Bulk (GIN) indexes only serve queries; the comparison does not need them.
        create_schema(conn, postgres_view(scratch), defer_bulk_indexes=True)
        conn.execute(DELETE_TRACKING, (batcher.tracking_name,))
        batcher.ensure_tracking(conn)
    tracked = conn.execute(TRACKING, (live.name,)).fetchone()
    if tracked is None:
        result.problem = "no live read model: its projection has never run"
        return result
    # Most of the work in short transactions, up to where the live read model stood when we
    # started; it only moves forward from there, so the scratch copy is never ahead of it.
    position = _apply_up_to(batcher.apply_batch, conn, tracked[0], progress)
    # force_rollback: the scratch rows are dropped anyway, and nothing of this transaction
    # (the scratch position, its notifications) needs to outlive the comparison.
    with conn.transaction(force_rollback=True):
        # Consistency without pausing the live runner: one REPEATABLE READ snapshot, taken
        # by the next statement, serves the live position, the events up to it and the live
        # rows. The runner commits its rows and position together, and every event up to a
        # committed position was committed before it (the store's insert lock keeps ids in
        # commit order), so in this snapshot the live tables show exactly that position and
        # the scratch copy can be brought to the same one. Locking the live tracking row
        # instead would stall the runner (and read-your-writes queries) for the whole
        # comparison; a long snapshot only holds back vacuum meanwhile.
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        live_position, live_version = conn.execute(TRACKING, (live.name,)).fetchone()  # type: ignore[misc]
        if live_version != live.version:
            result.problem = f"the live read model is version {live_version}, the code's is {live.version}: rebuild it"
            return result
        if live_position < position:
            result.problem = f"the live position went back from {position} to {live_position}"
            return result
        result.position = _apply_up_to(batcher.apply_batch_in, conn, live_position, progress)
        result.tables = compare(conn, postgres_view(live).schema, postgres_view(scratch).schema)
    return result


def _apply_up_to(
    apply: Callable[[psycopg.Connection, int], tuple[int, int]],
    conn: psycopg.Connection,
    up_to: int,
    progress: Callable[[int, int], None],
) -> int:
    while True:
        _, position = apply(conn, up_to)
        progress(position, up_to)
        if position >= up_to:
            return position


def _drop_scratch(conn: psycopg.Connection, scratch: PostgresView, batcher: Batcher) -> None:
    try:
        conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(scratch.schema)))
        conn.execute(DELETE_TRACKING, (batcher.tracking_name,))
    except psycopg.Error as error:  # not to hide the error that brought us here; the next verify drops it
        log.warning("verify scratch schema left behind", extra={"schema": scratch.schema, "error": str(error)})


def report(verification: Verification) -> list[str]:
    """Lines for a person: a summary, each table's counts, then the first differences."""
    v = verification
    summary = (
        f"{len(v.tables)} tables, {sum(t.live_rows for t in v.tables)} live rows compared with"
        f" {sum(t.rebuilt_rows for t in v.tables)} rebuilt, {sum(t.only_live for t in v.tables)} only live,"
        f" {sum(t.only_rebuilt for t in v.tables)} only rebuilt"
    )
    lines = [f"{v.name}: {'ok' if v.ok else 'DIFFERENT'} at position {v.position}: {v.problem or summary}"]
    for t in v.tables:
        counts = f"live {t.live_rows}, rebuilt {t.rebuilt_rows}, only live {t.only_live}, only rebuilt {t.only_rebuilt}"
        lines.append(f"  {t.table}: {t.problem or counts}")
    samples = [(t.table, side, row) for t in v.tables for side, row in t.samples][:SHOWN_DIFFERENCES]
    if samples:
        lines.append("  first differences:")
    lines += [f"    {table} only {side}: {_plain(row)}" for table, side, row in samples]
    return lines


def _plain(value: Any) -> Any:
    """A row as a readable dict: ids and times as text, bytes (sealed content) as hex, long text cut."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, UUID | datetime | date):
        return str(value)
    if isinstance(value, bytes):
        value = "0x" + value.hex()
    if isinstance(value, str) and len(value) > SAMPLE_TEXT:
        return value[:SAMPLE_TEXT] + "…"
    return value
