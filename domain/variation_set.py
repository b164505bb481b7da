"""The VariationSet aggregate: the artifacts one variations request produced, scored as a set.

A set is created once, in the same transaction as its artifacts, so the read models see
all of it or none of it; a variation whose generation failed is a member with its error.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from domain.artifact import MAX_QUERY, Artifact
from domain.base import Aggregate, check_text
from domain.layout import diversity, rankings, shape_of

MAX_VARIATIONS = 10
MAX_ERROR = 500


class Member(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    temperature: float
    status: Literal["stored", "failed"]
    artifact_id: UUID | None = None
    error: str | None = None


class VariationSetAttributes:
    # What its events set (declared here, not on the aggregate: see domain/snapshot.py state_of).
    session_id: UUID
    members: tuple[Member, ...]
    diversity: float
    rankings: dict[str, list[int]]


class VariationSet(VariationSetAttributes, Aggregate):
    """State: owner, session_id, members, diversity, rankings."""


    class Created(Aggregate.Created):
        session_id: UUID
        base_artifact_id: UUID | None
        query: str
        model: str | None
        style_variety: float
        members: tuple[Member, ...]
        diversity: float  # 1 - mean pairwise structural similarity of the stored variations
        rankings: dict[str, list[int]]  # variation indices, best first, by complexity/depth/variety

        def apply(self, variation_set: VariationSet) -> None:
            super().apply(variation_set)
            variation_set.session_id = self.session_id
            variation_set.members = self.members
            variation_set.diversity = self.diversity
            variation_set.rankings = self.rankings

    @classmethod
    def create(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        session_id: UUID,
        base_artifact_id: UUID | None,
        query: str,
        model: str | None,
        style_variety: float,
        temperatures: list[float],
        outcomes: dict[int, Artifact | str],  # variation index -> its artifact, or why it failed
    ) -> VariationSet:
        check_text("query", query, max_length=MAX_QUERY)
        members = []
        stored: dict[int, Artifact] = {}
        for index, temperature in enumerate(temperatures):
            outcome = outcomes[index]
            if isinstance(outcome, Artifact):
                stored[index] = outcome
                members.append(Member(index=index, temperature=temperature, status="stored", artifact_id=outcome.id))
            else:
                members.append(Member(index=index, temperature=temperature, status="failed", error=outcome[:MAX_ERROR]))
        return cls._create(
            cls.Created,
            id=id,
            timestamp=at,
            owner=owner,
            session_id=session_id,
            base_artifact_id=base_artifact_id,
            query=query,
            model=model,
            style_variety=style_variety,
            members=tuple(members),
            diversity=diversity([a.layout for a in stored.values()]),
            rankings=rankings({index: shape_of(a.layout) for index, a in stored.items()}),
        )
