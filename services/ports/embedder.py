"""The embedder port: text in, one unit-length vector per text out.

The semantic read model (projections/semantic.py) embeds what it indexes with it, and a
search embeds its words with the same one; `name` and `dimensions` say which space the
vectors live in, so a change of embedder rebuilds that read model instead of mixing spaces.
Calls block (the projection runs in threads; a query calls it off the event loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# What is embedded of one document: its beginning, up to this many characters (an
# embedding model reads a few thousand tokens at most, and the cost stays bounded).
MAX_EMBEDDED_CHARS = 4_000


class EmbeddingFailed(Exception):
    """No vectors this time. The message names statuses and kinds of fault only, never the
    text or the key, so it can go into logs."""


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def vector_literal(vector: Sequence[float]) -> str:
    """A vector in pgvector's text form ('[0.1,-0.2,...]'), six decimals being plenty for unit vectors."""
    return "[" + ",".join(map(SIX_DECIMALS, vector)) + "]"


SIX_DECIMALS = "{:.6f}".format
