"""Lineage read model: where each candidate of an optimization came from (parents, origin, ops)."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor
from psycopg.types.json import Jsonb

from domain.trial import Trial
from projections.base import Projection, handles
from projections.batch import Batch, Rows, columns


class LineageProjection(Projection):
    name = "lineage"
    version = 1
    tables = """
    CREATE TABLE {schema}.candidates (
        optimization_id uuid NOT NULL,
        candidate_id text NOT NULL,
        owner text NOT NULL,
        origin text,
        ops jsonb,
        first_round_index integer NOT NULL,
        first_trial_index integer NOT NULL,
        PRIMARY KEY (optimization_id, candidate_id)
    );
    CREATE TABLE {schema}.candidate_parents (
        optimization_id uuid NOT NULL,
        candidate_id text NOT NULL,
        parent_id text NOT NULL,
        PRIMARY KEY (optimization_id, candidate_id, parent_id)
    )
    """

    erasure = """
    DELETE FROM {schema}.candidate_parents p USING {schema}.candidates c
     WHERE c.owner = %(owner)s AND p.optimization_id = c.optimization_id AND p.candidate_id = c.candidate_id;
    DELETE FROM {schema}.candidates WHERE owner = %(owner)s
    """

    def __init__(self, schema: str | None = None, **options: Any):
        super().__init__(schema, **options)
        self.candidates = Rows(self._insert_candidates)
        self.parents = Rows(self._insert_parents)
        self.sinks = [self.candidates, self.parents]

    @handles(Trial.Recorded)
    def trial_recorded(self, batch: Batch, e: Trial.Recorded, _: int) -> None:
        candidate = e.candidate
        if candidate is None:
            return
        ops = Jsonb(candidate.ops) if candidate.ops is not None else None
        batch.append(
            self.candidates,
            (e.optimization_id, candidate.id, e.owner, candidate.origin, ops, e.round_index, e.trial_index),
        )
        for parent in candidate.parents:
            batch.append(self.parents, (e.optimization_id, candidate.id, parent))

    # A candidate tried again keeps where it first came from; parents named later are added.
    def _insert_candidates(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.candidates (optimization_id, candidate_id, owner, origin, ops,"
                " first_round_index, first_trial_index)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::jsonb[], %b::int[], %b::int[])"
                " ON CONFLICT DO NOTHING"
            ),
            columns(rows, 7),
            prepare=True,
        )

    def _insert_parents(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.candidate_parents (optimization_id, candidate_id, parent_id)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[]) ON CONFLICT DO NOTHING"
            ),
            columns(rows, 3),
            prepare=True,
        )
