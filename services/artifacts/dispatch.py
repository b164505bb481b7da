"""Generated artifacts' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.artifacts import (
    ArtifactLineage,
    ByExample,
    CachePreview,
    CompareArtifacts,
    CreateVariations,
    DraftArtifact,
    GenerateArtifact,
    GetArtifact,
    GetVariations,
    ListArtifacts,
    PreviewChunk,
    RagInfluence,
    RecordPreview,
    RefineArtifact,
    RemoveArtifact,
    SearchArtifacts,
    StoreArtifact,
    StoreGenerated,
    StoreVariations,
    TagArtifact,
    UploadPart,
)

from services.artifacts import commands, queries
from services.artifacts.generation import Generating
from services.artifacts.previews import Previews
from services.runtime.dispatch import Decide, Read, Serve

ROUTES = (
    Decide(StoreArtifact, commands.store_artifact),
    Decide(TagArtifact, commands.tag_artifact),
    # A generator call or a 20 MiB upload first, then the bus stores the outcome.
    Serve(GenerateArtifact, Generating.generate, on=Generating),
    Serve(DraftArtifact, Generating.draft, on=Generating),
    Serve(RefineArtifact, Generating.refine, on=Generating),
    Serve(CreateVariations, Generating.variations, on=Generating),
    Serve(UploadPart, Previews.upload_part, on=Previews),
    Serve(CachePreview, Previews.cache, on=Previews),
    Read(GetArtifact, Previews.get, reads=("artifacts",), on=Previews),
    Read(PreviewChunk, Previews.chunk, reads=("artifacts",), on=Previews),
    Read(ListArtifacts, queries.list_artifacts, reads=("artifacts",)),
    Read(SearchArtifacts, queries.search, reads=("search", "artifacts")),
    Read(ArtifactLineage, queries.lineage, reads=("lineage",)),
    Read(RagInfluence, queries.rag_influence, reads=("artifacts",)),
    Read(ByExample, queries.by_example, reads=("lineage",)),
    Read(CompareArtifacts, queries.compare, reads=("artifacts",)),
    Read(GetVariations, queries.variations, reads=("artifacts",)),
)

# Run by generation, previews and retention, never straight from NATS.
INTERNAL = (
    Decide(StoreGenerated, commands.store_generated),
    Decide(StoreVariations, commands.store_variations),
    Decide(RecordPreview, commands.record_preview),
    Decide(RemoveArtifact, commands.remove_artifact),
)
