"""Jobs read model: each generation job's status, progress, attempt, plan, result and error."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from domain.job import Job
from projections.base import Projection, handles
from projections.batch import Batch


class JobsProjection(Projection):
    name = "jobs"
    version = 2  # v2: quiz results say `correct_answer` (their events are upcast; the table is rebuilt)
    tables = """
    CREATE TABLE {schema}.jobs (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        session_id uuid NOT NULL,
        artifact_type text NOT NULL,
        status text NOT NULL,
        progress integer NOT NULL,
        attempt integer NOT NULL,
        worker text,
        plan jsonb,
        result jsonb,
        error text,
        artifact_id uuid,
        snapshot_chunks integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.jobs (owner, created_at DESC, id);
    CREATE INDEX ON {schema}.jobs (session_id, created_at DESC, id);
    CREATE INDEX ON {schema}.jobs (owner, status, created_at DESC)
    """

    erasure = """
    DELETE FROM {schema}.jobs WHERE owner = %(owner)s
    """

    def _update(self, batch: Batch, e: Any, **columns: Any) -> None:
        assignments = ", ".join(f"{name} = %({name})s" for name in columns)  # names are this module's own
        batch.execute(
            self.sql("UPDATE {schema}.jobs SET " + assignments + ", updated_at = %(at)s WHERE id = %(id)s"),
            {**columns, "at": e.timestamp, "id": e.originator_id},
        )

    @handles(Job.Requested)
    def requested(self, batch: Batch, e: Job.Requested, _: int) -> None:
        batch.execute(
            self.sql(
                "INSERT INTO {schema}.jobs (id, owner, session_id, artifact_type, status, progress, attempt,"
                " snapshot_chunks, created_at, updated_at) VALUES (%s, %s, %s, %s, 'pending', 0, 1, %s, %s, %s)"
            ),
            (e.originator_id, e.owner, e.session_id, e.artifact_type, len(e.snapshot), e.timestamp, e.timestamp),
        )

    @handles(Job.PhaseStarted)
    def phase_started(self, batch: Batch, e: Job.PhaseStarted, _: int) -> None:
        self._update(batch, e, status=e.phase, worker=e.worker, progress=e.progress, attempt=e.attempt)

    @handles(Job.PlanStored)
    def plan_stored(self, batch: Batch, e: Job.PlanStored, _: int) -> None:
        self._update(batch, e, plan=Jsonb(e.plan), progress=e.progress)

    @handles(Job.Generated)
    def generated(self, batch: Batch, e: Job.Generated, _: int) -> None:
        self._update(batch, e, result=Jsonb(e.result), progress=e.progress)

    @handles(Job.RetryQueued)
    def retry_queued(self, batch: Batch, e: Job.RetryQueued, _: int) -> None:
        self._update(batch, e, status="generating", attempt=e.attempt, result=None, progress=e.progress, worker=None)

    @handles(Job.Validated)
    def validated(self, batch: Batch, e: Job.Validated, _: int) -> None:
        self._update(batch, e, progress=e.progress)

    @handles(Job.Completed)
    def completed(self, batch: Batch, e: Job.Completed, _: int) -> None:
        self._update(batch, e, status="completed", artifact_id=e.artifact_id, progress=e.progress, worker=None)

    @handles(Job.Failed)
    def failed(self, batch: Batch, e: Job.Failed, _: int) -> None:
        self._update(batch, e, status="failed", error=e.reason, worker=None)
