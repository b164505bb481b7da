"""The event store: eventsourcing's Postgres recorder with a pydantic/orjson mapper.

The recorder also writes idempotency records in the same statement as the events, so a
command's reply exists exactly when its events do.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import (
    DataError,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Connection
from psycopg.errors import UniqueViolation
from psycopg.sql import SQL

from adapters.errors import WRITER_ERASED, constraint_of, sqlstate_of, statement_failed
from adapters.store import arrays
from adapters.store.arrays import Byteas, Int4s, Int8s, Texts, Uuids
from adapters.store.keys import KeyRing
from adapters.store.mapper import PydanticMapper
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import Reachability, fail_fast, while_reachable
from adapters.store.snapshots import SnapshotCodec, SnapshotRecorder, SnapshotUnreadable
from domain.base import Aggregate, DomainEvent
from services.ports import event_store as port
from services.ports.event_store import ErasedContent, IdempotencyRecord, KeyTaken, StoredReply, WriterErased

log = logging.getLogger(__name__)

EVENTS_SCHEMA = "chronicle"
EVENTS_TABLE = "events"
EVENTS_CHANNEL = "chronicle_events"
IDEMPOTENCY_KEY = "idempotency_pkey"  # the primary key of chronicle.idempotency: (owner, key)
UNIQUE_VIOLATION = UniqueViolation.sqlstate
SERVER_PARAMS = ("dbname", "host", "port", "user", "password")  # the target's, resolved as a connection opens


class ChronicleRecorder(PostgresApplicationRecorder, port.Recorder):
    """Saves a group commit's events and idempotency records in one statement, and reads
    many streams at once."""

    def __init__(
        self,
        datastore: PostgresDatastore,
        reachability: Reachability,
        relay_channels: Mapping[str, Iterable[str]] | None = None,
    ):
        super().__init__(datastore, events_table_name=EVENTS_TABLE)
        self.reachability = reachability
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
        # Replies of commands that recorded no event: under the append lock and its erasure
        # check too (migration 0007).
        self.insert_replies = (
            replies.format(position="NULL") + " WHERE (SELECT chronicle.begin_append(%b::text[], %b::text[], %b::text[]))"
        )
        # One statement, so one round trip and its own transaction (migration 0006): the
        # lock is taken before the first notification id is drawn, ids are drawn in the
        # order of the rows, and a version or key conflict anywhere fails the whole
        # statement (IntegrityError) with nothing saved.
        self.append = (
            "WITH appended AS ("
            " INSERT INTO chronicle.events (originator_id, originator_version, topic, state)"
            " SELECT * FROM unnest(%b::uuid[], %b::int8[], %b::text[], %b::bytea[])"
            " WHERE (SELECT chronicle.begin_append(%b::text[], %b::text[], %b::text[]))"
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
        self.select_changed = SQL(
            "SELECT s.id FROM unnest(%s::uuid[], %s::bigint[]) AS s(id, seen)"
            " WHERE EXISTS (SELECT 1 FROM chronicle.events e WHERE e.originator_id = s.id AND e.originator_version > s.seen)"
        )
        self.select_positions = SQL(
            "SELECT e.originator_id, e.originator_version, e.notification_id"
            " FROM unnest(%s::uuid[], %s::bigint[], %s::bytea[]) AS t(id, version, state)"
            " JOIN chronicle.events e ON e.originator_id = t.id AND e.originator_version = t.version"
            " AND e.state = t.state"
        )
        self.select_idempotency = SQL(
            "SELECT owner, key, fingerprint, reply, position FROM chronicle.idempotency"
            " WHERE (owner, key) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
        )

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        # Never the library's insert: it runs in pipeline mode, where psycopg 3.3 hangs for
        # good sending a statement of more than ~10 MB (psycopg issue 685).
        return self.record(stored_events)

    @while_reachable
    def record(
        self, stored_events: Sequence[StoredEvent], replies: Sequence[IdempotencyRecord] = (), *,
        writers: Collection[str] = (), erased: Collection[str] = (),
    ) -> list[int]:
        """One transaction: the events and the commands' replies; returns the events'
        notification ids, in the order of `stored_events`. `writers`: the users whose
        content is sealed in it (WriterErased if one was erased before); `erased`: the users
        whose erasure it records (their keys are destroyed with it). A connection that failed
        is tried again; a statement whose values failed it is not (DataError)."""
        try:
            return self._record(stored_events, replies, sorted(writers), sorted(erased))
        except PersistenceError as error:
            if sqlstate_of(error) == WRITER_ERASED:
                raise WriterErased("content for an erased user") from None
            if sqlstate_of(error) == UNIQUE_VIOLATION and constraint_of(error) == IDEMPOTENCY_KEY:
                # (not any error naming that index: a key too long for it names it too)
                raise KeyTaken("an idempotency key is already taken") from None
            if isinstance(error, OperationalError) and statement_failed(error):
                raise DataError(str(error)) from error
            raise

    def _record(
        self, stored_events: Sequence[StoredEvent], replies: Sequence[IdempotencyRecord],
        writers: list[str], erased: list[str],
    ) -> list[int]:
        reply_columns = (
            Texts(r.owner for r in replies),
            Texts(r.key for r in replies),
            Texts(r.fingerprint for r in replies),
            Byteas(r.reply for r in replies),
            Int4s(None if r.last_event is None else r.last_event + 1 for r in replies),
        )
        writers_column, erased_column = Texts(writers), Texts(erased)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            if not stored_events:
                # Commands that changed nothing still keep their replies (if they have any).
                if replies:
                    curs.execute(self.insert_replies, (*reply_columns, Texts(), writers_column, erased_column), prepare=True)
                return []
            relays = {self.channel_of_topic[e.topic] for e in stored_events if e.topic in self.channel_of_topic}
            curs.execute(
                self.append,
                (
                    Uuids(e.originator_id for e in stored_events),
                    Int8s(e.originator_version for e in stored_events),
                    Texts(e.topic for e in stored_events),
                    Byteas(e.state for e in stored_events),
                    Texts([EVENTS_CHANNEL, *sorted(relays)]),
                    writers_column,
                    erased_column,
                    *reply_columns,
                ),
                prepare=True,
            )
            return [row["notification_id"] for row in curs.fetchall()]

    @while_reachable
    def streams(self, after: Mapping[UUID, int]) -> list[StoredEvent]:
        """The events of each stream after the version given for it (0: the whole stream)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_streams, (Uuids(after), Int8s(after.values())), prepare=True)
            return [
                StoredEvent(
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]

    @while_reachable
    def changed(self, seen: Mapping[UUID, int]) -> set[UUID]:
        """The streams with an event after the version given for each (0: any event at all)."""
        if not seen:
            return set()
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_changed, (Uuids(seen), Int8s(seen.values())), prepare=True)
            return {row["id"] for row in curs.fetchall()}

    @while_reachable
    def positions_of(self, stored_events: Sequence[StoredEvent]) -> dict[tuple[UUID | str, int], int]:
        if not stored_events:
            return {}
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_positions, (
                Uuids(e.originator_id for e in stored_events),
                Int8s(e.originator_version for e in stored_events),
                Byteas(e.state for e in stored_events),
            ))
            return {(r["originator_id"], r["originator_version"]): r["notification_id"] for r in curs.fetchall()}

    @while_reachable
    def replies(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredReply]:
        """{(owner, key): (fingerprint column, stored reply, position)} of the keys found."""
        if not keys:
            return {}
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_idempotency, (Texts(k[0] for k in keys), Texts(k[1] for k in keys)))
            return {
                (r["owner"], r["key"]): StoredReply(r["fingerprint"], bytes(r["reply"]), r["position"])
                for r in curs.fetchall()
            }


