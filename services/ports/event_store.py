"""The event store port: what the command bus (and whatever reads a stream back) asks of the store.

adapters/store/event_store.py implements it on Postgres (eventsourcing's recorder and our
mapper, each owner's content sealed with their key); adapters/store/memory.py in memory,
for unit tests. The values that cross it and the failures it raises are declared here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from services.ports.keys import KeyRing


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


class StoredReply(NamedTuple):
    """An idempotency record as stored: the reply as the mapper sealed it (the request's
    fingerprint inside it; the column holds one only for records from before sealing),
    and the notification id of the command's last event, merged into the reply on reading."""

    fingerprint: str
    reply: bytes
    position: int | None


class WriterErased(Exception):
    """A statement held content for a user whose erasure committed before it."""


class KeyTaken(Exception):
    """A record held an idempotency key already stored (for its user): nothing was saved."""


class ErasedContent(Exception):
    """The event's content was sealed with a key that has been destroyed."""

    def __init__(self, originator_id: UUID, version: int, owner: str) -> None:
        super().__init__(f"content of {originator_id} v{version} was erased")
        self.originator_id = originator_id
        self.version = version
        self.owner = owner


class Recorder(ABC):
    @abstractmethod
    def record(
        self, stored_events: Sequence[StoredEvent], replies: Sequence[IdempotencyRecord] = (), *,
        writers: Collection[str] = (), erased: Collection[str] = (),
    ) -> list[int]:
        """One transaction: the events and the commands' replies; returns the events'
        notification ids, in order. A version or key already taken fails all of it
        (eventsourcing's IntegrityError); content for one of `writers` erased before
        raises WriterErased; `erased`: the users whose erasure it records."""

    @abstractmethod
    def replies(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredReply]:
        """{(owner, key): stored reply} of the keys found."""

    @abstractmethod
    def positions_of(self, stored_events: Sequence[StoredEvent]) -> dict[tuple[UUID | str, int], int]:
        """{(aggregate id, version): notification id} of those of these events that are
        stored exactly as given (the same state): what a save whose outcome went unheard
        committed."""

    @abstractmethod
    def changed(self, seen: Mapping[UUID, int]) -> set[UUID]:
        """The streams with an event after the version given for each."""


class EventMapper(ABC):
    """Domain events to stored events and back, each owner's content sealed with their key."""

    keys: KeyRing | None  # None: nothing is sealed

    @abstractmethod
    def to_stored_event(self, domain_event: Any, owner: str | None = None) -> StoredEvent: ...

    @abstractmethod
    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """ErasedContent when the owner's key is gone."""

    @abstractmethod
    def seal_reply(self, owner: str | None, key: str, fingerprint: str, reply: dict[str, Any]) -> bytes:
        """A command's reply as its idempotency record keeps it (UserErased once the owner was erased)."""

    @abstractmethod
    def open_reply(self, owner: str, key: str, stored: bytes) -> tuple[str, dict[str, Any]]:
        """(request fingerprint, reply) of a stored record; ErasedContent when the owner's key is gone."""


class Store(ABC):
    """Saves events (through its recorder) and rebuilds aggregates from their streams."""

    recorder: Recorder
    mapper: EventMapper

    @abstractmethod
    def load_many(self, ids: Iterable[UUID], *, use_snapshots: bool = True) -> dict[UUID, Any]:
        """The aggregates with these ids that exist (one whose owner was erased does not)."""

    @abstractmethod
    def catch_up(self, aggregates: Mapping[UUID, Any]) -> tuple[set[UUID], set[UUID]]:
        """Fold into each aggregate, in place, the events stored after its version: (those
        that changed, those that could not be caught up and must be loaded again)."""

    @abstractmethod
    def events_of(self, originator_id: UUID) -> list[Any]:
        """A stream's events, in order."""

    @abstractmethod
    def close(self) -> None: ...
