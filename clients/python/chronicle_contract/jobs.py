"""The wire contract of artifact generation jobs: request, the workers' steps, and queries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chronicle_contract.base import (
    Command,
    JsonObject,
    Offset,
    Page,
    PageCursor,
    Position,
    Query,
    Reply,
    Text,
    Written,
    empty_list,
    empty_object,
)
from chronicle_contract.values import MAX_JOB_CONTENT, MAX_JOB_REASON, MAX_WORKER, Chunk, JobStatus

ArtifactType = Literal["quiz", "summary", "layout"]


SourceId = Annotated[str, Text(200)]


Worker = Annotated[str, Text(MAX_WORKER)]



def job_progress(signals_prefix: str, job_id: UUID) -> str:
    """Where a job's progress goes, under its owner's signal subjects (clients/python/chronicle_contract/bus.py)."""
    return f"{signals_prefix}.jobs.{job_id}.progress"

class JobRequested(Written):
    job_id: UUID
    session_id: UUID
    status: JobStatus
    progress: int
    created: bool  # False: an active job with the same fingerprint answered instead


class JobPhase(Written):
    """Internal: the phase a worker now holds and what it needs to run it (phase None: the
    job ended, or another worker holds it)."""

    job_id: UUID
    session_id: UUID
    status: JobStatus
    progress: int
    phase: str | None = None
    attempt: int | None = None
    spec: dict[str, Any] | None = None
    snapshot: list[dict[str, Any]] = empty_list()
    plan: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    artifact_id: UUID | None = None


class JobView(Reply):
    job_id: UUID
    session_id: UUID
    artifact_type: str
    status: JobStatus
    progress: int
    attempt: int
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    error: str | None
    artifact_id: UUID | None
    snapshot_chunks: int
    created_at: datetime
    updated_at: datetime


DEFAULT_CHUNKS = 8
MAX_CHUNKS = 50


class JobOptions(BaseModel):
    """What every job's options may hold; each artifact type adds its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def integral_numbers(cls, given: Any) -> Any:
        """JSON's integers: 5 and 5.0 are the same number there (still never "5" or true)."""
        if isinstance(given, dict):
            return {key: int(value) if isinstance(value, float) and value.is_integer() else value
                    for key, value in given.items()}
        return given

    chunks: int = Field(default=DEFAULT_CHUNKS, ge=0, le=MAX_CHUNKS, strict=True,
                        description="how many chunks of your history to retrieve for it")


class QuizOptions(JobOptions):
    num_questions: int = Field(default=5, ge=1, le=50, strict=True)
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    choices: int | None = Field(default=None, ge=2, le=8, strict=True,
                                description="options per question; default by difficulty: 3, 4, 6")


class SummaryOptions(JobOptions):
    key_points: int = Field(default=5, ge=1, le=20, strict=True)


class LayoutOptions(JobOptions):
    sections: int = Field(default=3, ge=1, le=8, strict=True)


OPTIONS: dict[str, type[JobOptions]] = {"quiz": QuizOptions, "summary": SummaryOptions, "layout": LayoutOptions}


class RequestJob(Command[JobRequested], action="job.request"):
    content: Annotated[str, Text(MAX_JOB_CONTENT)]
    artifact_type: ArtifactType
    session_id: UUID | None = Field(default=None, description="default: the caller's current session")
    source_ids: list[SourceId] = empty_list(
        max_length=100, description="conversations or artifacts to retrieve from; default: all the caller's"
    )
    options: JsonObject = empty_object(
        description="by artifact type: quiz num_questions, difficulty, choices; summary key_points; "
        "layout sections; any: chunks (OPTIONS below; checked by the service, each option named when refused)"
    )
    min_position: Position | None = Field(
        default=None, description="the snapshot includes content up to this notification id (the client's last write)"
    )


class RecordJob(RequestJob, action="job.record"):
    """Internal: the request with the retrieval snapshot captured for it."""

    snapshot: list[Chunk]


class JobStep(Command[JobPhase]):
    """Internal: what a worker records; only the worker holding the phase may."""

    job_id: UUID
    worker: Worker


class StartPhase(JobStep, action="job.start_phase"):
    """Internal: the worker takes the job's next phase."""


class DescribeJob(JobStep, action="job.describe"):
    """Internal: what the worker needs to run the job's next phase, recording nothing."""


class RecordOutcomes(JobStep, action="job.record_outcomes"):
    """Internal: the outcomes of one or more phases in a row, from the phase the worker
    holds on (a plan, a result, validation's problems), recorded in one commit."""

    plan: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    problems: list[str] | None = None

    @model_validator(mode="after")
    def _some_outcome(self) -> RecordOutcomes:
        if self.plan is None and self.result is None and self.problems is None:
            raise ValueError("give at least one of plan, result and problems")
        return self


class FailJob(JobStep, action="job.fail"):
    reason: Annotated[str, Text(MAX_JOB_REASON)]


class GetJob(Query[JobView], action="jobs.get"):
    job_id: UUID


class ListJobs(Query[Page[JobView]], action="jobs.list"):
    session_id: UUID | None = None
    status: JobStatus | None = None
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None
