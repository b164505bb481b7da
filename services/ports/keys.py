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
