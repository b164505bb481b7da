"""Audit queries: read one aggregate's events (and its state at any version or time), or a
session's or conversation's whole timeline, straight from the event store.

Scoped like every query: the caller reads their own history. A caller whose token has
the `auditor` role may read anyone's, and each such read is recorded as an event on the
auditor's AuditTrail before the answer leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from chronicle_contract.audit import AUDITOR, AuditStream, AuditTimeline, StreamPage, Timeline
from chronicle_contract.errors import ChronicleError
from pydantic_core import to_jsonable_python

from services.ports.audit import EVENT_COLUMNS, EventDecoder
from services.ports.event_store import ErasedContent
from services.ports.read_models import Queries
from services.ports.snapshots import SNAPSHOT_COLUMNS, SnapshotUnreadable
from services.runtime.replies import Wire

RecordRead = Callable[[str, dict[str, Any]], Awaitable[Any]]
HIDDEN_STATE = {"_pending_events"}


def state_of(aggregate: Any) -> dict[str, Any]:
    """An aggregate's attributes as plain JSON values (its id, version, times, state)."""
    public = {k.lstrip("_"): v for k, v in vars(aggregate).items() if k not in HIDDEN_STATE}
    return to_jsonable_python(public)


class Audit:
    def __init__(self, queries: Queries, record_read: RecordRead, decoder: EventDecoder) -> None:
        self.queries = queries
        self.record_read = record_read
        self.decoder = decoder

    async def _check_reader(
        self, caller: str, owner: str, what: str, aggregate_id: UUID, not_found: ChronicleError, **point: Any
    ) -> None:
        """Another user's id is answered as a missing one is (`not_found`, the same words)."""
        if caller == owner:
            return
        if AUDITOR not in getattr(caller, "roles", ()):
            raise not_found
        await self.record_read(
            str(caller), {"what": what, "aggregate_id": aggregate_id, "aggregate_owner": owner, **point}
        )

    async def readable_stream(self, caller: str, aggregate_id: UUID, what: str, **point: Any) -> tuple[str, str]:
        """The stream's owner and aggregate type, once the caller may read it (`what` and
        `point` describe the read on an auditor's trail)."""
        # The first event alone says whose the aggregate is: another user's stream is
        # refused after reading one row, as a missing one is after reading none.
        first = await self.queries.fetch_one(
            f"SELECT {EVENT_COLUMNS} FROM chronicle.events WHERE originator_id = %s AND originator_version = 1",
            (aggregate_id,),
        )
        missing = ChronicleError("not_found", f"aggregate {aggregate_id} not found")
        if first is None:
            raise missing
        owner, aggregate_type = self.decoder.owner_and_type(first)
        await self._check_reader(caller, owner, what, aggregate_id, missing, **point)
        return owner, aggregate_type

    async def stream(self, caller: str, q: AuditStream) -> Wire[StreamPage]:
        owner, aggregate_type = await self.readable_stream(
            caller, q.aggregate_id, "aggregate", at_version=q.at_version, at_time=q.at_time
        )
        page = await self.queries.fetch_all(
            f"SELECT {EVENT_COLUMNS} FROM chronicle.events WHERE originator_id = %s AND originator_version > %s"
            " ORDER BY originator_version LIMIT %s",
            (q.aggregate_id, q.after_version, q.limit + 1),
        )
        more = len(page) > q.limit
        page = page[: q.limit]
        reply: dict[str, Any] = {
            "aggregate_id": q.aggregate_id,
            "aggregate_type": aggregate_type,
            "owner": owner,
            "events": await asyncio.to_thread(lambda: [self.decoder.described(row, aggregate_type) for row in page]),
            "next_after_version": page[-1]["originator_version"] if more else None,
        }
        if q.at_version is not None or q.at_time is not None:
            aggregate, version = await self.state_at(q.aggregate_id, q.at_version, q.at_time)
            reply["state"] = state_of(aggregate) if aggregate is not None else None
            reply["state_version"] = version
        return Wire(reply)

    async def state_at(
        self, aggregate_id: UUID, at_version: int | None, at_time: datetime | None
    ) -> tuple[Any, int | None]:
        """The aggregate as it was after `at_version`, or after its last event at or before `at_time`.

        Folding starts from the latest snapshot at or before that point (its `modified_on`
        is its last event's time; an aggregate's event times never go back), or from the
        first event when there is none or it cannot be read."""
        snapshot = await self.queries.fetch_one(
            f"SELECT {SNAPSHOT_COLUMNS} FROM chronicle.snapshots WHERE originator_id = %s"
            " AND (%s::bigint IS NULL OR originator_version <= %s) AND (%s::timestamptz IS NULL OR modified_on <= %s)"
            " ORDER BY originator_version DESC LIMIT 1",
            (aggregate_id, at_version, at_version, at_time, at_time),
        )
        start = None
        if snapshot is not None:
            try:
                start = await asyncio.to_thread(self.decoder.snapshot, snapshot)
            except ErasedContent:
                return None, None  # the owner was erased: there is no state to show
            except SnapshotUnreadable:
                start = None
        rows = await self.queries.fetch_all(
            f"SELECT {EVENT_COLUMNS} FROM chronicle.events WHERE originator_id = %s AND originator_version > %s"
            " AND (%s::bigint IS NULL OR originator_version <= %s) ORDER BY originator_version",
            (aggregate_id, start.version if start is not None else 0, at_version, at_version),
        )
        return await asyncio.to_thread(self._fold, rows, at_time, start)

    def _fold(self, rows: list[dict[str, Any]], at_time: datetime | None, start: Any = None) -> tuple[Any, int | None]:
        aggregate = start
        version = start.version if start is not None else None
        for row in rows:
            try:
                event = self.decoder.event(row)
            except ErasedContent:
                return None, None  # the owner was erased: there is no state to show
            if at_time is not None and event.timestamp > at_time:
                break
            aggregate = event.mutate(aggregate)
            version = event.originator_version
        return aggregate, version

    async def timeline(self, caller: str, q: AuditTimeline) -> Wire[Timeline]:
        scope = await self.queries.fetch_one(
            "SELECT owner, type FROM rm_audit.aggregates WHERE id = %s", (q.scope_id,)
        )
        missing = ChronicleError("not_found", f"session or conversation {q.scope_id} not found")
        if scope is None or scope["type"] not in ("Session", "Conversation"):
            raise missing
        await self._check_reader(caller, scope["owner"], "timeline", q.scope_id, missing)
        # Every aggregate that names the scope, or names one that does (a conversation's
        # HITL runs, an optimization's rounds and trials), found through the links the
        # audit read model keeps for every aggregate type.
        rows = await self.queries.fetch_all(
            "WITH RECURSIVE members(id) AS ("
            " SELECT %(scope)s::uuid UNION SELECT l.aggregate_id FROM rm_audit.links l JOIN members m ON l.scope_id = m.id)"
            f" SELECT e.{EVENT_COLUMNS.replace(', ', ', e.')}, a.type AS aggregate_type,"
            " (SELECT count(*) FROM members) AS aggregates"
            " FROM chronicle.events e JOIN rm_audit.aggregates a ON a.id = e.originator_id"
            " WHERE e.originator_id IN (SELECT id FROM members) AND e.notification_id > %(after)s"
            " ORDER BY e.notification_id LIMIT %(limit)s",
            {"scope": q.scope_id, "after": q.after_position, "limit": q.limit + 1},
        )
        more = len(rows) > q.limit
        rows = rows[: q.limit]
        return Wire({
            "scope_id": q.scope_id,
            "aggregates": rows[0]["aggregates"] if rows else 0,
            "events": await asyncio.to_thread(lambda: [self.decoder.described(row, row["aggregate_type"]) for row in rows]),
            "next_after_position": rows[-1]["notification_id"] if more else None,
        })
