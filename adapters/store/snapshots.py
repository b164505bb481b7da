"""Snapshots in `chronicle.snapshots`: an aggregate's state at a version, sealed like its events.

Stored state is JSON: `{"format", "schema", "owner", "created_on", "_sealed"}`, where
`_sealed` is the State model's JSON (domain/snapshot.py) sealed with the owner's AES-GCM
key and bound to `(aggregate id, version)` by associated data that differs from any
event's, so neither can stand in for the other. With no key ring, and for the system's
own aggregates (never sealed, like their events), the state is kept clear under `state`. Nothing is unpickled and a topic read back never imports anything outside
`domain`: a snapshot that does not fit (another schema, another format, a changed byte)
is SnapshotUnreadable, and one whose owner was erased raises ErasedContent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from cryptography.exceptions import InvalidTag
from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.utils import get_topic, resolve_topic
from psycopg.sql import SQL

from adapters.store.arrays import Uuids
from adapters.store.reachability import Reachability, while_reachable
from domain.base import SYSTEM_OWNER, Aggregate
from domain.snapshot import Unsnapshottable, capture, restore, schema_of, state_model
from services.ports.snapshots import SNAPSHOT_COLUMNS, Captured, SnapshotUnreadable, SnapshotWriter, StoredSnapshot

if TYPE_CHECKING:
    from adapters.store.mapper import PydanticMapper

FORMAT = 1
SEALED = "_sealed"
# What a changed or outdated snapshot raises while decoded (pydantic's ValidationError,
# orjson's and base64's errors are ValueErrors); the owner's erasure (ErasedContent) is not one.
CORRUPT = (ValueError, LookupError, TypeError, AttributeError, InvalidTag, Unsnapshottable)


def snapshot_associated_data(originator_id: UUID, version: int) -> bytes:
    return b"chronicle-snapshot\0" + originator_id.bytes + version.to_bytes(8, "big")


def snapshot_class(topic: str) -> type[Aggregate] | None:
    module = topic.partition(":")[0]
    if not module.startswith("domain."):
        return None
    try:
        cls = resolve_topic(topic)
    except Exception:
        return None
    ok = isinstance(cls, type) and issubclass(cls, Aggregate) and state_model(cls) is not None
    return cls if ok else None


class SnapshotCodec:
    def __init__(self, mapper: PydanticMapper):
        self.mapper = mapper

    @staticmethod
    def capture(aggregate: Aggregate) -> Captured:
        """Raises domain.snapshot.Unsnapshottable or pydantic's ValidationError."""
        cls = type(aggregate)
        return Captured(
            originator_id=aggregate.id,
            originator_version=aggregate.version,
            topic=get_topic(cls),
            owner=aggregate.owner,
            schema=schema_of(cls),
            content=capture(aggregate).model_dump_json().encode(),
            created_on=aggregate.created_on,
            modified_on=aggregate.modified_on,
        )

    def seal(self, captured: Captured) -> StoredSnapshot:
        """Raises UserErased when the owner was erased meanwhile."""
        envelope: dict[str, Any] = {
            "format": FORMAT,
            "schema": captured.schema,
            "owner": captured.owner,
            "created_on": captured.created_on.isoformat(),
        }
        if self.mapper.keys is not None and captured.owner != SYSTEM_OWNER:
            aad = snapshot_associated_data(captured.originator_id, captured.originator_version)
            envelope[SEALED] = self.mapper.seal(captured.content, captured.owner, aad)
        else:
            envelope["state"] = orjson.loads(captured.content)
        return StoredSnapshot(
            captured.originator_id,
            captured.originator_version,
            captured.topic,
            orjson.dumps(envelope),
            captured.modified_on,
        )

    def encode(self, aggregate: Aggregate) -> StoredSnapshot:
        return self.seal(self.capture(aggregate))

    def decode(self, stored: StoredSnapshot) -> Aggregate:
        """The aggregate as it was at the snapshot's version; ErasedContent, SnapshotUnreadable."""
        try:
            cls = snapshot_class(stored.topic)
            envelope = orjson.loads(stored.state)
            if cls is None or envelope.get("format") != FORMAT or envelope.get("schema") != schema_of(cls):
                raise SnapshotUnreadable("another aggregate class, format or State model")
            owner = envelope["owner"]
            if SEALED in envelope:
                aad = snapshot_associated_data(stored.originator_id, stored.originator_version)
                content = self.mapper.unseal(envelope[SEALED], owner, aad, stored.originator_id, stored.originator_version)
            elif self.mapper.keys is None or owner == SYSTEM_OWNER:
                content = orjson.dumps(envelope["state"])
            else:  # a user's content is always sealed where there are keys: a clear one was not written by us
                raise SnapshotUnreadable("unsealed snapshot")
            aggregate = restore(
                cls,
                content,
                id=stored.originator_id,
                version=stored.originator_version,
                created_on=datetime.fromisoformat(envelope["created_on"]),
                modified_on=stored.modified_on,
            )
            if aggregate.owner != owner:
                raise SnapshotUnreadable("owner differs from the sealing owner")
            return aggregate
        except CORRUPT as error:  # bad JSON or base64, a failed tag, a state that does not validate
            raise SnapshotUnreadable(type(error).__name__) from None


