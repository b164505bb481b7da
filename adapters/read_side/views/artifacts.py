"""The artifacts read model's Postgres view (projections/artifacts.py): its tables and the statements its writes batch into.

An artifact's query, draft, layout, RAG examples, refinement and tags, and a variation
set's query and members, are sealed under the owner's key (adapters/read_side/sealing.py)
and opened by the queries that read them; tag filters match `tag_terms`, the tags' blind
terms. Shapes (node count, depth, component types), stats and previews' references stay clear.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from adapters.read_side.batch import Rows
from adapters.read_side.sealing import Owners, UserSeal
from adapters.read_side.view import PostgresView, json_positions, with_json
from projections.artifacts import ArtifactRow, ArtifactsView, VariationSetRow
from services.ports.sealing import tag_terms

SEALED_TEXT = ("query", "draft", "layout", "refinement")  # (the layout is JSON text already)
SEALED_JSON = ("rag_examples", "tags")


class PostgresArtifactsView(PostgresView, ArtifactsView):
    tables = """
    CREATE TABLE {schema}.artifacts (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        session_id uuid NOT NULL,
        parent_id uuid,
        generation integer NOT NULL,
        origin text NOT NULL,
        query bytea,  -- sealed (NULL: the owner was erased before the row was written)
        draft bytea,
        layout bytea,
        model text,
        temperature double precision,
        provider text,
        stats jsonb NOT NULL,
        tokens bigint NOT NULL,
        rag_examples bytea,
        refinement bytea,
        variation_set_id uuid,
        variation_index integer,
        tags bytea,
        tag_terms text[] NOT NULL,
        node_count integer NOT NULL,
        depth integer NOT NULL,
        size_bytes integer NOT NULL,
        component_types jsonb NOT NULL,
        previews jsonb NOT NULL DEFAULT '[]',
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.artifacts ALTER COLUMN query SET STATISTICS 0, ALTER COLUMN draft SET STATISTICS 0,
        ALTER COLUMN layout SET STATISTICS 0, ALTER COLUMN rag_examples SET STATISTICS 0,
        ALTER COLUMN refinement SET STATISTICS 0, ALTER COLUMN tags SET STATISTICS 0,
        ALTER COLUMN tag_terms SET STATISTICS 0;
    CREATE INDEX ON {schema}.artifacts (owner, created_at DESC, id);
    CREATE INDEX ON {schema}.artifacts (session_id, created_at DESC, id);
    CREATE INDEX ON {schema}.artifacts (parent_id, created_at DESC, id) WHERE parent_id IS NOT NULL;
    CREATE INDEX ON {schema}.artifacts USING gin (tag_terms);
    CREATE TABLE {schema}.variation_sets (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        session_id uuid NOT NULL,
        base_artifact_id uuid,
        query bytea,
        model text,
        style_variety double precision NOT NULL,
        diversity double precision NOT NULL,
        rankings jsonb NOT NULL,
        members bytea,
        created_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.variation_sets ALTER COLUMN query SET STATISTICS 0, ALTER COLUMN members SET STATISTICS 0
    """

    erasure = """
    DELETE FROM {schema}.variation_sets WHERE owner = %(owner)s;
    DELETE FROM {schema}.artifacts WHERE owner = %(owner)s
    """

    COLUMNS = ", ".join(ArtifactRow._fields) + ", tag_terms"
    JSON = json_positions(ArtifactRow._fields, "stats", "component_types")
    SET_JSON = json_positions(VariationSetRow._fields, "rankings")

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.owners = Owners(self.sql("SELECT id, owner FROM {schema}.artifacts WHERE id = ANY(%s)"))
        self.new_artifacts = Rows(self.copier("{schema}.artifacts", self.COLUMNS))
        self.sinks = [self.new_artifacts]

    def add_artifact(self, row: ArtifactRow) -> None:
        self.owners.remember(row.id, row.owner)
        seal = self.seals.for_writing(row.owner)
        sealed = row._replace(**sealed_fields(seal, f"artifact:{row.id}:", row._asdict()))
        terms = tag_terms(seal, row.tags) if seal is not None else []
        self.batch.append(self.new_artifacts, (*with_json(sealed, self.JSON), terms))

    def tag_artifact(self, artifact_id: UUID, tags: list[str], at: datetime) -> None:
        self.batch.flush()
        owner = self.owners.of(self.batch.cursor, [artifact_id]).get(artifact_id)
        seal = self.seals.for_writing(owner) if owner is not None else None
        sealed = seal.seal_json(f"artifact:{artifact_id}:tags:{at.isoformat()}", tags) if seal is not None else None
        terms = tag_terms(seal, tags) if seal is not None else []
        self.batch.execute(
            self.sql("UPDATE {schema}.artifacts SET tags = %s, tag_terms = %s, updated_at = %s WHERE id = %s"),
            (sealed, terms, at, artifact_id),
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
        seal = self.seals.for_writing(row.owner)
        row = row._replace(**sealed_fields(seal, f"variation_set:{row.id}:", {"query": row.query, "members": row.members}))
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.variation_sets (" + ", ".join(VariationSetRow._fields) + ")"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            ),
            with_json(row, self.SET_JSON),
        )


def sealed_fields(seal: UserSeal | None, row: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The content among `fields` sealed for the row named `row` (None for an erased owner's)."""
    sealed: dict[str, Any] = {}
    for name, value in fields.items():
        if name in SEALED_TEXT or name in SEALED_JSON or name == "members":
            sealed[name] = (
                None if seal is None or value is None
                else seal.seal(row + name, value) if name in SEALED_TEXT else seal.seal_json(row + name, value)
            )
    return sealed