class GuardedDatastore(PostgresDatastore):
    """The library's datastore, each connection it lends watched while in use: a server that
    stops answering mid-statement costs the writer thread `unavailable_after`, not for ever
    (adapters/store/reachability.py)."""

    def __init__(self, reachability: Reachability, **kwargs: Any):
        super().__init__(**kwargs)
        self.reachability = reachability

    @contextlib.contextmanager
    def get_connection(self) -> Iterator[Any]:
        with super().get_connection() as conn, self.reachability.guarding(conn):
            yield conn

    def after_connect_func(self) -> Callable[[Connection[Any]], None]:
        """The library's set-up of each new connection, and our typed arrays' dumpers."""
        configure = super().after_connect_func()

        def after_connect(conn: Connection[Any]) -> None:  # (no reference to self: see the library's)
            configure(conn)
            arrays.register(conn)

        return after_connect

    def register_type_adapters(self) -> None:
        """Nothing to register: the library reads the composite type its database functions
        take from the server as its recorders are made (a connection at construction), and
        we leave those functions off (POSTGRES_ENABLE_DB_FUNCTIONS skips the append lock)."""


class EventStore(port.Store):
    """Saves aggregates' pending events and rebuilds aggregates from their streams.

    Connections are not pinged before use (a round trip per transaction); a dropped one
    fails its statement, the pool discards it, and the recorder's retry takes another.
    """

    recorder: ChronicleRecorder
    mapper: PydanticMapper

    def __init__(
        self,
        target: PostgresTarget,
        *,
        pool_size: int = 4,
        relay_channels: Mapping[str, Iterable[str]] | None = None,
        keys: KeyRing | None = None,
        unavailable_after: float = 2.0,
    ):
        # Nothing here connects, nor asks the target for its URL: the pool learns where the
        # server is as it opens its first connection (an embedded server's URL is known only
        # once it has started; the composition root builds this store before that).
        self.reachability = Reachability(lambda: target.url, unavailable_after, is_statement_failure=statement_failed)
        self.datastore = GuardedDatastore(
            self.reachability,
            dbname="", host="", port="", user="", password="",
            pool_size=pool_size,
            max_overflow=pool_size,
            schema=EVENTS_SCHEMA,
        )
        # While Postgres is unreachable a command fails within `unavailable_after` seconds,
        # and the first one after it is back goes through (adapters/store/reachability.py).
        fail_fast(self.datastore.pool, unavailable_after)
        static = {k: v for k, v in cast(dict[str, Any], self.datastore.pool.kwargs).items() if k not in SERVER_PARAMS}
        self.datastore.pool.kwargs = lambda: static | target.params
        if keys is not None:  # (the ring reads keys on the writer thread too)
            keys.watch, keys.answers = self.reachability.guarding, self.reachability.answers
        self.recorder = ChronicleRecorder(self.datastore, self.reachability, relay_channels)
        self.mapper = PydanticMapper(keys=keys)
        self.snapshots = SnapshotRecorder(self.datastore, self.reachability)
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
                erased.add(cast(UUID, stored.originator_id))  # (the library types ids as UUID | str; ours are UUIDs)
                aggregates.pop(cast(UUID, stored.originator_id), None)
                continue
            aggregates[event.originator_id] = event.mutate(aggregates.get(event.originator_id))
        return aggregates

    def catch_up(self, aggregates: Mapping[UUID, Any]) -> tuple[set[UUID], set[UUID]]:
        """Fold into each aggregate (in place) the events stored after its version, in one
        query: (those that changed, those that could not be caught up and must be loaded
        again: their owner was erased meanwhile)."""
        changed: set[UUID] = set()
        dropped: set[UUID] = set()
        for stored in self.recorder.streams({i: a.version for i, a in aggregates.items()}):
            originator_id = cast(UUID, stored.originator_id)
            if originator_id in dropped:
                continue
            try:
                self.mapper.to_domain_event(stored).mutate(aggregates[originator_id])
            except ErasedContent:
                dropped.add(originator_id)
                continue
            changed.add(originator_id)
        return changed - dropped, dropped

    def events_of(self, originator_id: UUID) -> list[DomainEvent]:
        return [self.mapper.to_domain_event(s) for s in self.recorder.select_events(originator_id)]

    def close(self) -> None:
        self.datastore.close()
