"""The event store: eventsourcing's Postgres recorder with a pydantic/orjson mapper.

The recorder also writes idempotency records in the same statement as the events, so a
command's reply exists exactly when its events do.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import (
    InterfaceError,
    Mapper,
    OperationalError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import get_topic, resolve_topic, retry
from psycopg.sql import SQL

from adapters.keys import KeyRing
from adapters.postgres import PostgresTarget
from adapters.snapshots import SnapshotCodec, SnapshotRecorder, SnapshotUnreadable
from domain.base import Aggregate, DomainEvent

log = logging.getLogger(__name__)

EVENTS_SCHEMA = "chronicle"
EVENTS_TABLE = "events"
EVENTS_CHANNEL = "chronicle_events"


class OrjsonTranscoder(Transcoder):
    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


MAX_CIPHERS = 10_000
OWNER_FIELD = "_owner"
SEALED_FIELD = "_sealed"


def stays_clear(field: str) -> bool:
    """Metadata an audit keeps after erasure: ids, timestamps, types, the owner."""
    return field in ("timestamp", "originator_topic", "owner") or field.endswith("_id")


class ErasedContent(Exception):
    """The event's content was sealed with a key that has been destroyed."""

    def __init__(self, originator_id: UUID, version: int, owner: str):
        super().__init__(f"content of {originator_id} v{version} was erased")
        self.originator_id = originator_id
        self.version = version
        self.owner = owner


def associated_data(originator_id: UUID, version: int) -> bytes:
    # Binds a sealed content to its event: it cannot be moved onto another one.
    return originator_id.bytes + version.to_bytes(8, "big")


class PydanticMapper(Mapper[UUID]):
    """Maps pydantic domain events to stored events and back.

    With a KeyRing, an event written for an owner keeps its metadata clear (`stays_clear`)
    and seals everything else with the owner's AES-256-GCM key: stored state is
    `{clear fields..., "_owner": owner, "_sealed": base64(nonce || ciphertext)}`. Reading
    it after the key was destroyed raises ErasedContent. States without `_sealed` (written
    without a key ring) read as they are.
    """

    def __init__(self, transcoder: Transcoder | None = None, keys: KeyRing | None = None, **kwargs: Any):
        super().__init__(transcoder=transcoder or OrjsonTranscoder(), **kwargs)
        self.keys = keys
        self._ciphers: dict[bytes, AESGCM] = {}

    def to_stored_event(self, domain_event: Any, owner: str | None = None) -> StoredEvent:
        state = domain_event.model_dump(exclude={"originator_id", "originator_version"})
        if self.keys is not None and owner is not None:
            state = self._sealed(state, owner, domain_event.originator_id, domain_event.originator_version)
        stored_state = self.transcoder.encode(state)
        if self.compressor:
            stored_state = self.compressor.compress(stored_state)
        if self.cipher:
            stored_state = self.cipher.encrypt(stored_state)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=get_topic(type(domain_event)),
            state=stored_state,
        )

    def _sealed(self, state: dict[str, Any], owner: str, originator_id: UUID, version: int) -> dict[str, Any]:
        content = orjson.dumps({k: v for k, v in state.items() if not stays_clear(k)})
        sealed = self.seal(content, owner, associated_data(originator_id, version))
        clear = {k: v for k, v in state.items() if stays_clear(k)}
        return {**clear, OWNER_FIELD: owner, SEALED_FIELD: sealed}

    def seal(self, content: bytes, owner: str, aad: bytes) -> str:
        """`content` sealed with the owner's key (UserErased once erased): base64(nonce || ciphertext)."""
        key = self.keys.key_for_writing(owner)  # type: ignore[union-attr]
        nonce = secrets.token_bytes(12)
        return base64.b64encode(nonce + self._cipher(key).encrypt(nonce, content, aad)).decode()

    def unseal(self, sealed: str, owner: str, aad: bytes, originator_id: UUID, version: int) -> bytes:
        """What `seal` sealed; ErasedContent when the owner's key is gone, InvalidTag when
        the content or its associated data was changed."""
        key = self.keys.key_for_reading(owner) if self.keys is not None else None
        if key is None:
            raise ErasedContent(originator_id, version, owner)
        raw = binascii.a2b_base64(sealed)  # base64.b64decode without its Python wrapper: once per event read
        return self._cipher(key).decrypt(raw[:12], raw[12:], aad)

    def _cipher(self, key: bytes) -> AESGCM:
        # Setting up a cipher costs more than sealing one event with it: one per key.
        cipher = self._ciphers.get(key)
        if cipher is None:
            if len(self._ciphers) >= MAX_CIPHERS:
                self._ciphers.clear()
            cipher = self._ciphers[key] = AESGCM(key)
        return cipher

    def envelope(self, stored_event: StoredEvent) -> dict[str, Any]:
        """The stored state as JSON, content still sealed (what survives an erasure)."""
        return self.stored_json(stored_event.state)

    def stored_json(self, state: bytes) -> dict[str, Any]:
        """A stored state's JSON, its content still sealed."""
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return self.transcoder.decode(state)

    def take_content(self, data: dict[str, Any], originator_id: UUID, version: int) -> bytes | None:
        """Takes the sealed content out of a stored state's JSON (`data` keeps its clear
        fields) and returns it unsealed, as the JSON object it was sealed as; None when
        nothing was sealed. ErasedContent when the owner's key is gone."""
        sealed = data.pop(SEALED_FIELD, None)
        if sealed is None:
            return None
        owner = data.pop(OWNER_FIELD)
        return self.unseal(sealed, owner, associated_data(originator_id, version), originator_id, version)

    def decoded_state(self, stored_event: StoredEvent) -> dict[str, Any]:
        """The event's fields as stored JSON values (content unsealed), without building
        the event."""
        data = self.stored_json(stored_event.state)
        content = self.take_content(data, stored_event.originator_id, stored_event.originator_version)
        if content is not None:
            data.update(orjson.loads(content))
        return data

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        event_class: type[DomainEvent] = resolve_topic(stored_event.topic)
        data = self.decoded_state(stored_event)
        data["originator_id"] = stored_event.originator_id
        data["originator_version"] = stored_event.originator_version
        return event_class.model_validate(data)


