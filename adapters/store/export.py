"""Writes an audit log as JSON lines (one event a line, in global order) and checks one's hash chains.

Each line carries the event's metadata, its decoded payload (or, when its owner was erased,
the clear metadata that survives), its hash and its state exactly as stored, so a third
party can recompute every hash without Chronicle (`verify_export`).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import orjson
import psycopg
from psycopg.sql import SQL, Composed

from adapters.store.audit_decoder import Decoder
from adapters.store.hash_chains import GENESIS, ChainBreak, ChainReport, event_hash, missing
from adapters.store.postgres import PostgresTarget
from services.ports.keys import KeyRing

SELECT_EVENTS = SQL(
    "{members} SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state, e.hash"
    " FROM chronicle.events e WHERE {scope} AND {since} ORDER BY e.notification_id"
)
SELECT_CREATIONS = SQL(
    "SELECT originator_id, state FROM chronicle.events WHERE originator_id = ANY(%s) AND originator_version = 1"
)
MAX_KNOWN_CREATORS = 100_000  # streams whose owner and type an export keeps in memory at once
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
    keys: KeyRing,
    scope: ExportScope,
    out: IO[bytes],
    *,
    batch_size: int = 5_000,
    on_total: Callable[[int], None] = lambda total: None,
    on_progress: Callable[[int], object] = lambda done: None,
) -> int:
    """Write the scope's events as JSON lines to `out`, in notification order, from one
    snapshot through a server-side cursor (flat memory); return how many were written."""
    decoder = Decoder(keys)
    written = 0
    with target.connect() as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute("SET LOCAL cursor_tuple_fraction = 1.0")  # every row is wanted: plan for all of them
        on_total(conn.execute(*scope.query(COUNT_EVENTS)).fetchone()[0])  # type: ignore[index]
        creators = Creators(conn, decoder)
        with conn.cursor(name="chronicle_export", binary=True) as cursor:
            cursor.itersize = batch_size
            cursor.execute(*scope.query(SELECT_EVENTS))
            while rows := cursor.fetchmany(batch_size):
                creators.look_up(rows)
                out.write(b"".join([line(decoder, creators, row) for row in rows]))
                written += len(rows)
                on_progress(len(rows))
    return written


class Creators:
    """Each aggregate's owner and type, from the clear metadata of its creation event (which
    stays readable after an erasure). Most come from the creation events the export itself
    writes; the others (created before `since`, or forgotten to keep memory flat) are looked
    up a batch at a time, in the export's snapshot."""

    def __init__(self, conn: psycopg.Connection, decoder: Decoder):
        self.conn = conn
        self.decoder = decoder
        self.known: dict[uuid.UUID, tuple[str | None, str]] = {}

    def look_up(self, rows: list[tuple[Any, ...]]) -> None:
        """Learn the creators of the streams in `rows` that are neither known nor created in them."""
        if len(self.known) > MAX_KNOWN_CREATORS:
            self.known.clear()
        created = {row[1] for row in rows if row[2] == 1}
        unknown = {row[1] for row in rows if row[1] not in self.known and row[1] not in created}
        if unknown:
            for originator_id, state in self.conn.execute(SELECT_CREATIONS, (list(unknown),), binary=True):
                self.learn(originator_id, self.decoder.mapper.stored_json(state))

    def learn(self, originator_id: uuid.UUID, creation: dict[str, Any]) -> None:
        self.known[originator_id] = (creation.get("owner"), creation["originator_topic"].rpartition(":")[2])

    def of(self, originator_id: uuid.UUID) -> tuple[str | None, str | None]:
        return self.known.get(originator_id, (None, None))


def line(decoder: Decoder, creators: Creators, row: tuple[Any, ...]) -> bytes:
    position, aggregate_id, version, topic, state, stored_hash = row
    timestamp, clear, content, erased = decoder.opened(aggregate_id, version, state)
    if version == 1:
        creators.learn(aggregate_id, clear)
    owner, aggregate_type = creators.of(aggregate_id)
    head = orjson.dumps({
        "position": position,
        "aggregate_id": aggregate_id,
        "aggregate_type": aggregate_type,
        "version": version,
        "type": topic.rpartition(":")[2],
        "topic": topic,
        "timestamp": timestamp,
        "owner": owner,
        "hash": stored_hash.hex() if stored_hash is not None else None,
        "payload": payload(clear, content),
        "erased": erased,
    })
    # The state goes in last, spliced in as base64 bytes: base64 needs no escaping, and
    # orjson would still scan each of its characters for it.
    return b"".join((head[:-1], b',"state":"', binascii.b2a_base64(state, newline=False), b'"}\n'))


def payload(clear: dict[str, Any], content: bytes | None) -> Any:
    """The event's fields: its clear ones, then its unsealed content (the two never share a
    key). The content goes in as the JSON it was sealed as: orjson wrote it, so parsing it
    only for orjson to write the same bytes again would be wasted."""
    if content is None or content == b"{}":
        return clear
    if not clear:
        return orjson.Fragment(content)
    return orjson.Fragment(orjson.dumps(clear)[:-1] + b"," + content[1:])


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
