"""The blob store: preview bytes by owner and sha256, in sealed 512 KiB chunks in Postgres.

Each chunk is sealed on its own (AES-256-GCM with the owner's data key, the owner, hash and
chunk number as associated data), so a reader fetches and opens one chunk at a time and a
chunk moved to another blob or owner does not open.
"""

from __future__ import annotations

import hashlib
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg_pool import ConnectionPool

from adapters.store.postgres import PostgresTarget
from services.ports import blobs as port
from services.ports.blobs import CHUNK_BYTES, BlobErased
from services.ports.keys import KeyRing


def associated_data(owner: str, sha256: str, seq: int) -> bytes:
    return f"{owner}\0{sha256}\0{seq}".encode()


def part_data(owner: str, name: str) -> bytes:
    return f"part\0{owner}\0{name}".encode()


class BlobStore(port.BlobStore):
    def __init__(self, target: PostgresTarget, keys: KeyRing, *, pool_size: int = 2):
        self.keys = keys
        # (The URL is asked for as a connection opens: built before the server is up, opened on start.)
        self.pool = ConnectionPool(
            lambda: target.url, min_size=0, max_size=pool_size, kwargs={"autocommit": False}, open=False
        )

    def open_pool(self) -> None:
        self.pool.open()

    def put(self, owner: str, data: bytes) -> str:
        """Store `data` for `owner` (once: the same bytes again change nothing); its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        cipher = AESGCM(self.keys.key_for_writing(owner))
        with self.pool.connection() as conn:
            if conn.execute(
                "SELECT 1 FROM chronicle.blob_chunks WHERE owner = %s AND sha256 = %s AND seq = 0", (owner, sha256)
            ).fetchone():
                return sha256
            rows = []
            for seq, start in enumerate(range(0, len(data), CHUNK_BYTES)):
                nonce = secrets.token_bytes(12)
                sealed = nonce + cipher.encrypt(nonce, data[start : start + CHUNK_BYTES], associated_data(owner, sha256, seq))
                rows.append((owner, sha256, seq, sealed))
            with conn.cursor() as cur:
                # All chunks in one transaction: a blob is there whole or not at all.
                cur.executemany(
                    "INSERT INTO chronicle.blob_chunks (owner, sha256, seq, data) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING",
                    rows,
                )
        return sha256

    def chunk(self, owner: str, sha256: str, seq: int) -> bytes | None:
        """Chunk `seq` of the owner's blob, opened; None when there is no such chunk."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT data FROM chronicle.blob_chunks WHERE owner = %s AND sha256 = %s AND seq = %s",
                (owner, sha256, seq),
                prepare=True,
            ).fetchone()
        if row is None:
            return None
        key = self.keys.key_for_reading(owner)
        if key is None:
            raise BlobErased(owner)
        sealed = bytes(row[0])
        return AESGCM(key).decrypt(sealed[:12], sealed[12:], associated_data(owner, sha256, seq))

    def seal(self, owner: str, data: bytes, name: str) -> bytes:
        nonce = secrets.token_bytes(12)
        return nonce + AESGCM(self.keys.key_for_writing(owner)).encrypt(nonce, data, part_data(owner, name))

    def open(self, owner: str, sealed: bytes, name: str) -> bytes:
        key = self.keys.key_for_reading(owner)
        if key is None:
            raise BlobErased(owner)
        try:
            return AESGCM(key).decrypt(sealed[:12], sealed[12:], part_data(owner, name))
        except InvalidTag:
            raise BlobErased(owner) from None

    def close(self) -> None:
        self.pool.close()
