"""An event store and a key ring in memory, for unit tests: the ports the command bus saves to
(services/ports/event_store.py, services/ports/keys.py), with the same optimistic concurrency
(a version already taken fails the whole record), the same idempotency records and the same
erasure by destroying a key, and no server.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import IntegrityError, StoredEvent

from adapters.store.mapper import PydanticMapper
from domain.erasure import UserErased
from services.ports.event_store import IdempotencyRecord, KeyTaken, Recorder, Store, StoredReply, WriterErased
from services.ports.keys import KeyRing


class InMemoryRecorder(Recorder):
    def __init__(self) -> None:
        self.events: list[StoredEvent] = []  # notification id = index + 1
        self.versions: set[tuple[UUID | str, int]] = set()
        self.stored_replies: dict[tuple[str, str], StoredReply] = {}
        self.erased: set[str] = set()  # users whose erasure was recorded
        self._lock = threading.Lock()

    def record(
        self, stored_events: Sequence[StoredEvent], replies: Sequence[IdempotencyRecord] = (), *,
        writers: Collection[str] = (), erased: Collection[str] = (),
    ) -> list[int]:
        with self._lock:
            if set(writers) & self.erased:
                raise WriterErased("content for an erased user")
            taken = {(e.originator_id, e.originator_version) for e in stored_events}
            if len(taken) < len(stored_events) or taken & self.versions:
                raise IntegrityError("an aggregate version is already taken")
            if {(r.owner, r.key) for r in replies} & set(self.stored_replies):
                raise KeyTaken("an idempotency key is already taken")
            first = len(self.events) + 1
            self.events.extend(stored_events)
            self.versions |= taken
            positions = list(range(first, first + len(stored_events)))
            for reply in replies:
                position = positions[reply.last_event] if reply.last_event is not None else None
                self.stored_replies[(reply.owner, reply.key)] = StoredReply(reply.fingerprint, reply.reply, position)
            self.erased |= set(erased)
            return positions

    def replies(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredReply]:
        with self._lock:
            return {key: self.stored_replies[key] for key in keys if key in self.stored_replies}

    def positions_of(self, stored_events: Sequence[StoredEvent]) -> dict[tuple[UUID | str, int], int]:
        wanted = {(e.originator_id, e.originator_version): e.state for e in stored_events}
        with self._lock:
            return {
                (e.originator_id, e.originator_version): position
                for position, e in enumerate(self.events, 1)
                if wanted.get((e.originator_id, e.originator_version)) == e.state
            }

    def changed(self, seen: Mapping[UUID, int]) -> set[UUID]:
        with self._lock:
            return {i for i, version in self.versions if isinstance(i, UUID) and i in seen and version > seen[i]}

    def stream(self, originator_id: UUID) -> list[StoredEvent]:
        with self._lock:
            return [e for e in self.events if e.originator_id == originator_id]


class InMemoryEventStore(Store):
    """Events kept as the Postgres store keeps them (mapped by the same mapper), unsealed."""

    recorder: InMemoryRecorder

    def __init__(self) -> None:
        self.recorder = InMemoryRecorder()
        self.mapper = PydanticMapper()

    def load_many(self, ids: Iterable[UUID], *, use_snapshots: bool = True) -> dict[UUID, Any]:
        aggregates: dict[UUID, Any] = {}
        for originator_id in ids:
            for stored in self.recorder.stream(originator_id):
                event = self.mapper.to_domain_event(stored)
                aggregates[originator_id] = event.mutate(aggregates.get(originator_id))
        return aggregates

    def catch_up(self, aggregates: Mapping[UUID, Any]) -> tuple[set[UUID], set[UUID]]:
        changed = set()
        for originator_id, aggregate in aggregates.items():
            for stored in self.recorder.stream(originator_id):
                if stored.originator_version > aggregate.version:
                    self.mapper.to_domain_event(stored).mutate(aggregate)
                    changed.add(originator_id)
        return changed, set()

    def events_of(self, originator_id: UUID) -> list[DomainEvent]:
        return [self.mapper.to_domain_event(s) for s in self.recorder.stream(originator_id)]

    def close(self) -> None:
        pass


class InMemoryKeyRing(KeyRing):
    """One random key per owner, made on first write; destroying it erases the owner."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes | None] = {}

    def key_for_writing(self, owner: str) -> bytes:
        key = self.keys.setdefault(owner, secrets.token_bytes(32))
        if key is None:
            raise UserErased(f"user {owner} was erased; nothing more is recorded for them", field="owner", rule="not_erased")
        return key

    def key_for_reading(self, owner: str) -> bytes | None:
        return self.keys.get(owner)

    def destroy(self, owner: str) -> None:
        self.keys[owner] = None

    def is_erased(self, owner: str) -> bool:
        return owner in self.keys and self.keys[owner] is None

    def evict(self, owner: str) -> None:
        pass  # (nothing is cached: the dict is the store)

    def close(self) -> None:
        pass
