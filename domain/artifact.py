"""The Artifact aggregate: one generated layout with its draft, provenance, lineage and previews.

An artifact names its parent when it is stored and never changes it; the parent must already
exist, so a parent chain always ends at a root and a cycle cannot be formed.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from domain.base import Aggregate, check_text, normalise_tags
from domain.errors import InvalidCommand
from domain.layout import check_layout
from domain.snapshot import state_of

MAX_QUERY = 10_000
MAX_DRAFT = 1_000_000
MAX_LABEL = 200  # model, provider, example ids, preview style and format
MAX_RAG_EXAMPLES = 100
MAX_EXAMPLE_TEXT = 10_000
MAX_REFINEMENT = 10_000
MAX_TEMPERATURE = 2.0
MAX_PREVIEW_BYTES = 20 * 1024 * 1024
MAX_REMOVAL_REASON = 500

Origin = Literal["stored", "generated", "refined", "variation", "job"]


class GenerationStats(BaseModel):
    """What producing the artifact cost: model calls, tokens, retries and wall time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(default=1, ge=0, le=1_000)
    tokens: int = Field(default=0, ge=0, le=2**62)
    retries: int = Field(default=0, ge=0, le=1_000)
    duration_ms: float = Field(default=0.0, ge=0, le=1e12)


class RagExample(BaseModel):
    """A retrieved corpus example that influenced the artifact, with its retrieval score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    score: float
    text: str | None = None


class Preview(BaseModel):
    """A cached rendering: the bytes live in the blob store under their sha256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    style: str
    format: str
    sha256: str
    size: int


def check_examples(examples: tuple[RagExample, ...]) -> None:
    if len(examples) > MAX_RAG_EXAMPLES:
        raise InvalidCommand(
            f"rag_examples may hold at most {MAX_RAG_EXAMPLES} examples", field="rag_examples", rule="max_items"
        )
    seen: set[str] = set()
    for n, example in enumerate(examples):
        check_text(f"rag_examples[{n}].id", example.id, max_length=MAX_LABEL)
        if example.id in seen:
            raise InvalidCommand(f"rag example {example.id!r} is listed twice", field=f"rag_examples[{n}].id", rule="unique")
        seen.add(example.id)
        if not math.isfinite(example.score):
            raise InvalidCommand("a rag example's score must be finite", field=f"rag_examples[{n}].score", rule="finite")
        if example.text is not None:
            check_text(f"rag_examples[{n}].text", example.text, max_length=MAX_EXAMPLE_TEXT, min_length=0)


class ArtifactAttributes:
    # What its events set; the snapshot's State model is made from these.
    session_id: UUID
    parent_id: UUID | None
    generation: int
    query: str
    draft: str
    layout: dict[str, Any]
    tags: tuple[str, ...]
    variation_set_id: UUID | None
    variation_index: int | None
    previews: tuple[Preview, ...]
    removed: bool


