"""The hash-chain port: one stream's chain recomputed over a bounded span of its events, for
`audit.verify`. adapters/store/hash_chains.py implements it with the same walk as
`chronicle audit verify`; the layout is in docs/architecture.md ("Audit: hash chains")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True)
class ChainSpan:
    events: int  # events checked
    breaks: list[tuple[int, str]]  # (version, reason), in version order
    through_version: int | None  # the last version checked; None when no event follows the anchor
    more: bool  # events follow `through_version`


class StreamChains(ABC):
    @abstractmethod
    async def verify(self, stream: UUID, after_version: int, limit: int) -> ChainSpan:
        """At most `limit` events after `after_version`, each checked against the stored hash of
        the stream's event before it (the chain's start for version 1)."""
