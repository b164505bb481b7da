"""The wire contract of generation artifacts: store, generate, refine, variations, previews, queries."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, Field, FiniteFloat, StringConstraints, field_validator, model_validator

from chronicle_contract.base import (
    Command,
    Offset,
    Page,
    PageCursor,
    Query,
    Reply,
    Request,
    Tags,
    Text,
    Written,
    check_json_values,
    empty_list,
)
from chronicle_contract.values import (
    MAX_DRAFT,
    MAX_EXAMPLE_TEXT,
    MAX_LABEL,
    MAX_PREVIEW_BYTES,
    MAX_QUERY,
    MAX_REFINEMENT,
    MAX_REMOVAL_REASON,
    MAX_TEMPERATURE,
    MAX_VARIATIONS,
    GenerationStats,
    Origin,
)

Label = Annotated[str, Text(MAX_LABEL)]
LayoutTree = Annotated[dict[str, Any], AfterValidator(check_json_values)]


ExampleText = Annotated[str, Text(MAX_EXAMPLE_TEXT, may_be_blank=True)]


Temperature = Field(default=None, ge=0, le=MAX_TEMPERATURE)
BoundedTemperature = Annotated[float, Field(ge=0, le=MAX_TEMPERATURE)]


PREVIEW_CHUNK = 512 * 1024  # bytes per preview chunk: base64 of it stays well under NATS's 1 MiB


Sha256 = Field(default=None, pattern=r"^[0-9a-f]{64}$")


def upload_bucket(prefix: str) -> str:
    """The object store the service keeps uploaded preview parts in, under each uploader's
    scope, until a cache_preview claims them (bucket names allow no dots)."""
    return prefix.replace(".", "_").upper() + "_PREVIEW_UPLOADS"


MAX_UPLOAD_PARTS = -(-MAX_PREVIEW_BYTES // PREVIEW_CHUNK)


class RagExampleIn(Request):
    id: Label
    score: FiniteFloat
    text: ExampleText | None = None


class Provenance(Request):
    """What any new artifact may carry: where it goes, what it descends from, what influenced it."""

    session_id: UUID | None = Field(default=None, description="default: the caller's current session")
    tags: Tags = empty_list()
    rag_examples: list[RagExampleIn] = empty_list(max_length=100)


class VariationOutcome(Request):
    index: int = Field(ge=0, lt=MAX_VARIATIONS)
    temperature: float
    artifact: StoreGenerated | None = None
    error: str | None = None


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


class MemberView(Reply):
    index: int
    temperature: float
    status: Literal["stored", "failed"]
    artifact_id: UUID | None
    error: str | None


class VariationSetCreated(Written):
    variation_set_id: UUID
    session_id: UUID
    members: list[MemberView]
    diversity: float
    rankings: dict[str, list[int]]


class PreviewCached(Written):
    artifact_id: UUID
    sha256: str
    size: int


class PartUploaded(Written):
    upload: str
    index: int
    size: int


class ArtifactRemoved(Written):
    artifact_id: UUID
    removed: bool  # False: it had been removed before


class PreviewRef(Reply):
    style: str
    format: str
    sha256: str
    size: int
    data: str | None = None  # base64, with include_preview and a preview of one chunk

    def bytes(self) -> bytes | None:
        return base64.b64decode(self.data) if self.data is not None else None


class ArtifactSummaryView(Reply):
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


class RagExampleView(Reply):
    id: str
    score: float
    text: str | None


class ArtifactView(ArtifactSummaryView):
    layout: dict[str, Any]
    draft: str
    temperature: float | None
    stats: GenerationStats
    rag_examples: list[RagExampleView]
    refinement: str | None
    component_types: dict[str, int]
    previews: list[PreviewRef]


class ArtifactHit(Reply):
    artifact_id: UUID
    query: str
    snippet: str
    created_at: datetime
    rank: int
    matched_by: list[Literal["text", "semantic"]] = Field(
        description="which half of the search found it: the words (full text), their meaning (semantic), or both"
    )


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
    examples: list[RagExampleView]


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


class VariationSetView(Reply):
    id: UUID
    session_id: UUID
    base_artifact_id: UUID | None
    query: str
    model: str | None
    style_variety: float
    diversity: float
    rankings: dict[str, list[int]]
    members: list[MemberView]
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


class StoreArtifact(Provenance, Command[ArtifactStored], action="artifact.store"):
    # Bounded by its own rules (domain/layout.py: bytes, nodes, depth), not CHRONICLE_MAX_JSON_BYTES.
    layout: LayoutTree = Field(description="a tree of nodes: type, optional id, label, children, attributes")
    draft: Annotated[str, Text(MAX_DRAFT, may_be_blank=True)] = ""
    query: Annotated[str, Text(MAX_QUERY, may_be_blank=True)] = ""
    model: Label | None = None
    temperature: float | None = Temperature
    provider: Label | None = None
    stats: GenerationStats = GenerationStats()
    parent_id: UUID | None = None


class StoreGenerated(StoreArtifact, action="artifact.store_generated", reply=Generated):
    """Internal: what artifact.generate / artifact.refine produced, stored by the bus."""

    origin: Origin
    refinement: str | None = None


ProviderHint = Field(default=None, description="the DSL provider hint (seed 000: d2); recorded as the artifact's provider")


class GenerateArtifact(Provenance, Command[Generated], action="artifact.generate"):
    query: Annotated[str, Text(MAX_QUERY)]
    model: Label | None = None
    temperature: float = Field(default=0.7, ge=0, le=MAX_TEMPERATURE)
    parent_id: UUID | None = None
    provider: Label | None = ProviderHint


class Drafted(Reply):
    layout: dict[str, Any]
    draft: str
    model: str | None
    provider: str | None
    stats: GenerationStats


class DraftArtifact(Command[Drafted], action="artifact.draft"):
    """A layout generated and not stored (the MCP tool generate_layout with persist=false):
    nothing is written, so an Idempotency-Key is not needed."""

    query: Annotated[str, Text(MAX_QUERY)]
    model: Label | None = None
    temperature: float = Field(default=0.7, ge=0, le=MAX_TEMPERATURE)
    provider: Label | None = ProviderHint


class RefineArtifact(Command[Generated], action="artifact.refine"):
    artifact_id: UUID
    refinement: Annotated[str, Text(MAX_REFINEMENT)]
    preserve_structure: bool = False
    model: Label | None = None
    temperature: float = Field(default=0.7, ge=0, le=MAX_TEMPERATURE)
    tags: Tags | None = Field(default=None, description="default: the refined artifact's tags")


class CreateVariations(Provenance, Command[VariationSetCreated], action="artifact.variations"):
    query: Annotated[str, Text(MAX_QUERY)]
    count: int = Field(default=3, ge=1, le=MAX_VARIATIONS)
    temperature_range: tuple[BoundedTemperature, BoundedTemperature] = Field(
        default=(0.5, 1.0), description="spread evenly over the count, from the lower to the higher"
    )
    base_artifact_id: UUID | None = None
    style_variety: float = Field(default=0.5, ge=0, le=1)
    model: Label | None = None

    @field_validator("temperature_range")
    @classmethod
    def ordered_and_in_range(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        low, high = sorted(bounds)  # ([1.0, 0.5] is the same range)
        return low, high

    def temperatures(self) -> list[float]:
        low, high = self.temperature_range
        if self.count == 1:
            return [round((low + high) / 2, 6)]
        return [round(low + (high - low) * i / (self.count - 1), 6) for i in range(self.count)]


class StoreVariations(Command[VariationSetCreated], action="artifact.store_variations"):
    """Internal: a variations request's outcomes, stored as one set in one transaction."""

    session_id: UUID | None
    base_artifact_id: UUID | None
    query: str
    model: str | None
    style_variety: float
    outcomes: list[VariationOutcome]


