"""The audit read model's Postgres view (projections/audit.py): aggregates and their links, COPYed a batch at a time."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from adapters.read_side.batch import Rows
from adapters.read_side.view import PostgresView
from projections.audit import AuditView


class PostgresAuditView(PostgresView, AuditView):
    tables = """
    CREATE TABLE {schema}.aggregates (
        id uuid PRIMARY KEY,
        type text NOT NULL,
        owner text NOT NULL,
        created_at timestamptz NOT NULL
    );
    CREATE TABLE {schema}.links (
        aggregate_id uuid NOT NULL,
        scope_id uuid NOT NULL,
        field text NOT NULL,
        PRIMARY KEY (scope_id, aggregate_id, field)
    )
    """

    erasure = """
    DELETE FROM {schema}.links WHERE aggregate_id IN (SELECT id FROM {schema}.aggregates WHERE owner = %(owner)s);
    DELETE FROM {schema}.aggregates WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.aggregates = Rows(self.copier("{schema}.aggregates", "id, type, owner, created_at"))
        self.links = Rows(self.copier("{schema}.links", "aggregate_id, scope_id, field"))
        self.sinks = [self.aggregates, self.links]

    def add_aggregate(self, aggregate_id: UUID, aggregate_type: str, owner: str, at: datetime) -> None:
        self.batch.append(self.aggregates, (aggregate_id, aggregate_type, owner, at))

    def link(self, aggregate_id: UUID, scope_id: UUID, field: str) -> None:
        self.batch.append(self.links, (aggregate_id, scope_id, field))
