"""The jobs read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from domain.job import Chunk, Job
from projections.jobs import JOB_FIELDS, JobsProjection, JobsView
from tests.unit.projected import NOW, at, erasure_of, project


class MemoryJobsView(JobsView):
    def __init__(self) -> None:
        self.jobs: dict[UUID, dict[str, Any]] = {}

    def add_job(
        self, job_id: UUID, owner: str, session_id: UUID, artifact_type: str, snapshot_chunks: int, at: datetime
    ) -> None:
        self.jobs[job_id] = {
            "owner": owner, "session_id": session_id, "artifact_type": artifact_type, "snapshot_chunks": snapshot_chunks,
            "status": "pending", "progress": 0, "attempt": 1, "worker": None, "plan": None, "result": None,
            "error": None, "artifact_id": None, "created_at": at, "updated_at": at,
        }

    def update_job(self, job_id: UUID, at: datetime, changes: dict[str, Any]) -> None:
        assert set(changes) <= set(JOB_FIELDS)
        self.jobs[job_id].update(changes, updated_at=at)

    def erase_owner(self, owner: str) -> None:
        self.jobs = {i: r for i, r in self.jobs.items() if r["owner"] != owner}


def jobs() -> tuple[JobsProjection, MemoryJobsView]:
    view = MemoryJobsView()
    return JobsProjection(view), view


def requested(owner: str = "alice") -> Job:
    chunks = [
        Chunk(chunk_id=f"c{n}", source_id="s", text=text, score=1.0, embedding_version="v", captured_at=NOW)
        for n, text in enumerate(("tulips", "roses"))
    ]
    return Job.request(
        id=uuid4(), owner=owner, at=NOW, session_id=uuid4(), artifact_type="quiz", content="flowers", options={},
        source_ids=["s"], snapshot=chunks,
    )


def test_a_job_through_its_phases_to_completion() -> None:
    projection, view = jobs()
    job = requested()
    project(projection, job)
    assert {k: view.jobs[job.id][k] for k in ("status", "progress", "attempt", "snapshot_chunks")} == {
        "status": "pending", "progress": 0, "attempt": 1, "snapshot_chunks": 2,
    }
    job.start_phase(at=at(1), worker="w1")
    job.store_plan(at=at(2), worker="w1", plan={"steps": 3})
    job.start_phase(at=at(3), worker="w1")
    job.store_result(at=at(4), worker="w1", result={"questions": []})
    job.start_phase(at=at(5), worker="w1")
    done = uuid4()
    job.finish(at=at(6), worker="w1", problems=[], artifact_id=done)
    project(projection, job)
    row = view.jobs[job.id]
    assert (row["status"], row["progress"], row["worker"], row["artifact_id"]) == ("completed", 100, None, done)
    assert (row["plan"], row["result"], row["updated_at"]) == ({"steps": 3}, {"questions": []}, at(6))


def test_a_retry_clears_the_result_and_a_failure_says_why() -> None:
    projection, view = jobs()
    job = requested()
    job.start_phase(at=NOW, worker="w1")
    job.store_plan(at=NOW, worker="w1", plan={})
    job.start_phase(at=NOW, worker="w1")
    job.store_result(at=NOW, worker="w1", result={"a": 1})
    job.start_phase(at=NOW, worker="w1")
    job.finish(at=at(1), worker="w1", problems=["wrong"], artifact_id=None)
    project(projection, job)
    row = view.jobs[job.id]
    assert (row["status"], row["attempt"], row["result"], row["worker"]) == ("generating", 2, None, None)
    job.start_phase(at=at(2), worker="w2")
    job.fail(at=at(3), worker="w2", reason="agent gave up")
    project(projection, job)
    assert (view.jobs[job.id]["status"], view.jobs[job.id]["error"]) == ("failed", "agent gave up")


def test_an_erasure_leaves_nothing_of_the_user() -> None:
    projection, view = jobs()
    bobs = requested("bob")
    project(projection, requested("alice"), bobs, erasure_of("alice"))
    assert list(view.jobs) == [bobs.id]
