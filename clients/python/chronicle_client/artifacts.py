"""The client's artifact side: `client.artifacts` and `client.variations`, one method per
command and query, with previews of any size moved in pieces NATS can carry."""

from __future__ import annotations

import asyncio
import base64
import builtins  # the client's `list` methods shadow the name inside their classes
import hashlib
import uuid
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from uuid import UUID

from chronicle_contract.artifacts import (
    PREVIEW_CHUNK,
    ArtifactComparison,
    ArtifactHits,
    ArtifactLineage,
    ArtifactLineageReply,
    ArtifactStored,
    ArtifactSummaryView,
    ArtifactView,
    ByExample,
    CachePreview,
    CompareArtifacts,
    CreateVariations,
    GenerateArtifact,
    Generated,
    GetArtifact,
    GetVariations,
    Influence,
    Influenced,
    ListArtifacts,
    PreviewCached,
    PreviewChunk,
    RagInfluence,
    RefineArtifact,
    SearchArtifacts,
    StoreArtifact,
    TagArtifact,
    UploadPart,
    VariationSetCreated,
    VariationSetView,
)
from chronicle_contract.base import Command, Page, Reply, Written

if TYPE_CHECKING:
    from chronicle_client.transport import Transport


R = TypeVar("R", bound=Reply)


class Artifacts:
    def __init__(self, client: Transport):
        self._client = client

    async def _command(self, request: type[Command[R]], key: str | None, /, **fields: Any) -> R:
        return await self._client.command(self._client.build(request, **fields), key)

    async def store(self, layout: dict[str, Any], *, idempotency_key: str | None = None, **fields: Any) -> ArtifactStored:
        return await self._command(StoreArtifact, idempotency_key, layout=layout, **fields)

    async def generate(self, query: str, *, idempotency_key: str | None = None, **fields: Any) -> Generated:
        return await self._command(GenerateArtifact, idempotency_key, query=query, **fields)

    async def refine(
        self, artifact_id: UUID, refinement: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Generated:
        return await self._command(RefineArtifact, idempotency_key, artifact_id=artifact_id, refinement=refinement, **fields)

    async def variations(
        self, query: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> VariationSetCreated:
        return await self._command(CreateVariations, idempotency_key, query=query, **fields)

    async def tag(self, artifact_id: UUID, tags: builtins.list[str], *, idempotency_key: str | None = None) -> Written:
        return await self._command(TagArtifact, idempotency_key, artifact_id=artifact_id, tags=tags)

    async def cache_preview(
        self,
        artifact_id: UUID,
        data: bytes,
        *,
        style: str = "default",
        format: str = "png",
        idempotency_key: str | None = None,
    ) -> PreviewCached:
        """Up to 512 KiB go inline; larger previews (up to 20 MiB) are sent in parts
        first (artifact.upload_part), and the command names the upload."""
        fields: dict[str, Any] = {"artifact_id": artifact_id, "style": style, "format": format}
        fields |= {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        if len(data) <= PREVIEW_CHUNK:
            fields["data"] = base64.b64encode(data).decode()
        else:
            fields["upload"] = uuid.uuid4().hex
        request = self._client.build(CachePreview, **fields)  # refused here, before any upload, if invalid
        if request.upload is not None:
            upload = request.upload
            parts = [data[offset : offset + PREVIEW_CHUNK] for offset in range(0, len(data), PREVIEW_CHUNK)]
            await asyncio.gather(*(
                self._client.command(self._client.build(
                    UploadPart, upload=upload, index=index, data=base64.b64encode(part).decode()
                ))
                for index, part in enumerate(parts)
            ))
        return await self._client.command(request, idempotency_key)

    async def preview(self, artifact_id: UUID, *, style: str | None = None, format: str | None = None) -> bytes:
        """A preview's bytes, fetched chunk by chunk (the latest one when style/format are not given)."""
        parts: builtins.list[bytes] = []
        offset: int | None = 0
        while offset is not None:
            request = self._client.build(PreviewChunk, artifact_id=artifact_id, style=style, format=format, offset=offset)
            chunk = await self._client.query(request)
            parts.append(base64.b64decode(chunk.data))
            offset = chunk.next_offset
        return b"".join(parts)

    async def get(self, artifact_id: UUID, *, include_preview: bool = False) -> ArtifactView:
        """The artifact; with include_preview every preview's bytes are in its `data`
        (small ones come inline, larger ones are fetched in chunks)."""
        request = self._client.build(GetArtifact, artifact_id=artifact_id, include_preview=include_preview)
        artifact = await self._client.query(request)
        if include_preview:
            for n, preview in enumerate(artifact.previews):
                if preview.data is None:
                    data = await self.preview(artifact_id, style=preview.style, format=preview.format)
                    artifact.previews[n] = preview.model_copy(update={"data": base64.b64encode(data).decode()})
        return artifact

    async def list(self, **fields: Any) -> Page[ArtifactSummaryView]:
        return await self._client.query(self._client.build(ListArtifacts, **fields))

    async def search(self, q: str, **fields: Any) -> ArtifactHits:
        return await self._client.query(self._client.build(SearchArtifacts, q=q, **fields))

    async def lineage(
        self, artifact_id: UUID, *, direction: Literal["ancestors", "descendants", "both"] = "both", depth: int = 50
    ) -> ArtifactLineageReply:
        request = self._client.build(ArtifactLineage, artifact_id=artifact_id, direction=direction, depth=depth)
        return await self._client.query(request)

    async def rag_influence(self, artifact_id: UUID) -> Influence:
        request = self._client.build(RagInfluence, artifact_id=artifact_id)
        return await self._client.query(request)

    async def by_example(self, example_id: str, **fields: Any) -> Page[Influenced]:
        request = self._client.build(ByExample, example_id=example_id, **fields)
        return await self._client.query(request)

    async def compare(self, artifact_ids: builtins.list[UUID]) -> ArtifactComparison:
        request = self._client.build(CompareArtifacts, artifact_ids=artifact_ids)
        return await self._client.query(request)

    async def variation_set(self, variation_set_id: UUID) -> VariationSetView:
        request = self._client.build(GetVariations, variation_set_id=variation_set_id)
        return await self._client.query(request)
