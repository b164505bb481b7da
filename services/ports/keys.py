"""The key ring port: each user's data key, which seals their content and whose destruction erases it.

The composition root makes one per process (adapters/store/keys.py, on Postgres) and hands
it to everything that seals or opens content, so an erasure evicts the one cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class KeyRing(ABC):
    @abstractmethod
    def key_for_writing(self, owner: str) -> bytes:
        """The owner's key, made on first use; domain.erasure.UserErased once the owner was erased."""

    @abstractmethod
    def key_for_reading(self, owner: str) -> bytes | None:
        """The owner's key, or None when it was destroyed (or never made)."""

    @abstractmethod
    def destroy(self, owner: str) -> None:
        """Destroy the owner's key for good (idempotent): everything sealed with it is unreadable."""

    @abstractmethod
    def is_erased(self, owner: str) -> bool: ...

    @abstractmethod
    def evict(self, owner: str) -> None:
        """Forget this process's cached copy of the owner's key."""

    @abstractmethod
    def close(self) -> None: ...


class KeyEncryptionKeys(ABC):
    """The key-encryption keys (KEKs) that wrap every data key the database keeps, held
    outside it: a file, a variable, or an external KMS behind a subclass. They come in
    numbered generations; a rotation makes the next one, every wrapped key is wrapped again
    under it, and the older ones are destroyed, so that no copy of the database made before
    (WAL, replica, backup) can unwrap a key erased before the rotation."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the keys are, as the store records it (never a key): `dir:PATH`, `file:PATH`, `env:NAME`, ..."""

    @abstractmethod
    def generations(self) -> list[int]:
        """The generations held now, oldest first (a first one is made where none is held and the holder can)."""

    @abstractmethod
    def wrap(self, generation: int, key: bytes, context: bytes) -> bytes:
        """`key` sealed under that generation, bound to `context` (whose key it is)."""

    @abstractmethod
    def unwrap(self, generation: int, wrapped: bytes, context: bytes) -> bytes:
        """The key `wrap` sealed; KeyError when that generation is not held (destroyed, or not yet seen)."""

    @abstractmethod
    def next_generation(self) -> int:
        """Make the generation after the newest, durably, and return it; when a rotation left
        one made and not yet in use (a crash), return that one."""

    @abstractmethod
    def destroy_before(self, generation: int) -> None:
        """Destroy every generation older than `generation` for good."""


class RotationUnavailable(Exception):
    """The key-encryption key cannot be rotated by the service (a static one: a variable, a read-only secret)."""


class KeyRotation(ABC):
    """Re-wrapping every live data key under a new key-encryption key after an erasure."""

    @abstractmethod
    def due_in(self, epoch: float) -> float | None:
        """Seconds until a rotation is due (0: now; a rotation left unfinished is due now), None when none is."""

    @abstractmethod
    def rotate(self) -> bool:
        """Rotate now; False when another instance is rotating. Blocking."""
