"""Artifacts read model: every live artifact with its layout, shape and previews, and variation sets."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import orjson

from domain.artifact import Artifact
from domain.layout import shape_of
from domain.variation_set import VariationSet
from projections.view import Projection, View, handles


class ArtifactRow(NamedTuple):
    """A stored artifact as the read model keeps it (its previews come later)."""

    id: UUID
    owner: str
    session_id: UUID
    parent_id: UUID | None
    generation: int
    origin: str
    query: str
    draft: str
    layout: str  # as JSON
    model: str | None
    temperature: float | None
    provider: str | None
    stats: dict[str, Any]
    tokens: int
    rag_examples: list[dict[str, Any]]
    refinement: str | None
    variation_set_id: UUID | None
    variation_index: int | None
    tags: list[str]
    node_count: int
    depth: int
    size_bytes: int  # of the layout's JSON
    component_types: dict[str, int]
    created_at: datetime
    updated_at: datetime


class VariationSetRow(NamedTuple):
    id: UUID
    owner: str
    session_id: UUID
    base_artifact_id: UUID | None
    query: str
    model: str | None
    style_variety: float
    diversity: float
    rankings: dict[str, list[int]]
    members: list[dict[str, Any]]
    created_at: datetime


class ArtifactsView(View):
    @abstractmethod
    def add_artifact(self, row: ArtifactRow) -> None: ...

    @abstractmethod
    def tag_artifact(self, artifact_id: UUID, tags: list[str], at: datetime) -> None: ...

    @abstractmethod
    def cache_preview(self, artifact_id: UUID, preview: dict[str, Any], at: datetime) -> None:
        """The preview last among the artifact's, replacing one of the same style and format."""

    @abstractmethod
    def remove_artifact(self, artifact_id: UUID) -> None: ...

    @abstractmethod
    def add_variation_set(self, row: VariationSetRow) -> None: ...


class ArtifactsProjection(Projection[ArtifactsView]):
    name = "artifacts"
    version = 2  # 2: content sealed
    weight = 2

    @handles(Artifact.Stored)
    def stored(self, e: Artifact.Stored) -> None:
        shape = shape_of(e.layout)
        layout = orjson.dumps(e.layout)
        self.view.add_artifact(ArtifactRow(
            e.originator_id, e.owner, e.session_id, e.parent_id, e.generation, e.origin, e.query, e.draft,
            layout.decode(), e.model, e.temperature, e.provider, e.stats.model_dump(), e.stats.tokens,
            [x.model_dump() for x in e.rag_examples], e.refinement, e.variation_set_id, e.variation_index,
            list(e.tags), shape.node_count, shape.depth, len(layout), shape.type_counts, e.timestamp, e.timestamp,
        ))

    @handles(Artifact.Tagged)
    def tagged(self, e: Artifact.Tagged) -> None:
        self.view.tag_artifact(e.originator_id, list(e.tags), e.timestamp)

    @handles(Artifact.PreviewCached)
    def preview_cached(self, e: Artifact.PreviewCached) -> None:
        self.view.cache_preview(e.originator_id, e.preview.model_dump(), e.timestamp)

    @handles(Artifact.Removed)
    def removed(self, e: Artifact.Removed) -> None:
        self.view.remove_artifact(e.originator_id)

    @handles(VariationSet.Created)
    def variation_set_created(self, e: VariationSet.Created) -> None:
        self.view.add_variation_set(VariationSetRow(
            e.originator_id, e.owner, e.session_id, e.base_artifact_id, e.query, e.model, e.style_variety,
            e.diversity, e.rankings, [m.model_dump(mode="json") for m in e.members], e.timestamp,
        ))
