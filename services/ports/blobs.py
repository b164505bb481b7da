"""The blob store port: preview bytes by owner and sha256, each owner's sealed with their key,
read back a chunk at a time (adapters/store/blobs.py keeps them in Postgres)."""

from __future__ import annotations

from abc import ABC, abstractmethod

CHUNK_BYTES = 512 * 1024  # what one read returns at most (a reply stays under NATS's 1 MiB)


class BlobErased(Exception):
    """The owner was erased: their blobs cannot be read any more."""


class BlobStore(ABC):
    @abstractmethod
    def put(self, owner: str, data: bytes) -> str:
        """Store `data` for `owner` (once: the same bytes again change nothing); its sha256.
        UserErased once the owner was erased."""

    @abstractmethod
    def chunk(self, owner: str, sha256: str, seq: int) -> bytes | None:
        """Chunk `seq` (CHUNK_BYTES each) of the owner's blob, opened; None when there is no
        such chunk; BlobErased when the owner was erased."""

    @abstractmethod
    def seal(self, owner: str, data: bytes, name: str) -> bytes:
        """`data` sealed with the owner's key, bound to `name`, for bytes kept elsewhere a while
        (an upload part in JetStream): after an erasure, what a file still holds opens no more.
        UserErased once the owner was erased."""

    @abstractmethod
    def open(self, owner: str, sealed: bytes, name: str) -> bytes:
        """What `seal` sealed under that name; BlobErased when the owner was erased (or the
        bytes were not sealed for them under that name)."""

    @abstractmethod
    def close(self) -> None: ...
