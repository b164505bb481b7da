"""The jobs read model's Postgres view (projections/jobs.py): one row per job, updated in place."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from adapters.read_side.view import PostgresView
from projections.jobs import JOB_FIELDS, JobsView

JSON_FIELDS = ("plan", "result")


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

    def add_job(
        self, job_id: UUID, owner: str, session_id: UUID, artifact_type: str, snapshot_chunks: int, at: datetime
    ) -> None:
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
        values = {k: Jsonb(v) if k in JSON_FIELDS and v is not None else v for k, v in changes.items()}
        self.batch.execute(
            self.sql("UPDATE {schema}.jobs SET " + assignments + ", updated_at = %(at)s WHERE id = %(id)s"),
            {**values, "at": at, "id": job_id},
        )
