"""The wire contract of generation artifacts: store, generate, refine, variations, previews, queries."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import Field, FiniteFloat, field_validator, model_validator

from domain.artifact import (
    MAX_DRAFT,
    MAX_EXAMPLE_TEXT,
    MAX_LABEL,
    MAX_PREVIEW_BYTES,
    MAX_QUERY,
    MAX_REFINEMENT,
    MAX_REMOVAL_REASON,
    MAX_TEMPERATURE,
    GenerationStats,
    Origin,
)
from domain.variation_set import MAX_VARIATIONS
from services.contract import Command, JsonObject, Query, Reply, Request, Tags, Written, text

Label = text(MAX_LABEL)
ExampleText = text(MAX_EXAMPLE_TEXT, may_be_blank=True)
Temperature = Field(default=None, ge=0, le=MAX_TEMPERATURE)
PREVIEW_CHUNK = 512 * 1024  # bytes per preview chunk: base64 of it stays well under NATS's 1 MiB
Sha256 = Field(default=None, pattern=r"^[0-9a-f]{64}$")


def upload_bucket(prefix: str) -> str:
    """The object store clients put large previews in (bucket names allow no dots)."""
    return prefix.replace(".", "_").upper() + "_PREVIEW_UPLOADS"


class RagExampleIn(Request):
    id: Label  # type: ignore[valid-type]
    score: FiniteFloat
    text: ExampleText | None = None  # type: ignore[valid-type]


class Provenance(Request):
    """What any new artifact may carry: where it goes, what it descends from, what influenced it."""

    session_id: UUID | None = Field(default=None, description="default: the caller's current session")
    tags: Tags = []
    rag_examples: list[RagExampleIn] = Field(default=[], max_length=100)


class StoreArtifact(Provenance, Command):
    layout: JsonObject = Field(description="a tree of nodes: type, optional id, label, children, attributes")
    draft: text(MAX_DRAFT, may_be_blank=True) = ""  # type: ignore[valid-type]
    query: text(MAX_QUERY, may_be_blank=True) = ""  # type: ignore[valid-type]
    model: Label | None = None  # type: ignore[valid-type]
    temperature: float | None = Temperature
    provider: Label | None = None  # type: ignore[valid-type]
    stats: GenerationStats = GenerationStats()
    parent_id: UUID | None = None


class StoreGenerated(StoreArtifact):
    """Internal: what artifact.generate / artifact.refine produced, stored by the bus."""

    origin: Origin
    refinement: str | None = None


class GenerateArtifact(Provenance, Command):
    query: text(MAX_QUERY)  # type: ignore[valid-type]
    model: Label | None = None  # type: ignore[valid-type]
    temperature: float = Field(default=0.7, ge=0, le=MAX_TEMPERATURE)
    parent_id: UUID | None = None


class RefineArtifact(Command):
    artifact_id: UUID
    refinement: text(MAX_REFINEMENT)  # type: ignore[valid-type]
    preserve_structure: bool = False
    model: Label | None = None  # type: ignore[valid-type]
    temperature: float = Field(default=0.7, ge=0, le=MAX_TEMPERATURE)
    tags: Tags | None = Field(default=None, description="default: the refined artifact's tags")


class CreateVariations(Provenance, Command):
    query: text(MAX_QUERY)  # type: ignore[valid-type]
    count: int = Field(default=3, ge=1, le=MAX_VARIATIONS)
    temperature_range: tuple[float, float] = Field(default=(0.5, 1.0), description="spread evenly over the count")
    base_artifact_id: UUID | None = None
    style_variety: float = Field(default=0.5, ge=0, le=1)
    model: Label | None = None  # type: ignore[valid-type]

    @field_validator("temperature_range")
    @classmethod
    def ordered_and_in_range(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        low, high = bounds
        if not (0 <= low <= high <= MAX_TEMPERATURE):
            raise ValueError(f"must be [low, high] with 0 <= low <= high <= {MAX_TEMPERATURE}")
        return bounds

    def temperatures(self) -> list[float]:
        low, high = self.temperature_range
        if self.count == 1:
            return [round((low + high) / 2, 6)]
        return [round(low + (high - low) * i / (self.count - 1), 6) for i in range(self.count)]


class VariationOutcome(Request):
    index: int
    temperature: float
    artifact: StoreGenerated | None = None
    error: str | None = None


class StoreVariations(Command):
    """Internal: a variations request's outcomes, stored as one set in one transaction."""

    session_id: UUID | None
    base_artifact_id: UUID | None
    query: str
    model: str | None
    style_variety: float
    outcomes: list[VariationOutcome]


class TagArtifact(Command):
    artifact_id: UUID
    tags: Tags


class CachePreview(Command):
    """Preview bytes inline (`data`, base64, up to 512 KiB) or, for larger ones (up to
    20 MiB), first put in the preview upload object store and named by `upload`."""

    artifact_id: UUID
    style: Label = "default"  # type: ignore[valid-type]
    format: Label = "png"  # type: ignore[valid-type]
    data: str | None = Field(default=None, max_length=4 * PREVIEW_CHUNK // 3 + 4)
    upload: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,100}$")
    sha256: str | None = Sha256
    size: int | None = Field(default=None, ge=1, le=MAX_PREVIEW_BYTES)

    @model_validator(mode="after")
    def one_source(self) -> CachePreview:
        if (self.data is None) == (self.upload is None):
            raise ValueError("give exactly one of data (base64) and upload (an object name)")
        if self.data is not None:
            try:
                base64.b64decode(self.data, validate=True)
            except binascii.Error:
                raise ValueError("data must be base64") from None
        return self