class SnapshotRecorder:
    """Reads and writes `chronicle.snapshots` through the event store's connection pool."""

    def __init__(self, datastore: PostgresDatastore, reachability: Reachability):
        self.datastore = datastore
        self.reachability = reachability
        # The latest snapshot of each aggregate and the events after it, in one round trip:
        # per aggregate its snapshot row (if any) first, then its events in order.
        self.select_latest_and_after = SQL(
            f"WITH latest AS (SELECT DISTINCT ON (originator_id) {SNAPSHOT_COLUMNS} FROM chronicle.snapshots"
            "  WHERE originator_id = ANY(%(ids)s) ORDER BY originator_id, originator_version DESC)"
            f" SELECT true AS snapshot, {SNAPSHOT_COLUMNS} FROM latest"
            " UNION ALL SELECT false, e.originator_id, e.originator_version, e.topic, e.state, NULL"
            "  FROM unnest(%(ids)s::uuid[]) AS w(id) LEFT JOIN latest l ON l.originator_id = w.id"
            "  JOIN chronicle.events e ON e.originator_id = w.id AND e.originator_version > coalesce(l.originator_version, 0)"
            " ORDER BY originator_id, snapshot DESC, originator_version"
        )
        self.insert = SQL(
            f"INSERT INTO chronicle.snapshots ({SNAPSHOT_COLUMNS}) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (originator_id, originator_version) DO NOTHING"
        )
        # Keep the newest `keep` of each aggregate.
        self.prune = SQL(
            "DELETE FROM chronicle.snapshots s WHERE s.originator_id = ANY(%s) AND s.originator_version < ("
            " SELECT k.originator_version FROM chronicle.snapshots k WHERE k.originator_id = s.originator_id"
            " ORDER BY k.originator_version DESC OFFSET %s LIMIT 1)"
        )

    @while_reachable
    def latest_and_after(self, originator_ids: Iterable[UUID]) -> tuple[dict[UUID, StoredSnapshot], list[StoredEvent]]:
        """Each aggregate's latest snapshot and the stored events after it (all of them
        when it has none), in one query."""
        snapshots: dict[UUID, StoredSnapshot] = {}
        events: list[StoredEvent] = []
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_latest_and_after, {"ids": Uuids(originator_ids)}, prepare=True)
            for row in curs.fetchall():
                if row["snapshot"]:
                    snapshots[row["originator_id"]] = stored_snapshot(row)
                else:
                    events.append(
                        StoredEvent(row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"]))
                    )
        return snapshots, events

    def save(self, snapshots: Sequence[StoredSnapshot], keep: int = 0) -> None:
        """Insert (an existing version stays as it is), then keep only the latest `keep` (0: all)."""
        if not snapshots:
            return
        with self.datastore.transaction(commit=True) as curs:
            curs.executemany(
                self.insert,
                [(s.originator_id, s.originator_version, s.topic, s.state, s.modified_on) for s in snapshots],
            )
            if keep > 0:
                curs.execute(self.prune, (Uuids({s.originator_id for s in snapshots}), keep - 1))


def stored_snapshot(row: dict[str, Any]) -> StoredSnapshot:
    return StoredSnapshot(
        row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"]), row["modified_on"]
    )


class SealedSnapshots(SnapshotWriter):
    """The port the snapshot taker writes through: the codec captures and seals, the recorder saves."""

    def __init__(self, codec: SnapshotCodec, recorder: SnapshotRecorder) -> None:
        self.codec = codec
        self.recorder = recorder

    def capture(self, aggregate: Aggregate) -> Captured:
        return self.codec.capture(aggregate)

    def seal(self, captured: Captured) -> StoredSnapshot:
        return self.codec.seal(captured)

    def save(self, snapshots: Sequence[StoredSnapshot], keep: int = 0) -> None:
        self.recorder.save(snapshots, keep)
