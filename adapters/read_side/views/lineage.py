"""The lineage read model's Postgres view (projections/lineage.py): its tables and the statements its writes batch into.

A candidate's origin and ops are sealed under the owner's key (adapters/read_side/sealing.py)
and opened by `candidates.lineage`; ids (candidates', parents', examples') stay in clear:
the lineage walk joins on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor

from adapters.read_side.batch import Rows, columns
from adapters.read_side.view import PostgresView
from projections.lineage import LineageView


class PostgresLineageView(PostgresView, LineageView):
    tables = """
    CREATE TABLE {schema}.candidates (
        optimization_id uuid NOT NULL,
        candidate_id text NOT NULL,
        owner text NOT NULL,
        origin bytea,  -- sealed, as ops (NULL: none, or the owner was erased before the row was written)
        ops bytea,
        first_round_index integer NOT NULL,
        first_trial_index integer NOT NULL,
        PRIMARY KEY (optimization_id, candidate_id)
    );
    CREATE TABLE {schema}.candidate_parents (
        optimization_id uuid NOT NULL,
        candidate_id text NOT NULL,
        parent_id text NOT NULL,
        PRIMARY KEY (optimization_id, candidate_id, parent_id)
    );
    -- A removed artifact stays, marked: its descendants still trace back through it.
    CREATE TABLE {schema}.artifacts (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        parent_id uuid,
        generation integer NOT NULL,
        variation_set_id uuid,
        removed boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.artifacts (parent_id, created_at, id) WHERE parent_id IS NOT NULL;
    CREATE TABLE {schema}.rag_links (
        artifact_id uuid NOT NULL,
        example_id text NOT NULL,
        owner text NOT NULL,
        session_id uuid NOT NULL,
        position integer NOT NULL,  -- the example's place in the artifact's list
        score double precision NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (artifact_id, example_id)
    );
    CREATE INDEX ON {schema}.rag_links (owner, example_id, score DESC, artifact_id)
    """

    erasure = """
    DELETE FROM {schema}.candidate_parents p USING {schema}.candidates c
     WHERE c.owner = %(owner)s AND p.optimization_id = c.optimization_id AND p.candidate_id = c.candidate_id;
    DELETE FROM {schema}.candidates WHERE owner = %(owner)s;
    DELETE FROM {schema}.rag_links WHERE owner = %(owner)s;
    DELETE FROM {schema}.artifacts WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.candidates = Rows(self._insert_candidates)
        self.parents = Rows(self._insert_parents)
        self.artifacts = Rows(
            self.copier("{schema}.artifacts", "id, owner, parent_id, generation, variation_set_id, created_at")
        )
        self.rag_links = Rows(
            self.copier(
                "{schema}.rag_links", "artifact_id, example_id, owner, session_id, position, score, created_at"
            )
        )
        self.sinks = [self.candidates, self.parents, self.artifacts, self.rag_links]

    def add_artifact(
        self, artifact_id: UUID, owner: str, parent_id: UUID | None, generation: int, variation_set_id: UUID | None,
        at: datetime,
    ) -> None:
        self.batch.append(self.artifacts, (artifact_id, owner, parent_id, generation, variation_set_id, at))

    def link_example(
        self, artifact_id: UUID, example_id: str, owner: str, session_id: UUID, position: int, score: float, at: datetime
    ) -> None:
        self.batch.append(self.rag_links, (artifact_id, example_id, owner, session_id, position, score, at))

    def remove_artifact(self, artifact_id: UUID) -> None:
        self.batch.execute(self.sql("UPDATE {schema}.artifacts SET removed = true WHERE id = %s"), (artifact_id,))
        self.batch.execute(self.sql("DELETE FROM {schema}.rag_links WHERE artifact_id = %s"), (artifact_id,))

    def add_candidate(
        self, optimization_id: UUID, candidate_id: str, owner: str, origin: str | None, ops: list[Any] | None,
        round_index: int, trial_index: int,
    ) -> None:
        seal = self.seals.for_writing(owner)
        row = f"candidate:{optimization_id}:{candidate_id}:"
        origin_ = seal.seal(row + "origin", origin) if seal is not None and origin is not None else None
        ops_ = seal.seal_json(row + "ops", ops) if seal is not None and ops is not None else None
        self.batch.append(self.candidates, (optimization_id, candidate_id, owner, origin_, ops_, round_index, trial_index))

    def add_candidate_parent(self, optimization_id: UUID, candidate_id: str, parent_id: str) -> None:
        self.batch.append(self.parents, (optimization_id, candidate_id, parent_id))

    def _insert_candidates(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.candidates (optimization_id, candidate_id, owner, origin, ops,"
                " first_round_index, first_trial_index)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::bytea[], %b::bytea[], %b::int[], %b::int[])"
                " ON CONFLICT DO NOTHING"
            ),
            columns(rows, 7),
            prepare=True,
        )

    def _insert_parents(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.candidate_parents (optimization_id, candidate_id, parent_id)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[]) ON CONFLICT DO NOTHING"
            ),
            columns(rows, 3),
            prepare=True,
        )
