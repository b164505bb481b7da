"""An embedder calling any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, Ollama,
LiteLLM...). Texts go in batches; each vector is checked for the size the read model's
column has and scaled to unit length (cosine ranking then needs no norms)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import httpx

from services.ports.embedder import MAX_EMBEDDED_CHARS, EmbeddingFailed

BATCH = 64  # texts per request


class OpenAIEmbeddings:
    """One endpoint, model and key. The key lives only in the request headers, never in reprs."""

    def __init__(self, url: str, model: str, api_key: str, dimensions: int, *, timeout: float = 30.0):
        self.endpoint = url.rstrip("/") + "/embeddings"
        self.model = model
        self.dimensions = dimensions
        self.name = f"openai:{model}"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}  # (a local server may want none)
        self._client = httpx.Client(timeout=timeout)

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings({self.endpoint!r}, model={self.model!r})"

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            vectors += self._embed_batch([t[:MAX_EMBEDDED_CHARS] or " " for t in texts[start : start + BATCH]])
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        try:
            response = self._client.post(
                self.endpoint, json={"model": self.model, "input": texts}, headers=self._headers
            )
        except httpx.TimeoutException:
            raise EmbeddingFailed("the embeddings endpoint timed out") from None
        except httpx.TransportError:
            raise EmbeddingFailed("the embeddings endpoint could not be reached") from None
        if response.status_code != 200:
            # The body may quote the input back, so only the status is kept.
            raise EmbeddingFailed(f"the embeddings endpoint refused the request (HTTP {response.status_code})")
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (ValueError, KeyError, TypeError):
            raise EmbeddingFailed("the embeddings endpoint's reply is not an embeddings list") from None
        if len(vectors) != len(texts):
            raise EmbeddingFailed(f"the embeddings endpoint gave {len(vectors)} vectors for {len(texts)} texts")
        for vector in vectors:
            if len(vector) != self.dimensions:
                raise EmbeddingFailed(
                    f"the model gives {len(vector)} dimensions, CHRONICLE_EMBEDDING_DIMENSIONS says {self.dimensions}"
                )
        return [unit(vector) for vector in vectors]


def unit(vector: list[float]) -> list[float]:
    norm = math.hypot(*vector)
    return [x / norm for x in vector] if norm else vector