class Artifact(ArtifactAttributes, Aggregate):
    """State: owner, session_id, parent_id, generation (0 for a root), query, draft, layout,
    tags, variation_set_id, variation_index, previews, removed."""

    State = state_of(ArtifactAttributes)

    class Stored(Aggregate.Created):
        session_id: UUID
        parent_id: UUID | None
        generation: int
        origin: Origin
        query: str
        draft: str
        layout: dict[str, Any]
        model: str | None
        temperature: float | None
        provider: str | None
        stats: GenerationStats
        rag_examples: tuple[RagExample, ...]
        refinement: str | None
        variation_set_id: UUID | None
        variation_index: int | None
        tags: tuple[str, ...]
        job_id: UUID | None = None  # the generation job whose result this is

        def apply(self, artifact: Artifact) -> None:
            super().apply(artifact)
            for name in ("session_id", "parent_id", "generation", "query", "draft", "layout", "tags"):
                setattr(artifact, name, getattr(self, name))
            artifact.variation_set_id = self.variation_set_id
            artifact.variation_index = self.variation_index
            artifact.previews = ()
            artifact.removed = False

    class Tagged(Aggregate.Event):
        tags: tuple[str, ...]

        def apply(self, artifact: Artifact) -> None:
            artifact.tags = self.tags

    class PreviewCached(Aggregate.Event):
        preview: Preview

        def apply(self, artifact: Artifact) -> None:
            others = tuple(p for p in artifact.previews if (p.style, p.format) != (self.preview.style, self.preview.format))
            artifact.previews = (*others, self.preview)

    class Removed(Aggregate.Event):
        """Retention took the artifact out of the read models; its events stay."""

        reason: str
        session_id: UUID  # these two so a read model counting per session
        owner: str  # and per owner need not look them up

        def apply(self, artifact: Artifact) -> None:
            artifact.removed = True

    @classmethod
    def store(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        session_id: UUID,
        parent: Artifact | None,
        layout: dict[str, Any],
        query: str = "",
        draft: str = "",
        model: str | None = None,
        temperature: float | None = None,
        provider: str | None = None,
        stats: GenerationStats | None = None,
        rag_examples: tuple[RagExample, ...] | list[RagExample] = (),
        tags: tuple[str, ...] | list[str] = (),
        origin: Origin = "stored",
        refinement: str | None = None,
        variation_set_id: UUID | None = None,
        variation_index: int | None = None,
        job_id: UUID | None = None,
    ) -> Artifact:
        check_layout(layout)
        check_text("query", query, max_length=MAX_QUERY, min_length=0)
        check_text("draft", draft, max_length=MAX_DRAFT, min_length=0)
        for field, label in (("model", model), ("provider", provider)):
            if label is not None:
                check_text(field, label, max_length=MAX_LABEL)
        if temperature is not None and not (0 <= temperature <= MAX_TEMPERATURE):
            raise InvalidCommand(
                f"temperature must be between 0 and {MAX_TEMPERATURE}", field="temperature", rule="range"
            )
        if refinement is not None:
            check_text("refinement", refinement, max_length=MAX_REFINEMENT)
        examples = tuple(rag_examples)
        check_examples(examples)
        if parent is not None:
            parent.check_visible_to(owner)
        return cls._create(
            cls.Stored,
            id=id,
            timestamp=at,
            owner=owner,
            session_id=session_id,
            parent_id=parent.id if parent is not None else None,
            generation=parent.generation + 1 if parent is not None else 0,
            origin=origin,
            query=query,
            draft=draft,
            layout=layout,
            model=model,
            temperature=temperature,
            provider=provider,
            stats=stats or GenerationStats(),
            rag_examples=examples,
            refinement=refinement,
            variation_set_id=variation_set_id,
            variation_index=variation_index,
            tags=normalise_tags("tags", tags),
            job_id=job_id,
        )

    def tag(self, *, at: datetime, tags: tuple[str, ...] | list[str]) -> None:
        new_tags = normalise_tags("tags", tags)
        if new_tags != self.tags:
            self.trigger_event(self.Tagged, timestamp=at, tags=new_tags)

    def cache_preview(self, *, at: datetime, style: str, format: str, sha256: str, size: int) -> bool:
        """Record a preview; False (nothing recorded) when this exact one is cached already."""
        check_text("style", style, max_length=MAX_LABEL)
        check_text("format", format, max_length=MAX_LABEL)
        if not (0 < size <= MAX_PREVIEW_BYTES):
            raise InvalidCommand(f"a preview holds 1 to {MAX_PREVIEW_BYTES} bytes", field="size", rule="range")
        preview = Preview(style=style, format=format, sha256=sha256, size=size)
        if preview in self.previews:
            return False
        self.trigger_event(self.PreviewCached, timestamp=at, preview=preview)
        return True

    def remove(self, *, at: datetime, reason: str) -> bool:
        check_text("reason", reason, max_length=MAX_REMOVAL_REASON)
        if self.removed:
            return False
        self.trigger_event(self.Removed, timestamp=at, reason=reason, session_id=self.session_id, owner=self.owner)
        return True

    def is_gone(self) -> bool:
        return self.removed
