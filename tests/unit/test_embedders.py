"""The embedders: the built-in hashed one, and the OpenAI-compatible adapter against a real local HTTP server."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.embedding.hashed import HashedNgramEmbedder
from adapters.embedding.openai import BATCH, OpenAIEmbeddings
from adapters.read_side.views.semantic import PostgresSemanticView
from projections.semantic import SemanticProjection
from services.ports.embedder import MAX_EMBEDDED_CHARS, Embedder, EmbeddingFailed, vector_literal
from tests.unit.chat_endpoint import HANG, ScriptedEndpoint
from tests.unit.chat_endpoint import scripted_endpoint as scripted_endpoint  # the `endpoint` fixture

hashed = HashedNgramEmbedder()


def cosine(a: str, b: str) -> float:
    [x, y] = hashed.embed([a, b])
    return sum(p * q for p, q in zip(x, y, strict=True))


@given(st.text(max_size=300))
def test_hashed_vectors_are_unit_length_or_zero_and_deterministic(text: str) -> None:
    [vector] = hashed.embed([text])
    assert len(vector) == 256
    norm = math.sqrt(sum(x * x for x in vector))
    assert norm == pytest.approx(1.0) or norm == 0.0
    assert HashedNgramEmbedder().embed([text]) == [vector]  # another instance (another process) agrees


def test_near_duplicates_and_misspellings_are_close_unrelated_texts_far() -> None:
    assert cosine("analytics dashboard", "analytics dashboard") == pytest.approx(1.0)
    assert cosine("How do I reset my password?", "how do i reset my pasword") > 0.7
    assert cosine("pasword reset", "How do I reset my password on the portal?") > 0.5
    assert cosine("anlytics dashbord", "analytics dashboard with revenue charts") > 0.3
    assert cosine("How do I reset my password?", "The quarterly report is due next Friday") < 0.2
    assert cosine("pricing table", "A photo gallery with lightbox") < 0.2
    assert hashed.embed(["the and of"]) == [[0.0] * 256]  # stop words only: nothing to go by


def test_only_the_beginning_of_a_long_text_is_embedded() -> None:
    start = ("orchid " * MAX_EMBEDDED_CHARS)[: MAX_EMBEDDED_CHARS - 1] + " "
    assert hashed.embed([start + "zebra " * 1000]) == hashed.embed([start])


def test_the_embedder_is_part_of_the_read_models_version() -> None:
    def read_model(embedder: Embedder) -> SemanticProjection:
        return SemanticProjection(PostgresSemanticView("rm_semantic", embedder=embedder), embedder=embedder)

    versions = {
        read_model(HashedNgramEmbedder(256)).version,
        read_model(HashedNgramEmbedder(64)).version,
        read_model(OpenAIEmbeddings("http://x/v1", "m", "k", 256)).version,
    }
    assert len(versions) == 3
    assert read_model(HashedNgramEmbedder(64)).version in versions  # the same one again: same version
    assert "vector(64)" in PostgresSemanticView("rm_semantic", embedder=HashedNgramEmbedder(64)).tables


def test_a_vector_literal_is_pgvectors_text_form() -> None:
    assert vector_literal([0.5, -0.25, 0.0]) == "[0.500000,-0.250000,0.000000]"


def embeddings(*vectors: list[float], shuffled: bool = False) -> tuple[int, dict[str, Any]]:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return 200, {"object": "list", "data": data[::-1] if shuffled else data, "model": "m"}


def test_openai_sends_model_and_texts_with_the_key_and_returns_unit_vectors_in_order(endpoint: ScriptedEndpoint) -> None:
    endpoint.script = [embeddings([3.0, 4.0], [0.0, 2.0], shuffled=True)]
    adapter = OpenAIEmbeddings(endpoint.url, "text-embedding-3-small", "sk-secret", 2)
    assert adapter.embed(["first", ""]) == [[0.6, 0.8], [0.0, 1.0]]
    headers, body = endpoint.requests[0]
    assert headers["authorization"] == "Bearer sk-secret"
    assert body == {"model": "text-embedding-3-small", "input": ["first", " "]}  # (an empty input is refused by some)
    assert "sk-secret" not in repr(adapter)


def test_openai_sends_texts_in_batches(endpoint: ScriptedEndpoint) -> None:
    endpoint.script = [embeddings(*[[1.0, 0.0]] * BATCH), embeddings([0.0, 1.0])]
    vectors = OpenAIEmbeddings(endpoint.url, "m", "k", 2).embed([f"t{n}" for n in range(BATCH + 1)])
    assert len(vectors) == BATCH + 1 and vectors[-1] == [0.0, 1.0]
    assert [len(body["input"]) for _, body in endpoint.requests] == [BATCH, 1]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((500, {"error": {"message": "the secret input was: tulips"}}), "HTTP 500"),
        ((401, {"error": "bad key"}), "HTTP 401"),
        ((200, {"data": "nonsense"}), "not an embeddings list"),
        (embeddings([1.0, 0.0, 0.0]), "the model gives 3 dimensions, CHRONICLE_EMBEDDING_DIMENSIONS says 2"),
        (embeddings(), "gave 0 vectors for 1 texts"),
        (HANG, "timed out"),
    ],
)
def test_openai_failures_say_what_failed_and_never_quote_the_text(
    endpoint: ScriptedEndpoint, reply: tuple[int, Any], message: str
) -> None:
    endpoint.script = [reply]
    with pytest.raises(EmbeddingFailed) as failed:
        OpenAIEmbeddings(endpoint.url, "m", "k", 2, timeout=0.2).embed(["tulips"])
    assert message in str(failed.value) and "tulips" not in str(failed.value)
