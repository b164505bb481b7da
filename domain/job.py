"""The Job aggregate: one artifact generation job, planned, generated and validated in phases.

A job is requested with a retrieval snapshot and then moved along by workers: a worker
starts a phase (recording its name, so a handover to another worker is in the history)
and only the worker that started the phase may record its outcome. A failed validation
goes back to generation once, with the same plan and snapshot; a second is final.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from domain.base import Aggregate, check_text
from domain.errors import Conflict, InvalidCommand
from domain.job_results import quiz_with_correct_answers
from domain.snapshot import state_of

Status = Literal["pending", "planning", "generating", "validating", "completed", "failed"]
Phase = Literal["planning", "generating", "validating"]
ACTIVE: tuple[Status, ...] = ("pending", "planning", "generating", "validating")
MAX_ATTEMPTS = 2  # the first generation and one retry after a failed validation
MAX_CONTENT = 50_000
MAX_REASON = 2_000
MAX_WORKER = 200
# Progress at each step: planning 0–20, generating 20–60, validating 60–90, completed 100.
PLANNED, GENERATED, VALIDATED, DONE = 20, 60, 90, 100


class Chunk(BaseModel):
    """A piece of retrieved content, captured when the job was requested: every attempt
    plans and generates from these same chunks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_id: str
    source_id: str
    text: str
    score: float
    embedding_version: str
    captured_at: datetime


class NotYourPhase(Conflict):
    """Another worker took the job over (its ack deadline passed): this one must stop."""


