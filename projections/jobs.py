"""Jobs read model: each generation job's status, progress, attempt, plan, result and error."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.job import Job
from projections.view import Projection, View, handles

# What a job's row holds beside its identity (update_job's changes name these).
JOB_FIELDS = ("status", "progress", "attempt", "worker", "plan", "result", "error", "artifact_id")


class JobsView(View):
    @abstractmethod
    def add_job(
        self, job_id: UUID, owner: str, session_id: UUID, artifact_type: str, snapshot_chunks: int, at: datetime
    ) -> None:
        """A pending job, its first attempt, at progress 0."""

    @abstractmethod
    def update_job(self, job_id: UUID, at: datetime, changes: dict[str, Any]) -> None:
        """Some of JOB_FIELDS changed, at `at`."""


class JobsProjection(Projection[JobsView]):
    name = "jobs"
    version = 3  # v2: quiz results say `correct_answer` (their events are upcast; the table is rebuilt); v3: sealed

    @handles(Job.Requested)
    def requested(self, e: Job.Requested) -> None:
        self.view.add_job(e.originator_id, e.owner, e.session_id, e.artifact_type, len(e.snapshot), e.timestamp)

    @handles(Job.PhaseStarted)
    def phase_started(self, e: Job.PhaseStarted) -> None:
        self.view.update_job(
            e.originator_id, e.timestamp, {"status": e.phase, "worker": e.worker, "progress": e.progress, "attempt": e.attempt}
        )

    @handles(Job.PlanStored)
    def plan_stored(self, e: Job.PlanStored) -> None:
        self.view.update_job(e.originator_id, e.timestamp, {"plan": e.plan, "progress": e.progress})

    @handles(Job.Generated)
    def generated(self, e: Job.Generated) -> None:
        self.view.update_job(e.originator_id, e.timestamp, {"result": e.result, "progress": e.progress})

    @handles(Job.RetryQueued)
    def retry_queued(self, e: Job.RetryQueued) -> None:
        self.view.update_job(
            e.originator_id, e.timestamp,
            {"status": "generating", "attempt": e.attempt, "result": None, "progress": e.progress, "worker": None},
        )

    @handles(Job.Validated)
    def validated(self, e: Job.Validated) -> None:
        self.view.update_job(e.originator_id, e.timestamp, {"progress": e.progress})

    @handles(Job.Completed)
    def completed(self, e: Job.Completed) -> None:
        self.view.update_job(
            e.originator_id, e.timestamp,
            {"status": "completed", "artifact_id": e.artifact_id, "progress": e.progress, "worker": None},
        )

    @handles(Job.Failed)
    def failed(self, e: Job.Failed) -> None:
        self.view.update_job(e.originator_id, e.timestamp, {"status": "failed", "error": e.reason, "worker": None})
