"""The view interface a read model's projection writes through, and the projection base.

The shape of eventsourcing's `Projection[View]`: a projection turns each event it cares
about into calls on its view, and the view keeps the rows. Each read model declares its
view's writes as an abstract class beside its projection (projections/<name>.py); the
Postgres views (adapters/read_side/views/) gather a batch's calls into a few statements
committed with the tracking position, and unit tests pass in-memory views.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from eventsourcing.utils import get_topic

from domain.erasure import DataSubject

EventHandler = Callable[[Any, Any], None]
Handler = TypeVar("Handler", bound=EventHandler)


class View(ABC):
    """Where a read model's rows are kept."""

    @abstractmethod
    def erase_owner(self, owner: str) -> None:
        """Drop every row of this user's (an erasure): nothing of theirs stays in the read model."""


ViewType = TypeVar("ViewType", bound=View)


def handles(event_class: type) -> Callable[[Handler], Handler]:
    """Mark a projection method as the handler of one event type."""

    def mark(method: Handler) -> Handler:
        method.handled_event = event_class  # type: ignore[attr-defined]
        return method

    return mark


class Projection(Generic[ViewType]):
    """Subclasses set `name` and `version` and mark one handler per event type (`handles`).

    Bumping `version` makes the engine rebuild the read model from the first event.
    """

    name: ClassVar[str]
    version: int  # set by the class; an instance may refine it (projections/semantic.py)
    # Whether the read model holds user data: an erasure then drops the user's rows.
    erases: ClassVar[bool] = True
    # How much work an event costs this read model, roughly: the engine shares the
    # projections out over its threads by it.
    weight: ClassVar[int] = 1
    # Followed by a thread of its own rather than sharing one: for a read model that waits
    # on something outside Postgres (an embeddings endpoint), whose delays and failures must
    # not hold the others back.
    isolated: ClassVar[bool] = False
    # Failures that say nothing about the event (a service it waits on is away): the batch is
    # retried as it is. Any other failure the engine traces to one event, which it parks.
    transient_errors: ClassVar[tuple[type[Exception], ...]] = ()
    handlers: ClassVar[dict[type, EventHandler]]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.handlers = {  # a subclass keeps its bases' handlers (and may replace them)
            member.handled_event: member
            for klass in reversed(cls.__mro__)
            for member in vars(klass).values()
            if callable(member) and hasattr(member, "handled_event")
        }

    def __init__(self, view: ViewType, **options: Any):
        self.view = view
        self.options = options
        # Set when an erasure deleted rows: the engine then vacuums this read model, so that
        # no dead row version keeps the erased user's content.
        self.scrub_due = False

    @classmethod
    def topics(cls) -> list[str]:
        return [get_topic(event_class) for event_class in cls.handlers] + cls.erasure_topics()

    @classmethod
    def erasure_topics(cls) -> list[str]:
        return [get_topic(DataSubject.Erased)] if cls.erases else []

    def erase(self, event: Any) -> bool:
        """Drop an erased user's rows; False if the event is not an erasure."""
        if not (self.erases and isinstance(event, DataSubject.Erased)):
            return False
        self.scrub_due = True
        self.view.erase_owner(event.user_id)
        return True

    def apply(self, event: Any, position: int) -> None:
        handler = self.handlers.get(type(event))
        if handler is not None:
            handler(self, event)
        else:
            self.erase(event)
