"""artifact.cache_preview and artifacts.preview: preview bytes in, preview bytes out.

NATS carries at most 1 MiB a message, so bytes travel in pieces: a client sends a large
preview in 512 KiB parts (artifact.upload_part), which the service keeps in the upload
object store under the uploader's scope, and names the upload in the command, which
claims only the caller's own parts; readers fetch 512 KiB chunks by offset. Users never
touch the object store. The bytes are kept in the blob store, sealed per owner; the
artifact's event holds only their sha256 and size.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from typing import Any

from chronicle_contract.artifacts import (
    MAX_UPLOAD_PARTS,
    ArtifactView,
    CachePreview,
    GetArtifact,
    PartUploaded,
    PreviewCached,
    PreviewChunk,
    PreviewData,
    RecordPreview,
    UploadPart,
    upload_bucket,
)
from chronicle_contract.base import Command
from chronicle_contract.bus import user_scope
from chronicle_contract.errors import ChronicleError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError, ObjectNotFoundError

from domain.artifact import MAX_PREVIEW_BYTES
from services.artifacts import queries as queries_artifacts
from services.artifacts.generation import visible_artifact
from services.ports.blobs import CHUNK_BYTES, BlobErased, BlobStore
from services.ports.read_models import Queries
from services.ports.streams import Streams
from services.runtime.command_bus import CommandBus
from services.runtime.replies import Wire

UPLOAD_TTL = 3600.0  # seconds an upload waits to be claimed before JetStream drops it


async def ensure_upload_bucket(streams: Streams, prefix: str) -> None:
    await streams.ensure_object_store(upload_bucket(prefix), ttl=UPLOAD_TTL)


def part_name(user: str, upload: str, index: int) -> str:
    """An upload part's object: under the uploader's scope, so nobody else's name reaches it."""
    return f"{user_scope(user)}/{upload}/{index}"


def invalid(field: str, rule: str, message: str) -> ChronicleError:
    return ChronicleError("invalid", message, [{"field": field, "rule": rule, "message": message}])


