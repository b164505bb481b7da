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
from services.runtime.dispatch import Internal, Read, Routes, Serve

ROUTES: Routes = {
    StoreArtifact: commands.store_artifact,
    TagArtifact: commands.tag_artifact,
    # A generator call or a 20 MiB upload first, then the bus stores the outcome.
    GenerateArtifact: Serve(Generating.generate, on=Generating),
    DraftArtifact: Serve(Generating.draft, on=Generating),
    RefineArtifact: Serve(Generating.refine, on=Generating),
    CreateVariations: Serve(Generating.variations, on=Generating),
    UploadPart: Serve(Previews.upload_part, on=Previews),
    CachePreview: Serve(Previews.cache, on=Previews),
    GetArtifact: Read(Previews.get, reads=("artifacts",), on=Previews),
    PreviewChunk: Read(Previews.chunk, reads=("artifacts",), on=Previews),
    ListArtifacts: Read(queries.list_artifacts, reads=("artifacts",)),
    SearchArtifacts: Read(queries.search, reads=("search", "artifacts")),
    ArtifactLineage: Read(queries.lineage, reads=("lineage",)),
    RagInfluence: Read(queries.rag_influence, reads=("artifacts",)),
    ByExample: Read(queries.by_example, reads=("lineage",)),
    CompareArtifacts: Read(queries.compare, reads=("artifacts",)),
    GetVariations: Read(queries.variations, reads=("artifacts",)),
}

# Run by generation, previews and retention, never straight from NATS.
INTERNAL: Internal = {
    StoreGenerated: commands.store_generated,
    StoreVariations: commands.store_variations,
    RecordPreview: commands.record_preview,
    RemoveArtifact: commands.remove_artifact,
}