def request_fingerprint(
    owner: str, session_id: UUID, artifact_type: str, source_ids: list[str], options: dict[str, Any]
) -> str:
    """sha256 over the user, session, artifact type, sorted source ids and canonical options."""
    canonical = json.dumps(
        [owner, str(session_id), artifact_type, sorted(source_ids), options],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class JobAttributes:
    # What its events set; the snapshot's State model is made from these.
    session_id: UUID
    artifact_type: str
    content: str
    options: dict[str, Any]
    source_ids: tuple[str, ...]
    fingerprint: str
    snapshot: tuple[Chunk, ...]
    status: Status
    progress: int
    attempt: int
    worker: str | None
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    error: str | None
    artifact_id: UUID | None


class Job(JobAttributes, Aggregate):
    State = state_of(JobAttributes)
    class_version = 2  # v2: quiz results say `correct_answer`; a snapshot of v1 is not read

    class Requested(Aggregate.Created):
        session_id: UUID
        artifact_type: str
        content: str
        options: dict[str, Any]
        source_ids: tuple[str, ...]
        fingerprint: str
        snapshot: tuple[Chunk, ...]

        def apply(self, job: Job) -> None:
            super().apply(job)
            for name in ("session_id", "artifact_type", "content", "options", "source_ids", "fingerprint", "snapshot"):
                setattr(job, name, getattr(self, name))
            job.status, job.progress, job.attempt, job.worker = "pending", 0, 1, None
            job.plan = job.result = job.error = job.artifact_id = None

    class PhaseStarted(Aggregate.Event):
        phase: Phase
        worker: str
        attempt: int
        progress: int
        taken_over_from: str | None  # the worker that had started this phase and went quiet

        def apply(self, job: Job) -> None:
            job.status, job.worker, job.progress = self.phase, self.worker, self.progress

    class PlanStored(Aggregate.Event):
        plan: dict[str, Any]
        progress: int

        def apply(self, job: Job) -> None:
            job.plan, job.progress = self.plan, self.progress

    class Generated(Aggregate.Event):
        class_version: ClassVar[int] = 2  # v2: a quiz question's answer is `correct_answer`, as seed 002 names it

        result: dict[str, Any]
        attempt: int
        progress: int

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["result"] = quiz_with_correct_answers(state["result"])

        def apply(self, job: Job) -> None:
            job.result, job.progress = self.result, self.progress

    class RetryQueued(Aggregate.Event):
        """Validation failed: generate again from the same plan and snapshot."""

        problems: list[str]
        attempt: int  # the attempt that comes next
        progress: int

        def apply(self, job: Job) -> None:
            job.status, job.attempt, job.result, job.progress = "generating", self.attempt, None, self.progress
            job.worker = None

    class Completed(Aggregate.Event):
        artifact_id: UUID
        progress: int

        def apply(self, job: Job) -> None:
            job.status, job.artifact_id, job.progress, job.worker = "completed", self.artifact_id, self.progress, None

    class Failed(Aggregate.Event):
        reason: str
        problems: list[str]

        def apply(self, job: Job) -> None:
            job.status, job.error, job.worker = "failed", self.reason, None

    class Validated(Aggregate.Event):
        progress: int

        def apply(self, job: Job) -> None:
            job.progress = self.progress

    @classmethod
    def request(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        session_id: UUID,
        artifact_type: str,
        content: str,
        options: dict[str, Any],
        source_ids: list[str],
        snapshot: list[Chunk],
    ) -> Job:
        check_text("content", content, max_length=MAX_CONTENT)
        return cls._create(
            cls.Requested,
            id=id,
            timestamp=at,
            owner=owner,
            session_id=session_id,
            artifact_type=artifact_type,
            content=content,
            options=options,
            source_ids=tuple(dict.fromkeys(source_ids)),
            fingerprint=request_fingerprint(owner, session_id, artifact_type, source_ids, options),
            snapshot=tuple(snapshot),
        )

    def is_active(self) -> bool:
        return self.status in ACTIVE

    def next_phase(self) -> Phase | None:
        """Where the job stands: the phase to run (again) next, or None when it has ended."""
        if not self.is_active():
            return None
        if self.plan is None:
            return "planning"
        return "generating" if self.result is None else "validating"

    def start_phase(self, *, at: datetime, worker: str) -> Phase | None:
        """Take the job's next phase for `worker`, taking it over from a worker that went
        quiet; None when the job has ended."""
        check_text("worker", worker, max_length=MAX_WORKER)
        phase = self.next_phase()
        if phase is None or (self.status == phase and self.worker == worker):
            return phase
        previous = self.worker if self.status == phase else None
        progress = {"planning": 0, "generating": PLANNED, "validating": GENERATED}[phase]
        self.trigger_event(
            self.PhaseStarted, timestamp=at, phase=phase, worker=worker, attempt=self.attempt, progress=progress,
            taken_over_from=previous,
        )
        return phase

    def check_phase(self, phase: Phase, worker: str) -> None:
        if self.status != phase or self.worker != worker:
            raise NotYourPhase(
                f"job {self.id} is not in {phase} by worker {worker}", field="worker", rule="holds_phase"
            )

    def store_plan(self, *, at: datetime, worker: str, plan: dict[str, Any]) -> None:
        self.check_phase("planning", worker)
        self.trigger_event(self.PlanStored, timestamp=at, plan=plan, progress=PLANNED)

    def store_result(self, *, at: datetime, worker: str, result: dict[str, Any]) -> None:
        self.check_phase("generating", worker)
        self.trigger_event(self.Generated, timestamp=at, result=result, attempt=self.attempt, progress=GENERATED)

    def finish(self, *, at: datetime, worker: str, problems: list[str], artifact_id: UUID | None) -> Status:
        """The validation's outcome: completed (the result stored as `artifact_id`), one
        retry from generation, or failed for good."""
        self.check_phase("validating", worker)
        if not problems:
            if artifact_id is None:
                raise InvalidCommand("a completed job names the artifact holding its result", field="artifact_id")
            self.trigger_event(self.Validated, timestamp=at, progress=VALIDATED)
            self.trigger_event(self.Completed, timestamp=at, artifact_id=artifact_id, progress=DONE)
        elif self.attempt < MAX_ATTEMPTS:
            self.trigger_event(
                self.RetryQueued, timestamp=at, problems=problems, attempt=self.attempt + 1, progress=PLANNED
            )
        else:
            reason = f"the result failed validation {self.attempt} times"
            self.trigger_event(self.Failed, timestamp=at, reason=reason, problems=problems)
        return self.status

    def fail(self, *, at: datetime, worker: str, reason: str) -> None:
        """The agent gave up (or the job cannot be run): final."""
        phase = self.next_phase()
        if phase is None:
            return
        self.check_phase(phase, worker)
        self.trigger_event(self.Failed, timestamp=at, reason=reason[:MAX_REASON], problems=[])
