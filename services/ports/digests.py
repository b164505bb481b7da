"""The digest port: the store's head position and its Merkle digest at a position, which the
periodic publisher records (services/audit/digests.py). adapters/store/digest.py computes
them over `chronicle.events`; the layout is in docs/architecture.md ("Audit: periodic digest")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class StoreDigest:
    position: int  # notification id the heads are taken at
    root: bytes
    streams: int
    events: int  # the sum of the head versions: every event, when every chain is intact

    @property
    def root_hex(self) -> str:
        return self.root.hex()


class StoreDigests(ABC):
    """Both calls block (millions of events may be read): callers on an event loop use a thread."""

    @abstractmethod
    def head(self) -> int:
        """The notification id of the latest event a digest would cover (0 for none)."""

    @abstractmethod
    def digest_at(self, position: int) -> StoreDigest: ...