class RecordPreview(Command):
    """Internal: the preview's bytes are in the blob store; record the reference."""

    artifact_id: UUID
    style: str
    format: str
    sha256: str
    size: int


class RemoveArtifact(Command):
    """Internal: retention removes an artifact from the read models (its events stay)."""

    artifact_id: UUID
    reason: text(MAX_REMOVAL_REASON)  # type: ignore[valid-type]


# --- queries ------------------------------------------------------------------------------

class GetArtifact(Query):
    artifact_id: UUID
    include_preview: bool = Field(default=False, description="inline previews up to 512 KiB; larger via artifacts.preview")


class ListArtifacts(Query):
    session_id: UUID | None = None
    parent_id: UUID | None = None
    tags: Tags = Field(default=[], description="only artifacts carrying every one of these tags")
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)


class SearchArtifacts(Query):
    q: text(500)  # type: ignore[valid-type]
    limit: int = Field(default=20, ge=1, le=100)


class ArtifactLineage(Query):
    artifact_id: UUID
    direction: Literal["ancestors", "descendants", "both"] = "both"
    depth: int = Field(default=50, ge=1, le=1_000)


class RagInfluence(Query):
    artifact_id: UUID


class ByExample(Query):
    example_id: Label  # type: ignore[valid-type]
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)


class CompareArtifacts(Query):
    artifact_ids: list[UUID] = Field(min_length=2, max_length=10)

    @field_validator("artifact_ids")
    @classmethod
    def distinct(cls, ids: list[UUID]) -> list[UUID]:
        if len(set(ids)) != len(ids):
            raise ValueError("artifact ids must be distinct")
        return ids


class GetVariations(Query):
    variation_set_id: UUID


class PreviewChunk(Query):
    artifact_id: UUID
    style: Label | None = None  # type: ignore[valid-type]
    format: Label | None = None  # type: ignore[valid-type]
    offset: int = Field(default=0, ge=0, description="a multiple of the chunk size (512 KiB)")


# --- replies ------------------------------------------------------------------------------

class ArtifactStored(Written):
    artifact_id: UUID
    session_id: UUID
    parent_id: UUID | None
    generation: int


class Generated(ArtifactStored):
    layout: dict[str, Any]
    draft: str
    model: str | None
    provider: str | None
    stats: GenerationStats


class Member(Reply):
    index: int
    temperature: float
    status: Literal["stored", "failed"]
    artifact_id: UUID | None
    error: str | None


class VariationSetCreated(Written):
    variation_set_id: UUID
    session_id: UUID
    members: list[Member]
    diversity: float
    rankings: dict[str, list[int]]


class PreviewCached(Written):
    artifact_id: UUID
    sha256: str
    size: int


class PreviewRef(Reply):
    style: str
    format: str
    sha256: str
    size: int
    data: str | None = None  # base64, with include_preview and a preview of one chunk

    def bytes(self) -> bytes | None:
        return base64.b64decode(self.data) if self.data is not None else None


class ArtifactSummary(Reply):
    id: UUID
    session_id: UUID
    parent_id: UUID | None
    generation: int
    origin: str
    query: str
    model: str | None
    provider: str | None
    tags: list[str]
    variation_set_id: UUID | None
    variation_index: int | None
    node_count: int
    depth: int
    tokens: int
    created_at: datetime
    updated_at: datetime


class RagExample(Reply):
    id: str
    score: float
    text: str | None


class Artifact(ArtifactSummary):
    layout: dict[str, Any]
    draft: str
    temperature: float | None
    stats: GenerationStats
    rag_examples: list[RagExample]
    refinement: str | None
    component_types: dict[str, int]
    previews: list[PreviewRef]


class ArtifactHit(Reply):
    artifact_id: UUID
    query: str
    snippet: str
    created_at: datetime
    rank: int


class ArtifactHits(Reply):
    items: list[ArtifactHit]
    query: str


class Relative(Reply):
    id: UUID
    parent_id: UUID | None
    generation: int
    distance: int  # steps from the artifact asked about
    variation_set_id: UUID | None
    removed: bool
    created_at: datetime


class ArtifactLineageReply(Reply):
    artifact_id: UUID
    ancestors: list[Relative]  # nearest first
    descendants: list[Relative]  # by distance, then time
    truncated: bool  # more descendants than one reply holds


class Influence(Reply):
    artifact_id: UUID
    examples: list[RagExample]


class Influenced(Reply):
    artifact_id: UUID
    session_id: UUID
    score: float
    created_at: datetime


class ComparedArtifact(Reply):
    id: UUID
    node_count: int
    depth: int
    size_bytes: int
    component_variety: int
    component_types: dict[str, int]


class ComparedPair(Reply):
    a: UUID
    b: UUID
    structural_similarity: float
    component_overlap: float


class ArtifactComparison(Reply):
    artifacts: list[ComparedArtifact]
    pairs: list[ComparedPair]


class VariationSet(Reply):
    id: UUID
    session_id: UUID
    base_artifact_id: UUID | None
    query: str
    model: str | None
    style_variety: float
    diversity: float
    rankings: dict[str, list[int]]
    members: list[Member]
    created_at: datetime


class PreviewData(Reply):
    artifact_id: UUID
    style: str
    format: str
    sha256: str
    size: int
    offset: int
    data: str  # base64 of up to one chunk
    next_offset: int | None
