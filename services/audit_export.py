"""Writes an audit log as JSON lines (one event a line, in global order) and checks one's hash chains.

Each line carries the event's metadata, its decoded payload (or, when its owner was erased,
the clear metadata that survives), its hash and its state exactly as stored, so a third
party can recompute every hash without Chronicle (`verify_export`).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import orjson
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composed

from adapters.audit import GENESIS, ChainBreak, ChainReport, event_hash, missing
from adapters.keys import KeyRing
from adapters.postgres import PostgresTarget
from services.queries_audit import Decoder

# The owner and type of each event's aggregate come from its creation event, whose clear
# metadata stays readable after an erasure (and whatever `since` leaves out of the file).
SELECT_EVENTS = SQL(
    "{members} SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state, e.hash,"
    " c.owner, c.originator_topic FROM chronicle.events e CROSS JOIN LATERAL ("
    "  SELECT d->>'owner' AS owner, d->>'originator_topic' AS originator_topic FROM ("
    "   SELECT convert_from(f.state, 'UTF8')::jsonb AS d FROM chronicle.events f"
    "   WHERE f.originator_id = e.originator_id AND f.originator_version = 1) creation) c"
    " WHERE {scope} AND {since} ORDER BY e.notification_id"
)
COUNT_EVENTS = SQL("{members} SELECT count(*) FROM chronicle.events e WHERE {scope} AND {since}")
# Everything in a session or conversation: the aggregates that name it, or name one that
# does, through the audit read model's links (as `Audit.timeline` walks them).
SESSION_MEMBERS = SQL(
    "WITH RECURSIVE members(id) AS (SELECT %(scope)s::uuid"
    " UNION SELECT l.aggregate_id FROM rm_audit.links l JOIN members m ON l.scope_id = m.id)"
)
IN_SESSION = SQL("e.originator_id IN (SELECT id FROM members)")
OWNED_BY = SQL(
    "e.originator_id IN (SELECT originator_id FROM chronicle.events WHERE originator_version = 1"
    " AND convert_from(state, 'UTF8')::jsonb->>'owner' = %(user)s)"
)
SINCE = SQL("(convert_from(e.state, 'UTF8')::jsonb->>'timestamp')::timestamptz >= %(since)s")


@dataclass(frozen=True)
class ExportScope:
    """Which events to export: one user's aggregates, one session's, or all; from `since` on."""

    user: str | None = None
    session: uuid.UUID | None = None
    since: datetime | None = None

    def query(self, template: SQL) -> tuple[Composed, dict[str, Any]]:
        members = SESSION_MEMBERS if self.session is not None else SQL("")
        scope = IN_SESSION if self.session is not None else OWNED_BY if self.user is not None else SQL("true")
        since = SINCE if self.since is not None else SQL("true")
        params = {"scope": self.session, "user": self.user, "since": self.since}
        return template.format(members=members, scope=scope, since=since), params


def export_events(
    target: PostgresTarget,
    scope: ExportScope,
    out: IO[bytes],
    *,
    batch_size: int = 5_000,
    on_total: Callable[[int], None] = lambda total: None,
    on_progress: Callable[[int], None] = lambda done: None,
) -> int:
    """Write the scope's events as JSON lines to `out`, in notification order, from one
    snapshot through a server-side cursor (flat memory); return how many were written."""
    decoder = Decoder(KeyRing.shared(target))
    written = 0
    with target.connect(row_factory=dict_row) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute("SET LOCAL cursor_tuple_fraction = 1.0")  # every row is wanted: plan for all of them
        on_total(conn.execute(*scope.query(COUNT_EVENTS)).fetchone()["count"])  # type: ignore[index]
        with conn.cursor(name="chronicle_export", binary=True) as cursor:
            cursor.itersize = batch_size
            cursor.execute(*scope.query(SELECT_EVENTS))
            while rows := cursor.fetchmany(batch_size):
                out.write(b"".join(orjson.dumps(line(decoder, row)) + b"\n" for row in rows))
                written += len(rows)
                on_progress(len(rows))
    return written


def line(decoder: Decoder, row: dict[str, Any]) -> dict[str, Any]:
    described = decoder.described(row, row["originator_topic"].rpartition(":")[2])
    return {
        "position": described["position"],
        "aggregate_id": described["aggregate_id"],
        "aggregate_type": described["aggregate_type"],
        "version": described["version"],
        "type": described["type"],
        "topic": row["topic"],
        "timestamp": described["timestamp"],
        "owner": row["owner"],
        "hash": described["hash"],
        "payload": described["payload"],
        "erased": described["erased"],
        "state": base64.b64encode(bytes(row["state"])).decode(),
    }


def verify_export(lines: Iterable[bytes | str]) -> ChainReport:
    """Recompute the hash chains of an exported audit log from its `state` and `topic` fields.

    A stream's first event in the file chains from the zero hash when it is version 1;
    a later one (the log starts after it, e.g. with --since) is taken as the anchor its
    successors are checked against. Each event chains on from its exported hash, so one
    altered line is one break; a removed line is reported as missing. A line's timestamp
    and owner must also be the ones its hashed state carries in clear.
    """
    report = ChainReport()
    heads: dict[uuid.UUID, tuple[int, bytes]] = {}
    for text in lines:
        if not text.strip():
            continue
        event = orjson.loads(text)
        stream, version = uuid.UUID(event["aggregate_id"]), event["version"]
        state = base64.b64decode(event["state"])
        stored_hash = bytes.fromhex(event["hash"])
        head = heads.get(stream)
        if head is None:
            report.streams += 1
            prev = GENESIS if version == 1 else None
        else:
            prev = head[1]
            if version != head[0] + 1:
                report.breaks.append(ChainBreak(stream, head[0] + 1, missing(head[0], version)))
        if prev is not None and event_hash(prev, stream, version, event["topic"], state) != stored_hash:
            report.breaks.append(ChainBreak(stream, version, "hash mismatch"))
        elif not clear_metadata_matches(event, state):
            report.breaks.append(ChainBreak(stream, version, "metadata differs from the hashed state"))
        heads[stream] = (version, stored_hash)
        report.events += 1
    return report


def clear_metadata_matches(event: dict[str, Any], state: bytes) -> bool:
    try:
        stored = orjson.loads(state)
        same_time = datetime.fromisoformat(stored["timestamp"]) == datetime.fromisoformat(event["timestamp"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return False
    return same_time and stored.get("_owner", stored.get("owner", event["owner"])) == event["owner"]
