"""Pydantic event and aggregate bases that plug Chronicle's models into eventsourcing."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate, CanInitAggregate, CanMutateAggregate
from pydantic import BaseModel, ConfigDict

from domain.errors import InvalidCommand, NotFound

# The owner of what Chronicle records about itself (erasures, digests): never a user,
# never erased, its events never sealed with a user's key.
SYSTEM_OWNER = "chronicle"


class DomainEvent(BaseModel):
    """An immutable fact; subclasses name it in the past tense."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Raised when a field's shape changes, with an `upcast_v{N-1}_vN(state)` static method that
    # brings older stored states up to it (the library's convention; the mapper applies them).
    class_version: ClassVar[int] = 1
    # The aggregate an event defined beside a mixin (domain/hitl.py) is recorded on; an event
    # class nested in its aggregate is named by its qualified name ("Conversation.Started").
    AGGREGATE: ClassVar[str | None] = None

    originator_id: UUID
    originator_version: int
    timestamp: datetime


def event_type_name(event_class: type[DomainEvent], stored_name: str) -> str:
    """"Aggregate.Event" for an event class stored under `stored_name` (its topic's name part):
    the name the event feed and its subjects give it."""
    return stored_name if "." in stored_name else f"{event_class.AGGREGATE}.{stored_name}"


class Aggregate(BaseAggregate[UUID]):
    """Base for Chronicle aggregates: every aggregate has an owner user id (`owner`)."""

    # True for an aggregate whose only event is its creation: a cached copy is never behind
    # the store, so a command that only reads it need not check (CommandBus._check_reads).
    WRITTEN_ONCE: ClassVar[bool] = False

    if TYPE_CHECKING:  # set by Created.apply; an annotation at runtime would make every aggregate a dataclass
        owner: str

    class Event(DomainEvent, CanMutateAggregate[UUID]):
        pass

    class Created(Event, CanInitAggregate[UUID]):
        originator_topic: str
        owner: str

        def apply(self, aggregate: Any) -> None:
            aggregate.owner = self.owner

    def trigger_event(self, event_class: type, **kwargs: object) -> None:
        if self.WRITTEN_ONCE:  # (its creation is not triggered: it is made by _create)
            raise TypeError(f"{type(self).__name__} is written once: {event_class.__name__} would break that")
        # An aggregate's events never go back in time, even if two instances' clocks differ.
        at = kwargs.get("timestamp")
        if isinstance(at, datetime) and at < self.modified_on:
            kwargs["timestamp"] = self.modified_on
        super().trigger_event(event_class, **kwargs)

    def check_visible_to(self, user_id: str) -> None:
        """Another user's aggregate is reported exactly like a missing one."""
        if self.owner != user_id or self.is_gone():
            raise NotFound(f"{type(self).__name__.lower()} {self.id} not found")

    def is_gone(self) -> bool:
        return False


def check_text(field: str, value: str, *, max_length: int, min_length: int = 1) -> None:
    if "\x00" in value:
        raise InvalidCommand(f"{field} must not contain NUL characters", field=field, rule="no_nul")
    if len(value) < min_length or (min_length > 0 and not value.strip()):
        raise InvalidCommand(f"{field} must not be empty", field=field, rule="min_length")
    if len(value) > max_length:
        raise InvalidCommand(
            f"{field} must be at most {max_length} characters", field=field, rule="max_length"
        )


MAX_TAGS = 10
MAX_TAG_LENGTH = 50


def normalise_tags(field: str, tags: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Tags keep their first-seen order, lose duplicates, and obey the tag limits."""
    unique = tuple(dict.fromkeys(tag.strip() for tag in tags))
    if len(unique) > MAX_TAGS:
        raise InvalidCommand(f"{field} may hold at most {MAX_TAGS} tags", field=field, rule="max_items")
    for tag in unique:
        check_text(field, tag, max_length=MAX_TAG_LENGTH)
    return unique
