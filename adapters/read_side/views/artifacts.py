"""The artifacts read model's Postgres view (projections/artifacts.py): its tables and the statements its writes batch into."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from adapters.read_side.batch import Rows
from adapters.read_side.view import PostgresView, json_positions, with_json
from projections.artifacts import ArtifactRow, ArtifactsView, VariationSetRow


class PostgresArtifactsView(PostgresView, ArtifactsView):
    tables = """
    CREATE TABLE {schema}.artifacts (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        session_id uuid NOT NULL,
        parent_id uuid,
        generation integer NOT NULL,
        origin text NOT NULL,
        query text NOT NULL,
        draft text NOT NULL,
        layout jsonb NOT NULL,
        model text,
        temperature double precision,
        provider text,
        stats jsonb NOT NULL,
        tokens bigint NOT NULL,
        rag_examples jsonb NOT NULL,
        refinement text,
        variation_set_id uuid,
        variation_index integer,
        tags text[] NOT NULL,
        node_count integer NOT NULL,
        depth integer NOT NULL,
        size_bytes integer NOT NULL,
        component_types jsonb NOT NULL,
        previews jsonb NOT NULL DEFAULT '[]',
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.artifacts (owner, created_at DESC, id);
    CREATE INDEX ON {schema}.artifacts (session_id, created_at DESC, id);
    CREATE INDEX ON {schema}.artifacts (parent_id, created_at DESC, id) WHERE parent_id IS NOT NULL;
    CREATE INDEX ON {schema}.artifacts USING gin (tags);
    CREATE TABLE {schema}.variation_sets (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        session_id uuid NOT NULL,
        base_artifact_id uuid,
        query text NOT NULL,
        model text,
        style_variety double precision NOT NULL,
        diversity double precision NOT NULL,
        rankings jsonb NOT NULL,
        members jsonb NOT NULL,
        created_at timestamptz NOT NULL
    )
    """

    erasure = """
    DELETE FROM {schema}.variation_sets WHERE owner = %(owner)s;
    DELETE FROM {schema}.artifacts WHERE owner = %(owner)s
    """

    COLUMNS = ", ".join(ArtifactRow._fields)
    JSON = json_positions(ArtifactRow._fields, "stats", "rag_examples", "component_types")
    SET_JSON = json_positions(VariationSetRow._fields, "rankings", "members")

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.new_artifacts = Rows(self.copier("{schema}.artifacts", self.COLUMNS))
        self.sinks = [self.new_artifacts]

    def add_artifact(self, row: ArtifactRow) -> None:
        # (the layout is JSON text already: COPY takes it as it is)
        self.batch.append(self.new_artifacts, with_json(row, self.JSON))

    def tag_artifact(self, artifact_id: UUID, tags: list[str], at: datetime) -> None:
        self.batch.execute(
            self.sql("UPDATE {schema}.artifacts SET tags = %s, updated_at = %s WHERE id = %s"), (tags, at, artifact_id)
        )

    def cache_preview(self, artifact_id: UUID, preview: dict[str, Any], at: datetime) -> None:
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.artifacts SET updated_at = %(at)s, previews = coalesce((SELECT jsonb_agg(p)"
                " FROM jsonb_array_elements(previews) p WHERE (p->>'style', p->>'format') <> (%(style)s::text, %(format)s::text)),"
                " '[]') || jsonb_build_array(%(preview)s::jsonb) WHERE id = %(id)s"
            ),
            {"at": at, "style": preview["style"], "format": preview["format"], "preview": Jsonb(preview), "id": artifact_id},
        )

    def remove_artifact(self, artifact_id: UUID) -> None:
        self.batch.execute(self.sql("DELETE FROM {schema}.artifacts WHERE id = %s"), (artifact_id,))

    def add_variation_set(self, row: VariationSetRow) -> None:
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.variation_sets (" + ", ".join(VariationSetRow._fields) + ")"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            ),
            with_json(row, self.SET_JSON),
        )
