"""Lineage read model: where each artifact and each optimization candidate came from, and
which retrieval (RAG) examples influenced which artifacts."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor
from psycopg.types.json import Jsonb

from domain.artifact import Artifact
from domain.trial import Trial
from projections.base import Projection, handles
from projections.batch import Batch, Rows, columns


class LineageProjection(Projection):
    name = "lineage"
    version = 2
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
        text text,
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

    def __init__(self, schema: str | None = None, **options: Any):
        super().__init__(schema, **options)
        self.candidates = Rows(self._insert_candidates)
        self.parents = Rows(self._insert_parents)
        self.artifacts = Rows(
            self.copier("{schema}.artifacts", "id, owner, parent_id, generation, variation_set_id, created_at")
        )
        self.rag_links = Rows(
            self.copier(
                "{schema}.rag_links", "artifact_id, example_id, owner, session_id, position, score, text, created_at"
            )
        )
        self.sinks = [self.candidates, self.parents, self.artifacts, self.rag_links]

    @handles(Artifact.Stored)
    def artifact_stored(self, batch: Batch, e: Artifact.Stored, _: int) -> None:
        batch.append(
            self.artifacts, (e.originator_id, e.owner, e.parent_id, e.generation, e.variation_set_id, e.timestamp)
        )
        for position, example in enumerate(e.rag_examples):
            batch.append(
                self.rag_links,
                (e.originator_id, example.id, e.owner, e.session_id, position, example.score, example.text, e.timestamp),
            )

    @handles(Artifact.Removed)
    def artifact_removed(self, batch: Batch, e: Artifact.Removed, _: int) -> None:
        batch.execute(self.sql("UPDATE {schema}.artifacts SET removed = true WHERE id = %s"), (e.originator_id,))
        batch.execute(self.sql("DELETE FROM {schema}.rag_links WHERE artifact_id = %s"), (e.originator_id,))

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
