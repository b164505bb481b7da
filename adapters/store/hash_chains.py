"""Recomputes the event streams' hash chains from the stored columns and reports every break.

The layout is the one infra/migrations/0002_hash_chain.sql computes on insert, written out
again here from its documentation (docs/architecture.md, "Audit") so that a verification
proves the layout rather than trusting the database's own function.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg.sql import SQL

from adapters.store.postgres import PostgresTarget
from services.ports.chains import ChainSpan, StreamChains
from services.ports.read_models import Queries

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
# A span of one stream: the stored event it is anchored on (the highest version at or before
# `after`, if any), then up to `most` events after `after`, by the primary key's index.
STREAM_SPAN = SQL(
    "SELECT * FROM ((SELECT originator_version, topic, state, hash FROM chronicle.events"
    " WHERE originator_id = %(stream)s AND originator_version <= %(after)s ORDER BY originator_version DESC LIMIT 1)"
    " UNION ALL"
    " (SELECT originator_version, topic, state, hash FROM chronicle.events"
    " WHERE originator_id = %(stream)s AND originator_version > %(after)s ORDER BY originator_version LIMIT %(most)s))"
    " AS span ORDER BY originator_version"
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


@dataclass
class ChainWalk:
    """One stream's chain followed event by event in version order, each event checked against
    the stored hash of the one before it (`prev`, at `last_version`)."""

    stream: uuid.UUID
    prev: bytes = GENESIS
    last_version: int = 0

    def step(self, version: int, topic: str | None, state: bytes | None, stored_hash: bytes) -> list[ChainBreak]:
        breaks = []
        if version != self.last_version + 1:
            breaks.append(ChainBreak(self.stream, self.last_version + 1, missing(self.last_version, version)))
        if event_hash(self.prev, self.stream, version, topic, state) != stored_hash:
            breaks.append(ChainBreak(self.stream, version, "hash mismatch"))
        # Chain on from the stored hash, so one altered event is one break, not a cascade
        # down the rest of its stream.
        self.prev, self.last_version = stored_hash, version
        return breaks


def verify_span(stream: uuid.UUID, after_version: int, rows: list[dict[str, Any]], limit: int) -> ChainSpan:
    """STREAM_SPAN's rows checked: the anchor (a row at or before `after_version`) is trusted as
    stored, the rest are walked from it; a span from the start begins at the chain's genesis."""
    walk = ChainWalk(stream)
    if rows and rows[0]["originator_version"] <= after_version:
        anchor, *rows = rows
        walk.prev, walk.last_version = bytes(anchor["hash"]), anchor["originator_version"]
    more = len(rows) > limit
    rows = rows[:limit]
    breaks = [
        (found.version, found.reason)
        for row in rows
        for found in walk.step(row["originator_version"], row["topic"], bytes(row["state"]), bytes(row["hash"]))
    ]
    return ChainSpan(len(rows), breaks, rows[-1]["originator_version"] if rows else None, more)


class PostgresChains(StreamChains):
    """audit.verify's spans, read through the query pool (one indexed statement per span) and
    hashed on a worker thread."""

    def __init__(self, queries: Queries) -> None:
        self.queries = queries

    async def verify(self, stream: uuid.UUID, after_version: int, limit: int) -> ChainSpan:
        rows = await self.queries.fetch_all(
            STREAM_SPAN, {"stream": stream, "after": after_version, "most": limit + 1}, binary=True
        )
        return await asyncio.to_thread(verify_span, stream, after_version, rows, limit)


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
            walk: ChainWalk | None = None
            while rows := cursor.fetchmany(batch_size):
                for originator_id, version, topic, state, stored_hash in rows:
                    if walk is None or originator_id != walk.stream:
                        # A stream's first stored event is checked against the genesis only: a
                        # removed first event shows as its successor's mismatch.
                        walk = ChainWalk(originator_id, last_version=version - 1)
                        report.streams += 1
                    report.breaks.extend(walk.step(version, topic, state, stored_hash))
                report.events += len(rows)
                on_progress(len(rows))
    return report