@dataclass(frozen=True)
class IdempotencyRecord:
    owner: str
    key: str
    fingerprint: str
    reply: bytes
    # Where the command's last event is among the events saved with it (0 for the
    # first): the notification id it gets is the reply's position, stored beside the
    # reply and merged into it when the reply is read.
    last_event: int | None = None


class ChronicleRecorder(PostgresApplicationRecorder):
    """Saves a group commit's events and idempotency records in one statement, and reads
    many streams at once."""

    def __init__(self, datastore: PostgresDatastore, relay_channels: Mapping[str, Iterable[str]] | None = None):
        super().__init__(datastore, events_table_name=EVENTS_TABLE)
        self.channel_name = EVENTS_CHANNEL
        # {channel: topics}: a statement holding one of these topics also notifies that
        # channel, so a listener that relays only them is not woken by every other event.
        self.channel_of_topic = {
            topic: channel for channel, topics in (relay_channels or {}).items() for topic in topics
        }
        replies = (
            "INSERT INTO chronicle.idempotency (owner, key, fingerprint, reply, position)"
            " SELECT r.owner, r.key, r.fingerprint, r.reply, {position}"
            " FROM unnest(%b::text[], %b::text[], %b::text[], %b::bytea[], %b::int4[])"
            " AS r(owner, key, fingerprint, reply, last_event)"
        )
        self.insert_replies = replies.format(position="NULL")
        # One statement, so one round trip and its own transaction (migration 0006): the
        # lock is taken before the first notification id is drawn, ids are drawn in the
        # order of the rows, and a version or key conflict anywhere fails the whole
        # statement (IntegrityError) with nothing saved.
        self.append = (
            "WITH appended AS ("
            " INSERT INTO chronicle.events (originator_id, originator_version, topic, state)"
            " SELECT * FROM unnest(%b::uuid[], %b::int8[], %b::text[], %b::bytea[])"
            " WHERE (SELECT chronicle.begin_append(%b::text[]))"
            " RETURNING notification_id"
            "), positions AS (SELECT array_agg(notification_id ORDER BY notification_id) AS ids FROM appended"
            "), replied AS ("
            + replies.format(position="positions.ids[r.last_event]")
            + ", positions) SELECT unnest(ids) AS notification_id FROM positions"
        )
        self.select_streams = SQL(
            "SELECT e.originator_id, e.originator_version, e.topic, e.state"
            " FROM unnest(%s::uuid[], %s::bigint[]) AS s(id, after)"
            " JOIN chronicle.events e ON e.originator_id = s.id AND e.originator_version > s.after"
            " ORDER BY e.originator_id, e.originator_version"
        )
        self.select_idempotency = SQL(
            "SELECT owner, key, fingerprint, reply, position FROM chronicle.idempotency"
            " WHERE (owner, key) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
        )

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        # Never the library's insert: it runs in pipeline mode, where psycopg 3.3 hangs for
        # good sending a statement of more than ~10 MB (psycopg issue 685).
        return self.record(stored_events)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def record(self, stored_events: Sequence[StoredEvent], replies: Sequence[IdempotencyRecord] = ()) -> list[int]:
        """One transaction: the events and the commands' replies; returns the events'
        notification ids, in the order of `stored_events`."""
        reply_columns = (
            [r.owner for r in replies],
            [r.key for r in replies],
            [r.fingerprint for r in replies],
            [r.reply for r in replies],
            [None if r.last_event is None else r.last_event + 1 for r in replies],
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            if not stored_events:
                # Commands that changed nothing still keep their replies (if they have any).
                if replies:
                    curs.execute(self.insert_replies, reply_columns, prepare=True)
                return []
            relays = {self.channel_of_topic.get(event.topic) for event in stored_events} - {None}
            curs.execute(
                self.append,
                (
                    [e.originator_id for e in stored_events],
                    [e.originator_version for e in stored_events],
                    [e.topic for e in stored_events],
                    [e.state for e in stored_events],
                    [EVENTS_CHANNEL, *sorted(relays)],
                    *reply_columns,
                ),
                prepare=True,
            )
            return [row["notification_id"] for row in curs.fetchall()]

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def streams(self, after: Mapping[UUID, int]) -> list[StoredEvent]:
        """The events of each stream after the version given for it (0: the whole stream)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_streams, (list(after), list(after.values())), prepare=True)
            return [
                StoredEvent(
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def replies(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, bytes]]:
        if not keys:
            return {}
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_idempotency, ([k[0] for k in keys], [k[1] for k in keys]))
            return {(r["owner"], r["key"]): (r["fingerprint"], with_position(r)) for r in curs.fetchall()}


def with_position(row: Mapping[str, Any]) -> bytes:
    """A stored reply as it was sent: its position kept beside it goes back in."""
    reply = bytes(row["reply"])
    if row["position"] is None:
        return reply
    return orjson.dumps({**orjson.loads(reply), "position": row["position"]})


class EventStore:
    """Saves aggregates' pending events and rebuilds aggregates from their streams.

    Connections are not pinged before use (a round trip per transaction); a dropped one
    fails its statement, the pool discards it, and the recorder's retry takes another.
    """

    def __init__(
        self,
        target: PostgresTarget,
        *,
        pool_size: int = 4,
        relay_channels: Mapping[str, Iterable[str]] | None = None,
        keys: KeyRing | None = None,
    ):
        params = target.params
        self.datastore = PostgresDatastore(
            dbname=params["dbname"],
            host=params["host"],
            port=params["port"],
            user=params["user"],
            password=params["password"],
            pool_size=pool_size,
            max_overflow=pool_size,
            schema=EVENTS_SCHEMA,
        )
        self.recorder = ChronicleRecorder(self.datastore, relay_channels)
        self.mapper = PydanticMapper(keys=keys)
        self.snapshots = SnapshotRecorder(self.datastore)
        self.snapshot_codec = SnapshotCodec(self.mapper)

    def load_many(self, ids: Iterable[UUID], *, use_snapshots: bool = True) -> dict[UUID, Aggregate]:
        """The aggregates with these ids; one whose owner was erased is as good as missing.

        Each starts from its latest snapshot and folds only the events after it (one query
        for all); an unreadable snapshot is passed over for the whole stream (one more)."""
        ids = list(ids)
        aggregates: dict[UUID, Any] = {}
        erased: set[UUID] = set()
        if use_snapshots:
            snapshots, events = self.snapshots.latest_and_after(ids)
        else:
            snapshots, events = {}, self.recorder.streams(dict.fromkeys(ids, 0))
        unreadable: set[UUID] = set()
        for snapshot in snapshots.values():
            try:
                aggregates[snapshot.originator_id] = self.snapshot_codec.decode(snapshot)
            except ErasedContent:
                erased.add(snapshot.originator_id)
            except SnapshotUnreadable as error:
                unreadable.add(snapshot.originator_id)
                log.warning(
                    "snapshot unreadable, loading the whole stream",
                    extra={"aggregate_id": str(snapshot.originator_id), "version": snapshot.originator_version,
                           "reason": str(error)},
                )
        if unreadable:
            events = [e for e in events if e.originator_id not in unreadable]
            events += self.recorder.streams(dict.fromkeys(unreadable, 0))
        for stored in events:
            if stored.originator_id in erased:
                continue
            try:
                event = self.mapper.to_domain_event(stored)
            except ErasedContent:
                erased.add(stored.originator_id)
                aggregates.pop(stored.originator_id, None)
                continue
            aggregates[event.originator_id] = event.mutate(aggregates.get(event.originator_id))
        return aggregates

    def events_of(self, originator_id: UUID) -> list[DomainEvent]:
        return [self.mapper.to_domain_event(s) for s in self.recorder.select_events(originator_id)]

    def close(self) -> None:
        self.datastore.close()
