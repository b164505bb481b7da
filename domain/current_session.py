"""CurrentSession: which session a user's artifacts go to when a command names none.

One per user (its id derives from the user id), created with the user's first such
artifact; when that session is closed, the next one opens a new session and moves here.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from domain.base import Aggregate
from domain.snapshot import state_of

CURRENT_SESSION_NAMESPACE = UUID("5d0c7f2e-1b9a-4c3d-8e6f-2a4b6c8d0e1f")


class CurrentSessionAttributes:
    # What its events set; the snapshot's State model is made from these.
    session_id: UUID


class CurrentSession(CurrentSessionAttributes, Aggregate):
    """State: owner, session_id."""

    State = state_of(CurrentSessionAttributes)

    class Chosen(Aggregate.Created):
        session_id: UUID

        def apply(self, current: CurrentSession) -> None:
            super().apply(current)
            current.session_id = self.session_id

    class Moved(Aggregate.Event):
        session_id: UUID

        def apply(self, current: CurrentSession) -> None:
            current.session_id = self.session_id

    @staticmethod
    def id_for(user_id: str) -> UUID:
        return uuid.uuid5(CURRENT_SESSION_NAMESPACE, user_id)

    @classmethod
    def choose(cls, *, owner: str, session_id: UUID, at: datetime) -> CurrentSession:
        return cls._create(cls.Chosen, id=cls.id_for(owner), timestamp=at, owner=owner, session_id=session_id)

    def move_to(self, *, session_id: UUID, at: datetime) -> None:
        if session_id != self.session_id:
            self.trigger_event(self.Moved, timestamp=at, session_id=session_id)
