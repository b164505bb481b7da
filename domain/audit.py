"""The AuditTrail aggregate: what an auditor read of other users' history, and when."""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from domain.base import Aggregate

TRAIL_NAMESPACE = UUID("5d1f3c2e-8a4b-4f0e-9c1d-2b7e6a9f0c31")


class AuditTrail(Aggregate):
    """One per auditor (its id derives from the auditor's user id); owned by the auditor."""

    class Opened(Aggregate.Created):
        def apply(self, trail: AuditTrail) -> None:
            super().apply(trail)

    class StreamRead(Aggregate.Event):
        """The auditor read another user's stream (or a timeline scoped by it)."""

        what: str  # "aggregate" (its stream), "timeline" or "verify" (its hash chain)
        aggregate_id: UUID
        aggregate_owner: str
        at_version: int | None
        at_time: datetime | None

        def apply(self, trail: AuditTrail) -> None:
            pass

    @staticmethod
    def id_for(auditor: str) -> UUID:
        return uuid.uuid5(TRAIL_NAMESPACE, auditor)

    @classmethod
    def open(cls, *, auditor: str, at: datetime) -> AuditTrail:
        return cls._create(cls.Opened, id=cls.id_for(auditor), timestamp=at, owner=auditor)

    def record_read(
        self, *, at: datetime, what: str, aggregate_id: UUID, aggregate_owner: str,
        at_version: int | None = None, at_time: datetime | None = None,
    ) -> None:
        self.trigger_event(
            self.StreamRead, timestamp=at, what=what, aggregate_id=aggregate_id,
            aggregate_owner=aggregate_owner, at_version=at_version, at_time=at_time,
        )
