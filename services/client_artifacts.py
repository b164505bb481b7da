"""The client's artifact side: `client.artifacts` and `client.variations`, one method per
command and query, with previews of any size moved in pieces NATS can carry."""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from services import contract as c
from services import contract_artifacts as a
from services.contract_artifacts import upload_bucket

if TYPE_CHECKING:
    from services.client import ChronicleClient


class Artifacts:
    def __init__(self, client: ChronicleClient):
        self._client = client

    async def _command(self, action: str, request: type[a.Command], reply: Any, key: str | None, /, **fields: Any) -> Any:
        return await self._client.command(action, self._client.build(request, **fields), reply, key)

    async def store(self, layout: dict[str, Any], *, idempotency_key: str | None = None, **fields: Any) -> a.ArtifactStored:
        return await self._command("artifact.store", a.StoreArtifact, a.ArtifactStored, idempotency_key, layout=layout, **fields)

    async def generate(self, query: str, *, idempotency_key: str | None = None, **fields: Any) -> a.Generated:
        return await self._command("artifact.generate", a.GenerateArtifact, a.Generated, idempotency_key, query=query, **fields)

    async def refine(
        self, artifact_id: UUID, refinement: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> a.Generated:
        return await self._command(
            "artifact.refine", a.RefineArtifact, a.Generated, idempotency_key,
            artifact_id=artifact_id, refinement=refinement, **fields,
        )

    async def variations(
        self, query: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> a.VariationSetCreated:
        return await self._command(
            "artifact.variations", a.CreateVariations, a.VariationSetCreated, idempotency_key, query=query, **fields
        )

    async def tag(self, artifact_id: UUID, tags: list[str], *, idempotency_key: str | None = None) -> c.Written:
        return await self._command("artifact.tag", a.TagArtifact, c.Written, idempotency_key, artifact_id=artifact_id, tags=tags)

    async def cache_preview(
        self,
        artifact_id: UUID,
        data: bytes,
        *,
        style: str = "default",
        format: str = "png",
        idempotency_key: str | None = None,
    ) -> a.PreviewCached:
        """Up to 512 KiB go inline; larger previews (up to 20 MiB) go through the upload
        object store first, and the command names the upload."""
        fields: dict[str, Any] = {"artifact_id": artifact_id, "style": style, "format": format}
        fields |= {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        if len(data) <= a.PREVIEW_CHUNK:
            fields["data"] = base64.b64encode(data).decode()
        else:
            fields["upload"] = uuid.uuid4().hex
        request = self._client.build(a.CachePreview, **fields)  # refused here, before any upload, if invalid
        if request.upload is not None:
            store = await self._client.nc.jetstream().object_store(upload_bucket(self._client.prefix))
            await store.put(request.upload, data)
        return await self._client.command("artifact.cache_preview", request, a.PreviewCached, idempotency_key)

    async def preview(self, artifact_id: UUID, *, style: str | None = None, format: str | None = None) -> bytes:
        """A preview's bytes, fetched chunk by chunk (the latest one when style/format are not given)."""
        parts: list[bytes] = []
        offset: int | None = 0
        while offset is not None:
            request = self._client.build(a.PreviewChunk, artifact_id=artifact_id, style=style, format=format, offset=offset)
            chunk = await self._client.query("artifacts.preview", request, a.PreviewData)
            parts.append(base64.b64decode(chunk.data))
            offset = chunk.next_offset
        return b"".join(parts)

    async def get(self, artifact_id: UUID, *, include_preview: bool = False) -> a.Artifact:
        """The artifact; with include_preview every preview's bytes are in its `data`
        (small ones come inline, larger ones are fetched in chunks)."""
        request = self._client.build(a.GetArtifact, artifact_id=artifact_id, include_preview=include_preview)
        artifact = await self._client.query("artifacts.get", request, a.Artifact)
        if include_preview:
            for n, preview in enumerate(artifact.previews):
                if preview.data is None:
                    data = await self.preview(artifact_id, style=preview.style, format=preview.format)
                    artifact.previews[n] = preview.model_copy(update={"data": base64.b64encode(data).decode()})
        return artifact

    async def list(self, **fields: Any) -> c.Page[a.ArtifactSummary]:
        return await self._client.query("artifacts.list", self._client.build(a.ListArtifacts, **fields), c.Page[a.ArtifactSummary])

    async def search(self, q: str, **fields: Any) -> a.ArtifactHits:
        return await self._client.query("artifacts.search", self._client.build(a.SearchArtifacts, q=q, **fields), a.ArtifactHits)

    async def lineage(
        self, artifact_id: UUID, *, direction: Literal["ancestors", "descendants", "both"] = "both", depth: int = 50
    ) -> a.ArtifactLineageReply:
        request = self._client.build(a.ArtifactLineage, artifact_id=artifact_id, direction=direction, depth=depth)
        return await self._client.query("artifacts.lineage", request, a.ArtifactLineageReply)

    async def rag_influence(self, artifact_id: UUID) -> a.Influence:
        request = self._client.build(a.RagInfluence, artifact_id=artifact_id)
        return await self._client.query("artifacts.rag_influence", request, a.Influence)

    async def by_example(self, example_id: str, **fields: Any) -> c.Page[a.Influenced]:
        request = self._client.build(a.ByExample, example_id=example_id, **fields)
        return await self._client.query("artifacts.by_example", request, c.Page[a.Influenced])

    async def compare(self, artifact_ids: list[UUID]) -> a.ArtifactComparison:
        request = self._client.build(a.CompareArtifacts, artifact_ids=artifact_ids)
        return await self._client.query("artifacts.compare", request, a.ArtifactComparison)

    async def variation_set(self, variation_set_id: UUID) -> a.VariationSet:
        request = self._client.build(a.GetVariations, variation_set_id=variation_set_id)
        return await self._client.query("variations.get", request, a.VariationSet)