class TagArtifact(Command[Written], action="artifact.tag"):
    artifact_id: UUID
    tags: Tags


UploadName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,100}$")]


class UploadPart(Command[PartUploaded], action="artifact.upload_part"):
    """One part (up to 512 KiB, base64) of a preview too large to send inline: parts
    0, 1, ... of an upload the caller names, then claimed by cache_preview's `upload`.
    Only the caller can claim it; unclaimed parts go after an hour."""

    upload: UploadName
    index: int = Field(ge=0, lt=MAX_UPLOAD_PARTS)
    data: str = Field(min_length=4, max_length=4 * PREVIEW_CHUNK // 3 + 4)

    @model_validator(mode="after")
    def base64_data(self) -> UploadPart:
        try:
            base64.b64decode(self.data, validate=True)
        except binascii.Error:
            raise ValueError("data must be base64") from None
        return self


class CachePreview(Command[PreviewCached], action="artifact.cache_preview"):
    """Preview bytes inline (`data`, base64, up to 512 KiB) or, for larger ones (up to
    20 MiB), first sent in parts (artifact.upload_part) and named by `upload`."""

    artifact_id: UUID
    style: Label = "default"
    format: Label = "png"
    data: str | None = Field(default=None, max_length=4 * PREVIEW_CHUNK // 3 + 4)
    upload: UploadName | None = None
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


class RecordPreview(Command[PreviewCached], action="artifact.record_preview"):
    """Internal: the preview's bytes are in the blob store; record the reference."""

    artifact_id: UUID
    style: str
    format: str
    sha256: str
    size: int = Field(ge=0, le=MAX_PREVIEW_BYTES)


class RemoveArtifact(Command[ArtifactRemoved], action="artifact.remove"):
    """Internal: retention removes an artifact from the read models (its events stay)."""

    artifact_id: UUID
    reason: Annotated[str, Text(MAX_REMOVAL_REASON)]


class GetArtifact(Query[ArtifactView], action="artifacts.get"):
    artifact_id: UUID
    include_preview: bool = Field(default=False, description="inline previews up to 512 KiB; larger via artifacts.preview")


class ListArtifacts(Query[Page[ArtifactSummaryView]], action="artifacts.list"):
    session_id: UUID | None = None
    parent_id: UUID | None = None
    tags: Tags = empty_list(description="only artifacts carrying every one of these tags")
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None


class SearchArtifacts(Query[ArtifactHits], action="artifacts.search"):
    q: Annotated[str, Text(500)]
    limit: int = Field(default=20, ge=1, le=100)


class ArtifactLineage(Query[ArtifactLineageReply], action="artifacts.lineage"):
    artifact_id: UUID
    direction: Literal["ancestors", "descendants", "both"] = "both"
    depth: int = Field(default=50, ge=1, le=1_000)


class RagInfluence(Query[Influence], action="artifacts.rag_influence"):
    artifact_id: UUID


class ByExample(Query[Page[Influenced]], action="artifacts.by_example"):
    example_id: Label
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None


class CompareArtifacts(Query[ArtifactComparison], action="artifacts.compare"):
    artifact_ids: list[UUID] = Field(min_length=2, max_length=10)

    @field_validator("artifact_ids")
    @classmethod
    def distinct(cls, ids: list[UUID]) -> list[UUID]:
        if len(set(ids)) != len(ids):
            raise ValueError("artifact ids must be distinct")
        return ids


class GetVariations(Query[VariationSetView], action="variations.get"):
    variation_set_id: UUID


class PreviewChunk(Query[PreviewData], action="artifacts.preview"):
    artifact_id: UUID
    style: Label | None = None
    format: Label | None = None
    offset: int = Field(default=0, ge=0, lt=MAX_PREVIEW_BYTES, description="a multiple of the chunk size (512 KiB)")
