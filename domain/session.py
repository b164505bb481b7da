"""The Session aggregate: a named, owned container for conversations, artifacts and runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from domain.base import Aggregate, check_text, normalise_tags
from domain.errors import Conflict
from domain.optimization import OptimizationState, Optimizing
from domain.snapshot import state_of

MAX_SESSION_NAME = 500
MAX_SESSION_DESCRIPTION = 10_000
SessionKind = Literal["general", "chat", "generation", "optimization"]


class SessionClosed(Conflict):
    pass


class SessionAttributes:
    """What a snapshot keeps (domain/snapshot.py): every attribute the events set."""

    name: str
    description: str
    kind: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    closed: bool
    optimization: OptimizationState | None


class Session(SessionAttributes, Optimizing, Aggregate):
    """State: owner, name, description, kind, tags, metadata, closed, optimization (set by
    apply methods; `optimization` only for kind `optimization`, see domain/optimization.py)."""

    State = state_of(SessionAttributes)

    class Created(Aggregate.Created):
        name: str
        description: str
        kind: str
        tags: tuple[str, ...]
        metadata: dict[str, Any]

        def apply(self, session: Session) -> None:
            super().apply(session)
            session.name = self.name
            session.description = self.description
            session.kind = self.kind
            session.tags = self.tags
            session.metadata = self.metadata
            session.closed = False
            session.optimization = None

    class Renamed(Aggregate.Event):
        name: str

        def apply(self, session: Session) -> None:
            session.name = self.name

    class Described(Aggregate.Event):
        description: str

        def apply(self, session: Session) -> None:
            session.description = self.description

    class Tagged(Aggregate.Event):
        tags: tuple[str, ...]

        def apply(self, session: Session) -> None:
            session.tags = self.tags

    class Closed(Aggregate.Event):
        def apply(self, session: Session) -> None:
            session.closed = True

    @classmethod
    def create(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        name: str,
        description: str = "",
        kind: str = "general",
        tags: list[str] | tuple[str, ...] = (),
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        check_text("name", name, max_length=MAX_SESSION_NAME)
        check_text("description", description, max_length=MAX_SESSION_DESCRIPTION, min_length=0)
        return cls._create(
            cls.Created,
            id=id,
            timestamp=at,
            owner=owner,
            name=name,
            description=description,
            kind=kind,
            tags=normalise_tags("tags", tags),
            metadata=metadata or {},
        )

    def update(
        self,
        *,
        at: datetime,
        name: str | None = None,
        description: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        self.check_open()
        if name is not None:
            check_text("name", name, max_length=MAX_SESSION_NAME)
        if description is not None:
            check_text("description", description, max_length=MAX_SESSION_DESCRIPTION, min_length=0)
        new_tags = normalise_tags("tags", tags) if tags is not None else None
        if name is not None and name != self.name:
            self.trigger_event(self.Renamed, timestamp=at, name=name)
        if description is not None and description != self.description:
            self.trigger_event(self.Described, timestamp=at, description=description)
        if new_tags is not None and new_tags != self.tags:
            self.trigger_event(self.Tagged, timestamp=at, tags=new_tags)

    def close(self, *, at: datetime) -> None:
        if not self.closed:
            self.trigger_event(self.Closed, timestamp=at)

    def check_open(self) -> None:
        if self.closed:
            raise SessionClosed(f"session {self.id} is closed", field="session_id", rule="open")
