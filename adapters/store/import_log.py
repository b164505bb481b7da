"""Loads an exported audit log (adapters/store/export.py) into an empty store.

Every event is appended again in the file's order, one transaction per batch: the table
lock the recorder takes, a COPY (the hash trigger chains each row anew), and the NOTIFY
that wakes projection runners. A readable event is rebuilt from its payload and sealed
with the new store's key for its owner (system records stay unsealed); an erased one is
stored with its state bytes unchanged, and its owner's key row is recorded as destroyed,
so it stays unreadable and the user stays erased (no new writes).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson
import psycopg
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import resolve_topic
from psycopg.sql import SQL, Identifier

from adapters.store.event_store import EVENTS_CHANNEL
from adapters.store.mapper import PydanticMapper
from adapters.store.postgres import PostgresTarget
from domain.base import SYSTEM_OWNER
from services.ports.keys import KeyRing

# The recorder's own lock, so notification ids commit in order even if a writer slipped in.
LOCK_EVENTS = SQL("LOCK TABLE chronicle.events IN EXCLUSIVE MODE")
# COPY, not the recorder's unnest of a composite array: the same rows, in file order, and
# several times faster to send. The BEFORE INSERT trigger computes each hash.
COPY_EVENTS = SQL("COPY chronicle.events (originator_id, originator_version, topic, state) FROM STDIN")
NOTIFY_EVENTS = SQL("NOTIFY {}").format(Identifier(EVENTS_CHANNEL))


class StoreNotEmpty(Exception):
    """An import goes only into a store with no events: it reproduces a history, not merges one."""


class NotALog(Exception):
    """The file is not a complete audit log: a line that does not parse, or a stream with a gap."""


@dataclass
class ImportReport:
    events: int = 0
    erased_events: int = 0
    erased_owners: set[str] = field(default_factory=set)


def stored_event(mapper: PydanticMapper, event: dict[str, object]) -> StoredEvent:
    """The event to append: re-sealed for its owner, or, if erased, exactly as it was stored."""
    aggregate_id, version = uuid.UUID(str(event["aggregate_id"])), int(event["version"])  # type: ignore[call-overload]
    if event["erased"]:
        return StoredEvent(aggregate_id, version, str(event["topic"]), base64.b64decode(str(event["state"])))
    data = {**event["payload"], "originator_id": aggregate_id, "originator_version": version}  # type: ignore[dict-item]
    domain_event = resolve_topic(str(event["topic"])).model_validate({**data, "timestamp": event["timestamp"]})
    # As the command bus writes them: system records (erasures, digests) are never sealed.
    owner = None if event["owner"] == SYSTEM_OWNER else str(event["owner"])
    return mapper.to_stored_event(domain_event, owner)


def check_log(lines: Iterable[bytes | str]) -> int:
    """The number of events in the log; raises NotALog unless every line parses and every
    stream runs from version 1 without a gap (what the hash chain trigger demands: an
    export made with --since cannot be imported). Run before importing, so a bad file
    leaves the store untouched."""
    versions: dict[str, int] = {}
    count = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            event = orjson.loads(text)
            stream, version = event["aggregate_id"], event["version"]
            expected = versions.get(stream, 0) + 1
        except (orjson.JSONDecodeError, KeyError, TypeError) as error:
            raise NotALog(f"line {number}: not an exported event ({error})") from None
        if version != expected:
            raise NotALog(f"line {number}: {stream} version {version} follows version {expected - 1}; streams must be complete")
        versions[stream] = version
        count += 1
    return count


def import_events(
    target: PostgresTarget,
    keys: KeyRing,
    lines: Iterable[bytes | str],
    *,
    batch_size: int = 1_000,
    on_progress: Callable[[int], object] = lambda done: None,
) -> ImportReport:
    """Append every event of the log; raises StoreNotEmpty if the store holds any event."""
    with target.connect() as conn:
        if conn.execute("SELECT EXISTS (SELECT FROM chronicle.events)").fetchone()[0]:  # type: ignore[index]
            raise StoreNotEmpty("chronicle.events already holds events; import only into an empty store")
    mapper = PydanticMapper(keys=keys)
    report = ImportReport()
    batch: list[StoredEvent] = []
    conn = target.connect()

    def flush() -> None:
        if batch:
            append(conn, batch)
            on_progress(len(batch))
            batch.clear()

    try:
        for text in lines:
            if not text.strip():
                continue
            event = orjson.loads(text)
            if event["erased"]:
                report.erased_events += 1
                if event["owner"] not in report.erased_owners:
                    keys.destroy(str(event["owner"]))  # before any of their events is stored
                    report.erased_owners.add(str(event["owner"]))
            batch.append(stored_event(mapper, event))
            report.events += 1
            if len(batch) >= batch_size:
                flush()
        flush()
    finally:
        conn.close()
    return report


def append(conn: psycopg.Connection, events: list[StoredEvent]) -> None:
    """One transaction: the events in their order, then the wake-up for projection runners."""
    with conn.transaction(), conn.cursor() as cursor:
        cursor.execute(LOCK_EVENTS)
        with cursor.copy(COPY_EVENTS) as copy:
            for event in events:
                copy.write_row((event.originator_id, event.originator_version, event.topic, event.state))
        cursor.execute(NOTIFY_EVENTS)
