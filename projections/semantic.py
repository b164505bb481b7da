"""Semantic read model: one embedding per artifact (its query's blended with its draft's),
conversation title and message, for the vector half of hybrid search
(services/runtime/full_text.py ranks it together with the full-text half).

Vectors come from the configured embedder; its name and size are part of this read
model's version, so changing the embedder rebuilds it from the log rather than mixing
two vector spaces.
"""

from __future__ import annotations

import math
import zlib
from abc import abstractmethod
from typing import Any
from uuid import UUID

from domain.artifact import Artifact
from domain.conversation import Conversation
from projections.search import DocumentsProjection, DocumentsView
from projections.view import handles
from services.ports.embedder import MAX_EMBEDDED_CHARS, Embedder, EmbeddingFailed

LAYOUT_VERSION = 1  # bump when the tables or what is embedded change
# An artifact's vector: its query's and its draft's, weighted as full text weighs them (A
# above B): a search is usually for what was asked, and a long draft must not drown it.
QUERY_WEIGHT = 0.7


def blend(first: list[float], second: list[float], weight: float) -> list[float]:
    """weight * first + (1 - weight) * second, at unit length (a zero vector stays zero)."""
    rest = 1 - weight
    mixed = [weight * a + rest * b for a, b in zip(first, second, strict=True)]
    norm = math.hypot(*mixed)
    return [x / norm for x in mixed] if norm else mixed


def semantic_version(embedder: Embedder) -> int:
    """The layout's version and the embedder's space: another embedder, another read model."""
    space = zlib.crc32(f"{embedder.name}/{embedder.dimensions}".encode()) % 100_000
    return LAYOUT_VERSION * 100_000 + space


class SemanticView(DocumentsView):
    """Texts in, their embeddings kept (the view embeds them with the read model's embedder)."""

    @abstractmethod
    def embed_conversation(self, conversation_id: UUID, owner: str, title: str) -> None: ...

    @abstractmethod
    def retitle_conversation(self, conversation_id: UUID, title: str) -> None: ...

    @abstractmethod
    def embed_message(self, message_id: UUID, conversation_id: UUID, content: str) -> None:
        """A message of a conversation embedded before it, under that conversation's owner."""

    @abstractmethod
    def embed_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str) -> None:
        """One vector: the query's and the draft's `blend`ed by QUERY_WEIGHT."""


class SemanticProjection(DocumentsProjection[SemanticView]):
    name = "semantic"
    version = LAYOUT_VERSION
    weight = 2
    isolated = True  # an embeddings endpoint's latency or outage delays this read model only
    transient_errors = (EmbeddingFailed,)  # the endpoint, not the event: retried, never parked

    def __init__(self, view: SemanticView, **options: Any):
        super().__init__(view, **options)
        self.version = semantic_version(options["embedder"])

    @handles(Conversation.Started)
    def started(self, e: Conversation.Started) -> None:
        self.view.embed_conversation(e.originator_id, e.owner, e.title)

    @handles(Conversation.Retitled)
    def retitled(self, e: Conversation.Retitled) -> None:
        self.view.retitle_conversation(e.originator_id, e.title)

    @handles(Conversation.MessageAdded)
    def message_added(self, e: Conversation.MessageAdded) -> None:
        self.view.embed_message(e.message_id, e.originator_id, e.content[:MAX_EMBEDDED_CHARS])

    @handles(Artifact.Stored)
    def artifact_stored(self, e: Artifact.Stored) -> None:
        self.view.embed_artifact(e.originator_id, e.owner, e.query, e.draft[:MAX_EMBEDDED_CHARS])