class Previews:
    def __init__(self, bus: CommandBus, blobs: BlobStore, queries: Queries, js: JetStreamContext, prefix: str):
        self.bus = bus
        self.blobs = blobs
        self.queries = queries
        self.js = js
        self.bucket = upload_bucket(prefix)

    async def cache(self, user: str, cmd: CachePreview, key: str | None) -> Wire[PreviewCached]:
        async def store_bytes() -> Command[Any]:
            # Checked before the bytes are stored, so nobody leaves bytes no artifact references.
            await visible_artifact(self.bus.store, user, cmd.artifact_id, "artifact_id")
            data = base64.b64decode(cmd.data) if cmd.data is not None else await self._claim(user, cmd.upload or "")
            self._check(cmd, data)
            sha256 = await asyncio.to_thread(self.blobs.put, user, data)
            record = RecordPreview(
                artifact_id=cmd.artifact_id, style=cmd.style, format=cmd.format, sha256=sha256, size=len(data)
            )
            return record

        # Bytes named by their sha256 are the same request whichever upload carried them:
        # a client retrying with its Idempotency-Key uploads again under a new name.
        same_bytes = cmd.model_copy(update={"data": None, "upload": None}) if cmd.sha256 else cmd
        try:
            return await self.bus.execute_prepared(same_bytes, user, key, store_bytes)
        finally:
            if cmd.upload is not None:  # claimed once, whatever came of it
                await self._discard(user, cmd.upload)

    @staticmethod
    def _check(cmd: CachePreview, data: bytes) -> None:
        if len(data) > MAX_PREVIEW_BYTES:
            raise invalid("size", "max_bytes", f"a preview holds at most {MAX_PREVIEW_BYTES} bytes")
        if not data:
            raise invalid("data", "min_bytes", "a preview holds at least one byte")
        if cmd.size is not None and cmd.size != len(data):
            raise invalid("size", "matches", f"size says {cmd.size} bytes, {len(data)} arrived")
        if cmd.sha256 is not None and cmd.sha256 != hashlib.sha256(data).hexdigest():
            raise invalid("sha256", "matches", "the bytes that arrived have another sha256")

    async def upload_part(self, user: str, cmd: UploadPart, key: str | None) -> PartUploaded:
        data = base64.b64decode(cmd.data)
        name = part_name(user, cmd.upload, cmd.index)
        # Sealed with the uploader's key: JetStream's block files keep what a delete removed,
        # and once the uploader is erased, those bytes open no more.
        sealed = await asyncio.to_thread(self.blobs.seal, user, data, name)
        store = await self.js.object_store(self.bucket)
        await store.put(name, sealed)
        return PartUploaded(upload=cmd.upload, index=cmd.index, size=len(data))

    async def _claim(self, user: str, name: str) -> bytes:
        """The caller's upload of that name: its parts 0, 1, ... joined."""
        store = await self.js.object_store(self.bucket)
        parts: list[bytes] = []
        for index in range(MAX_UPLOAD_PARTS):
            part = part_name(user, name, index)
            try:
                found = await store.get(part)
                parts.append(await asyncio.to_thread(self.blobs.open, user, bytes(found.data or b""), part))
            except (ObjectNotFoundError, BlobErased):  # (a part of an earlier version, unsealed: uploaded again)
                break
        if not parts:
            raise ChronicleError(
                "not_found", f"no upload named {name!r} of yours (uploads expire after an hour)",
                [{"field": "upload", "rule": "exists", "message": "no such upload"}],
            )
        return b"".join(parts)

    async def forget_uploads(self, user: str) -> None:
        """Every upload part of the user's not yet claimed (an erasure leaves none on NATS)."""
        store = await self.js.object_store(self.bucket)
        scope = f"{user_scope(user)}/"
        try:
            infos = await store.list()
        except NotFoundError:  # nats-py: an empty store lists as not found
            return
        for info in infos:
            if info.name and info.name.startswith(scope):
                with contextlib.suppress(ObjectNotFoundError):
                    await store.delete(info.name)

    async def _discard(self, user: str, name: str) -> None:
        store = await self.js.object_store(self.bucket)
        for index in range(MAX_UPLOAD_PARTS):
            try:
                await store.delete(part_name(user, name, index))
            except ObjectNotFoundError:
                break

    async def get(self, user: str, q: GetArtifact) -> Wire[ArtifactView]:
        """artifacts.get; with include_preview, previews of one chunk come inline."""
        artifact = await queries_artifacts.get(self.queries, user, q)
        if q.include_preview:
            for preview in artifact["previews"]:
                if preview["size"] <= CHUNK_BYTES:
                    data = await self._read(user, preview["sha256"], 0)
                    preview["data"] = base64.b64encode(data).decode() if data is not None else None
        return artifact

    async def _read(self, user: str, sha256: str, seq: int) -> bytes | None:
        try:
            return await asyncio.to_thread(self.blobs.chunk, user, sha256, seq)
        except BlobErased:
            return None

    async def chunk(self, user: str, q: PreviewChunk) -> Wire[PreviewData]:
        """One chunk of a preview of the caller's artifact (the latest of that style/format)."""
        previews = await self.queries.fetch_one(
            "SELECT previews FROM rm_artifacts.artifacts WHERE id = %s AND owner = %s", (q.artifact_id, user)
        )
        chosen = [
            p
            for p in (previews or {}).get("previews") or []
            if q.style in (None, p["style"]) and q.format in (None, p["format"])
        ]
        if not chosen:
            raise ChronicleError("not_found", f"no such preview of artifact {q.artifact_id}")
        preview = chosen[-1]
        if q.offset % CHUNK_BYTES or q.offset >= preview["size"]:
            raise invalid("offset", "chunk", f"offset must be a multiple of {CHUNK_BYTES} below the size")
        data = await self._read(user, preview["sha256"], q.offset // CHUNK_BYTES)
        if data is None:
            raise ChronicleError("not_found", f"the preview of artifact {q.artifact_id} is gone")
        end = q.offset + len(data)
        return Wire({
            "artifact_id": q.artifact_id,
            **preview,
            "offset": q.offset,
            "data": base64.b64encode(data).decode(),
            "next_offset": end if end < preview["size"] else None,
        })
