"""The wire contract of artifact generation jobs: request, the workers' steps, and queries."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import Field, model_validator

from domain.job import MAX_CONTENT, MAX_REASON, MAX_WORKER, Chunk, Status
from services.contract import Command, JsonObject, Query, Reply, Written, text

ArtifactType = Literal["quiz", "summary", "layout"]
SourceId = text(200)
Worker = text(MAX_WORKER)


class RequestJob(Command):
    content: text(MAX_CONTENT)  # type: ignore[valid-type]
    artifact_type: ArtifactType
    session_id: UUID | None = Field(default=None, description="default: the caller's current session")
    source_ids: list[SourceId] = Field(  # type: ignore[valid-type]
        default=[], max_length=100, description="conversations or artifacts to retrieve from; default: all the caller's"
    )
    options: JsonObject = Field(default={}, description="e.g. questions (quiz), chunks (how many to retrieve)")
    min_position: int | None = Field(
        default=None, ge=0, description="the snapshot includes content up to this notification id (the client's last write)"
    )


class RecordJob(RequestJob):
    """Internal: the request with the retrieval snapshot captured for it."""

    snapshot: list[Chunk]


class JobStep(Command):
    """Internal: what a worker records; only the worker holding the phase may."""

    job_id: UUID
    worker: Worker  # type: ignore[valid-type]


class RecordOutcomes(JobStep):
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


class FailJob(JobStep):
    reason: text(MAX_REASON)  # type: ignore[valid-type]


class GetJob(Query):
    job_id: UUID


class ListJobs(Query):
    session_id: UUID | None = None
    status: Status | None = None
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)


# --- replies ------------------------------------------------------------------------------

class JobRequested(Written):
    job_id: UUID
    session_id: UUID
    status: Status
    progress: int
    created: bool  # False: an active job with the same fingerprint answered instead


class Job(Reply):
    job_id: UUID
    session_id: UUID
    artifact_type: str
    status: Status
    progress: int
    attempt: int
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    error: str | None
    artifact_id: UUID | None
    snapshot_chunks: int
    created_at: datetime
    updated_at: datetime
