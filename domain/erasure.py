"""The DataSubject aggregate: a user's erasure (crypto-shredding), recorded for the audit.

It is owned by the system, not by the erased user, so the record of the erasure stays
readable after the user's key is destroyed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from domain.base import SYSTEM_OWNER, Aggregate
from domain.errors import Conflict

SUBJECT_NAMESPACE = UUID("9a3e6d1c-4b7f-4e2a-8c5d-0f1e2d3c4b5a")


class UserErased(Conflict):
    """The user was erased: nothing more is written for them."""


class DataSubjectAttributes:
    # What its events set (declared here, not on the aggregate: see domain/snapshot.py state_of).
    user_id: str
    erased: bool


class DataSubject(DataSubjectAttributes, Aggregate):
    """State: owner (the system), user_id, erased."""


    class Registered(Aggregate.Created):
        user_id: str

        def apply(self, subject: DataSubject) -> None:
            super().apply(subject)
            subject.user_id = self.user_id
            subject.erased = False

    class Erased(Aggregate.Event):
        """Every read model drops the user's rows; the user's key is destroyed after this commits."""

        user_id: str
        requested_by: str

        def apply(self, subject: DataSubject) -> None:
            subject.erased = True

    @staticmethod
    def id_for(user_id: str) -> UUID:
        return uuid.uuid5(SUBJECT_NAMESPACE, user_id)

    @classmethod
    def register(cls, *, user_id: str, at: datetime) -> DataSubject:
        return cls._create(cls.Registered, id=cls.id_for(user_id), timestamp=at, owner=SYSTEM_OWNER, user_id=user_id)

    def erase(self, *, at: datetime, requested_by: str) -> bool:
        """Record the erasure; False if the user was erased already."""
        if self.erased:
            return False
        self.trigger_event(self.Erased, timestamp=at, user_id=self.user_id, requested_by=requested_by)
        return True
