"""JobSlot: at most one active job per request fingerprint, held by the event store's own
optimistic concurrency (its id derives from the fingerprint, so two instances creating or
claiming it at once meet on its version, and the loser decides again)."""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from domain.base import Aggregate
from domain.snapshot import state_of

SLOT_NAMESPACE = UUID("3f6b1c2d-7e8a-4b9c-a1d2-e3f4a5b6c7d8")


class JobSlotAttributes:
    # What its events set; the snapshot's State model is made from these.
    fingerprint: str
    active_job_id: UUID | None


class JobSlot(JobSlotAttributes, Aggregate):
    """State: owner, fingerprint, active_job_id (None once that job ended)."""

    State = state_of(JobSlotAttributes)

    class Opened(Aggregate.Created):
        fingerprint: str

        def apply(self, slot: JobSlot) -> None:
            super().apply(slot)
            slot.fingerprint = self.fingerprint
            slot.active_job_id = None

    class Claimed(Aggregate.Event):
        job_id: UUID

        def apply(self, slot: JobSlot) -> None:
            slot.active_job_id = self.job_id

    class Released(Aggregate.Event):
        job_id: UUID

        def apply(self, slot: JobSlot) -> None:
            slot.active_job_id = None

    @staticmethod
    def id_for(fingerprint: str) -> UUID:
        return uuid.uuid5(SLOT_NAMESPACE, fingerprint)

    @classmethod
    def open(cls, *, owner: str, fingerprint: str, at: datetime) -> JobSlot:
        return cls._create(cls.Opened, id=cls.id_for(fingerprint), timestamp=at, owner=owner, fingerprint=fingerprint)

    def claim(self, *, at: datetime, job_id: UUID) -> None:
        self.trigger_event(self.Claimed, timestamp=at, job_id=job_id)

    def release(self, *, at: datetime, job_id: UUID) -> None:
        if self.active_job_id == job_id:
            self.trigger_event(self.Released, timestamp=at, job_id=job_id)
