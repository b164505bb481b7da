"""Lineage read model: where each artifact and each optimization candidate came from, and
which retrieval (RAG) examples influenced which artifacts."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.artifact import Artifact
from domain.trial import Trial
from projections.view import Projection, View, handles


class LineageView(View):
    @abstractmethod
    def add_artifact(
        self, artifact_id: UUID, owner: str, parent_id: UUID | None, generation: int, variation_set_id: UUID | None,
        at: datetime,
    ) -> None: ...

    @abstractmethod
    def link_example(
        self, artifact_id: UUID, example_id: str, owner: str, session_id: UUID, position: int, score: float, at: datetime
    ) -> None:
        """A retrieval example that influenced the artifact, at `position` in its list (its text
        is the artifacts read model's, sealed there: no query reads it here)."""

    @abstractmethod
    def remove_artifact(self, artifact_id: UUID) -> None:
        """Marked removed (its descendants still trace back through it); its example links gone."""

    @abstractmethod
    def add_candidate(
        self, optimization_id: UUID, candidate_id: str, owner: str, origin: str | None, ops: list[Any] | None,
        round_index: int, trial_index: int,
    ) -> None:
        """A candidate tried again keeps where it first came from."""

    @abstractmethod
    def add_candidate_parent(self, optimization_id: UUID, candidate_id: str, parent_id: str) -> None:
        """Parents named later are added; one named again is kept once."""


class LineageProjection(Projection[LineageView]):
    name = "lineage"
    version = 3  # v3: no RAG example texts, candidates' origin and ops sealed

    @handles(Artifact.Stored)
    def artifact_stored(self, e: Artifact.Stored) -> None:
        self.view.add_artifact(e.originator_id, e.owner, e.parent_id, e.generation, e.variation_set_id, e.timestamp)
        for position, example in enumerate(e.rag_examples):
            self.view.link_example(
                e.originator_id, example.id, e.owner, e.session_id, position, example.score, e.timestamp
            )

    @handles(Artifact.Removed)
    def artifact_removed(self, e: Artifact.Removed) -> None:
        self.view.remove_artifact(e.originator_id)

    @handles(Trial.Recorded)
    def trial_recorded(self, e: Trial.Recorded) -> None:
        candidate = e.candidate
        if candidate is None:
            return
        self.view.add_candidate(
            e.optimization_id, candidate.id, e.owner, candidate.origin, candidate.ops, e.round_index, e.trial_index
        )
        for parent in candidate.parents:
            self.view.add_candidate_parent(e.optimization_id, candidate.id, parent)
