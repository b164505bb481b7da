"""The jobs read model's Postgres view (projections/jobs.py): one row per job, updated in place.

A job's plan, result and error are sealed under the owner's key (adapters/read_side/sealing.py)
and opened by the query that reads them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from adapters.read_side.sealing import Owners
from adapters.read_side.view import PostgresView
from projections.jobs import JOB_FIELDS, JobsView

JSON_FIELDS = ("plan", "result")
SEALED_FIELDS = ("plan", "result", "error")


class PostgresJobsView(PostgresView, JobsView):
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
        plan bytea,  -- sealed, as result and error
        result bytea,
        error bytea,
        artifact_id uuid,
        snapshot_chunks integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.jobs ALTER COLUMN plan SET STATISTICS 0, ALTER COLUMN result SET STATISTICS 0,
        ALTER COLUMN error SET STATISTICS 0;
    CREATE INDEX ON {schema}.jobs (owner, created_at DESC, id);
    CREATE INDEX ON {schema}.jobs (session_id, created_at DESC, id);
    CREATE INDEX ON {schema}.jobs (owner, status, created_at DESC)
    """

    erasure = """
    DELETE FROM {schema}.jobs WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.owners = Owners(self.sql("SELECT id, owner FROM {schema}.jobs WHERE id = ANY(%s)"))

    def add_job(
        self, job_id: UUID, owner: str, session_id: UUID, artifact_type: str, snapshot_chunks: int, at: datetime
    ) -> None:
        self.owners.remember(job_id, owner)
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.jobs (id, owner, session_id, artifact_type, status, progress, attempt,"
                " snapshot_chunks, created_at, updated_at) VALUES (%s, %s, %s, %s, 'pending', 0, 1, %s, %s, %s)"
            ),
            (job_id, owner, session_id, artifact_type, snapshot_chunks, at, at),
        )

    def update_job(self, job_id: UUID, at: datetime, changes: dict[str, Any]) -> None:
        unknown = changes.keys() - set(JOB_FIELDS)
        if unknown:
            raise ValueError(f"not a job's field: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = %({name})s" for name in changes)  # names checked above
        values = dict(changes)
        sealed = [name for name in SEALED_FIELDS if changes.get(name) is not None]
        if sealed:
            self.batch.flush()
            owner = self.owners.of(self.batch.cursor, [job_id]).get(job_id)
            seal = self.seals.for_writing(owner) if owner is not None else None
            for name in sealed:
                row = f"job:{job_id}:{name}:{at.isoformat()}"
                values[name] = (
                    None if seal is None
                    else seal.seal_json(row, changes[name]) if name in JSON_FIELDS else seal.seal(row, changes[name])
                )
        self.batch.execute(
            self.sql("UPDATE {schema}.jobs SET " + assignments + ", updated_at = %(at)s WHERE id = %(id)s"),
            {**values, "at": at, "id": job_id},
        )
