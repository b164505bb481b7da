"""A base for fake read-model stores: a subclass answers `fetch_all`; searches find nothing to embed or parse."""

from __future__ import annotations

from typing import Any

from chronicle_contract.errors import ChronicleError

from services.ports.read_models import Queries


class FakeQueries(Queries):
    language = "english"
    semantic = None

    async def fetch_all_within(self, query: Any, params: Any, *, seconds: float, too_long: ChronicleError) -> list[dict[str, Any]]:
        return await self.fetch_all(query, params)

    async def tsquery(self, words: str) -> str:
        return ""

    async def embed(self, words: str) -> str | None:
        return None
