"""Recomputes the event streams' hash chains from the stored columns and reports every break.

The layout is the one infra/migrations/0002_hash_chain.sql computes on insert, written out
again here from its documentation (docs/architecture.md, "Audit") so that a verification
proves the layout rather than trusting the database's own function.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from psycopg.sql import SQL

from adapters.store.postgres import PostgresTarget

GENESIS = bytes(32)  # the "previous hash" of a stream's first event
NULL_FIELD = struct.pack(">i", -1)

STREAM_COUNT = SQL("SELECT count(*) FROM chronicle.events WHERE originator_id = %s")
ALL_COUNT = SQL("SELECT count(*) FROM chronicle.events")
STREAM_EVENTS = SQL(
    "SELECT originator_id, originator_version, topic, state, hash FROM chronicle.events"
    " WHERE originator_id = %s ORDER BY originator_id, originator_version"
)
ALL_EVENTS = SQL(
    "SELECT originator_id, originator_version, topic, state, hash FROM chronicle.events"
    " ORDER BY originator_id, originator_version"
)


def hash_field(value: bytes | None) -> bytes:
    """A length-prefixed field: big-endian int4 length then the bytes; NULL is length -1."""
    return NULL_FIELD if value is None else struct.pack(">i", len(value)) + value


def event_hash(prev: bytes, originator_id: uuid.UUID, version: int, topic: str | None, state: bytes | None) -> bytes:
    """sha256(prev || uuid 16 bytes || version int8 big-endian || field(topic UTF-8) || field(state))."""
    return hashlib.sha256(
        prev
        + originator_id.bytes
        + struct.pack(">q", version)
        + hash_field(None if topic is None else topic.encode("utf-8"))
        + hash_field(state)
    ).digest()


@dataclass(frozen=True)
class ChainBreak:
    stream: uuid.UUID
    version: int
    reason: str  # "hash mismatch", or "missing" for versions absent between two stored ones


@dataclass
class ChainReport:
    streams: int = 0
    events: int = 0
    breaks: list[ChainBreak] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.breaks


def missing(before: int, after: int) -> str:
    """The reason for a gap between two stored versions: one break, however wide."""
    return "missing" if after - before == 2 else f"missing through version {after - 1}"


def verify_chains(
    target: PostgresTarget,
    stream: uuid.UUID | None = None,
    *,
    batch_size: int = 10_000,
    on_total: Callable[[int], None] = lambda total: None,
    on_progress: Callable[[int], object] = lambda done: None,
) -> ChainReport:
    """Walk one stream (or every stream) in version order, in one snapshot, through a
    server-side cursor, so memory stays flat however many events the store holds."""
    report = ChainReport()
    with target.connect() as conn:
        # One snapshot for the count and the scan: appends meanwhile are simply not seen.
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # The whole table will be read: plan for all rows (a sort), not for the first few
        # (an index walk, as a cursor plans by default), and take ids and bytes in binary.
        conn.execute("SET LOCAL cursor_tuple_fraction = 1.0")
        params = (stream,) if stream is not None else ()
        on_total(conn.execute(STREAM_COUNT if stream is not None else ALL_COUNT, params).fetchone()[0])  # type: ignore[index]
        with conn.cursor(name="chronicle_audit_verify", binary=True) as cursor:
            cursor.itersize = batch_size
            cursor.execute(STREAM_EVENTS if stream is not None else ALL_EVENTS, params)
            current: uuid.UUID | None = None
            prev, last_version = GENESIS, 0
            while rows := cursor.fetchmany(batch_size):
                for originator_id, version, topic, state, stored_hash in rows:
                    if originator_id != current:
                        current, prev = originator_id, GENESIS
                        report.streams += 1
                    elif version != last_version + 1:
                        report.breaks.append(ChainBreak(originator_id, last_version + 1, missing(last_version, version)))
                    if event_hash(prev, originator_id, version, topic, state) != stored_hash:
                        report.breaks.append(ChainBreak(originator_id, version, "hash mismatch"))
                    # Chain on from the stored hash, so one altered event is one break, not a
                    # cascade down the rest of its stream.
                    prev, last_version = stored_hash, version
                report.events += len(rows)
                on_progress(len(rows))
    return report
