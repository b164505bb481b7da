"""Artifacts read model: every live artifact with its layout, shape and previews, and variation sets."""

from __future__ import annotations

from typing import Any

import orjson
from psycopg.types.json import Jsonb

from domain.artifact import Artifact
from domain.layout import shape_of
from domain.variation_set import VariationSet
from projections.base import Projection, handles
from projections.batch import Batch, Rows


class ArtifactsProjection(Projection):
    name = "artifacts"
    version = 1
    weight = 2
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

    def __init__(self, schema: str | None = None, **options: Any):
        super().__init__(schema, **options)
        self.new_artifacts = Rows(self.copier("{schema}.artifacts", self.COLUMNS))
        self.sinks = [self.new_artifacts]

    COLUMNS = (
        "id, owner, session_id, parent_id, generation, origin, query, draft, layout, model, temperature, provider,"
        " stats, tokens, rag_examples, refinement, variation_set_id, variation_index, tags, node_count, depth,"
        " size_bytes, component_types, created_at, updated_at"
    )

    @handles(Artifact.Stored)
    def stored(self, batch: Batch, e: Artifact.Stored, _: int) -> None:
        shape = shape_of(e.layout)
        layout = orjson.dumps(e.layout)
        batch.append(
            self.new_artifacts,
            (
                e.originator_id, e.owner, e.session_id, e.parent_id, e.generation, e.origin, e.query, e.draft,
                layout.decode(), e.model, e.temperature, e.provider, Jsonb(e.stats.model_dump()), e.stats.tokens,
                Jsonb([x.model_dump() for x in e.rag_examples]), e.refinement, e.variation_set_id,
                e.variation_index, list(e.tags), shape.node_count, shape.depth, len(layout),
                Jsonb(shape.type_counts), e.timestamp, e.timestamp,
            ),
        )

    @handles(Artifact.Tagged)
    def tagged(self, batch: Batch, e: Artifact.Tagged, _: int) -> None:
        batch.execute(
            self.sql("UPDATE {schema}.artifacts SET tags = %s, updated_at = %s WHERE id = %s"),
            (list(e.tags), e.timestamp, e.originator_id),
        )

    @handles(Artifact.PreviewCached)
    def preview_cached(self, batch: Batch, e: Artifact.PreviewCached, _: int) -> None:
        # One preview per (style, format): a newer one replaces it, at the end of the list.
        batch.execute(
            self.sql(
                "UPDATE {schema}.artifacts SET updated_at = %(at)s, previews = coalesce((SELECT jsonb_agg(p)"
                " FROM jsonb_array_elements(previews) p WHERE (p->>'style', p->>'format') <> (%(style)s::text, %(format)s::text)),"
                " '[]') || jsonb_build_array(%(preview)s::jsonb) WHERE id = %(id)s"
            ),
            {
                "at": e.timestamp,
                "style": e.preview.style,
                "format": e.preview.format,
                "preview": Jsonb(e.preview.model_dump()),
                "id": e.originator_id,
            },
        )

    @handles(Artifact.Removed)
    def removed(self, batch: Batch, e: Artifact.Removed, _: int) -> None:
        batch.execute(self.sql("DELETE FROM {schema}.artifacts WHERE id = %s"), (e.originator_id,))

    @handles(VariationSet.Created)
    def variation_set_created(self, batch: Batch, e: VariationSet.Created, _: int) -> None:
        batch.execute(
            self.sql(
                "INSERT INTO {schema}.variation_sets (id, owner, session_id, base_artifact_id, query, model,"
                " style_variety, diversity, rankings, members, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            ),
            (
                e.originator_id, e.owner, e.session_id, e.base_artifact_id, e.query, e.model, e.style_variety,
                e.diversity, Jsonb(e.rankings), Jsonb([m.model_dump(mode="json") for m in e.members]), e.timestamp,
            ),
        )
