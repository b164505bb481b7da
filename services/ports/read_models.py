"""The read-model reader port: what every query handler reads the read models through."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from chronicle_contract.errors import ChronicleError

from services.ports.embedder import Embedder
from services.ports.sealing import Sealing


def not_found(kind: str, ident: UUID) -> ChronicleError:
    return ChronicleError("not_found", f"{kind} {ident} not found")


@dataclass(frozen=True)
class SemanticSearch:
    """What a hybrid search needs: the embedder the semantic read model was built with."""

    embedder: Embedder
    min_similarity: float


class Cursors(Protocol):
    """What seals the cursors a page hands out and opens those it is given back
    (services/runtime/cursors.py CursorSeal)."""

    def seal(self, user: str, listing: str, payload: bytes) -> str: ...

    def open(self, user: str, listing: str, cursor: str, *, field: str = "cursor") -> bytes: ...


class Queries(ABC):
    """Rows of the read models as dicts, one statement per call (adapters/read_side/queries.py
    reads them from Postgres). `language` is the full-text configuration the search read model
    was built with; `semantic` is None when the semantic read model is not kept; `cursors`
    seals the cursors pages hand out; `sealing` opens the content projections sealed under
    each owner's key (services/ports/sealing.py)."""

    language: str
    semantic: SemanticSearch | None
    cursors: Cursors
    sealing: Sealing

    @abstractmethod
    async def fetch_all(self, query: Any, params: Any, *, binary: bool = False) -> list[dict[str, Any]]:
        """`binary`: values come in Postgres's binary format (sealed bytea as its bytes, where
        text would send hex, twice as long, to be decoded)."""

    @abstractmethod
    async def fetch_all_within(
        self, query: Any, params: Any, *, seconds: float, too_long: ChronicleError
    ) -> list[dict[str, Any]]:
        """As fetch_all, for a query whose work grows with the data (a graph walk): given up
        after `seconds`, and the caller hears `too_long` (which names the input to ask less of)."""

    @abstractmethod
    async def tsquery(self, words: str) -> str:
        """The words' full-text query (`websearch_to_tsquery` in `language`) as Postgres prints it."""

    @abstractmethod
    async def embed(self, words: str) -> str | None:
        """The words as a vector literal for the semantic read model; None without an
        embedder, when it fails, or when the words give it nothing to go by."""

    async def fetch_one(self, query: Any, params: Any) -> dict[str, Any] | None:
        rows = await self.fetch_all(query, params)
        return rows[0] if rows else None
