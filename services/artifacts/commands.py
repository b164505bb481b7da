"""Command handlers of generation artifacts: store, tag, previews, variation sets, retention."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from chronicle_contract.artifacts import (
    ArtifactRemoved,
    ArtifactStored,
    Generated,
    MemberView,
    PreviewCached,
    RecordPreview,
    RemoveArtifact,
    StoreArtifact,
    StoreGenerated,
    StoreVariations,
    TagArtifact,
    VariationSetCreated,
)
from chronicle_contract.base import Written

from domain.artifact import Artifact, GenerationStats, RagExample
from domain.errors import NotFound
from domain.session import Session
from domain.variation_set import VariationSet
from services.runtime.sessions import session_for
from services.runtime.unit_of_work import UnitOfWork


class ArtifactTagged(Written):
    """What artifact.tag sends: the contract promises its position; the artifact's id and
    tags have always come with it."""

    artifact_id: UUID
    tags: list[str]


def parent_of(parent_id: UUID | None, uow: UnitOfWork, field: str = "parent_id") -> Artifact | None:
    if parent_id is None:
        return None
    try:
        return uow.get(Artifact, parent_id)
    except NotFound:
        raise NotFound(f"parent artifact {parent_id} not found", field=field, rule="exists") from None


def store_in(
    cmd: StoreArtifact,
    uow: UnitOfWork,
    *,
    session: Session | None = None,
    variation_set_id: UUID | None = None,
    variation_index: int | None = None,
) -> Artifact:
    session = session or session_for(cmd.session_id, uow)
    generated = cmd if isinstance(cmd, StoreGenerated) else None
    return uow.add(
        Artifact.store(
            id=uow.new_id(),
            owner=uow.user_id,
            at=uow.now,
            session_id=session.id,
            parent=parent_of(cmd.parent_id, uow),
            layout=cmd.layout,
            query=cmd.query,
            draft=cmd.draft,
            model=cmd.model,
            temperature=cmd.temperature,
            provider=cmd.provider,
            stats=GenerationStats.model_validate(cmd.stats.model_dump()),
            rag_examples=[RagExample(**example.model_dump()) for example in cmd.rag_examples],
            tags=cmd.tags,
            origin=generated.origin if generated else "stored",
            refinement=generated.refinement if generated else None,
            variation_set_id=variation_set_id,
            variation_index=variation_index,
        )
    )


def stored(artifact: Artifact) -> dict[str, Any]:
    return {
        "artifact_id": artifact.id,
        "session_id": artifact.session_id,
        "parent_id": artifact.parent_id,
        "generation": artifact.generation,
    }


def store_artifact(cmd: StoreArtifact, uow: UnitOfWork) -> ArtifactStored:
    return ArtifactStored(**stored(store_in(cmd, uow)))


def store_generated(cmd: StoreGenerated, uow: UnitOfWork) -> Generated:
    artifact = store_in(cmd, uow)
    return Generated(**stored(artifact), **cmd.model_dump(include={"layout", "draft", "model", "provider", "stats"}))


def store_variations(cmd: StoreVariations, uow: UnitOfWork) -> VariationSetCreated:
    session = session_for(cmd.session_id, uow)
    set_id = uow.new_id()
    outcomes: dict[int, Artifact | str] = {}
    for outcome in cmd.outcomes:
        if outcome.artifact is None:
            outcomes[outcome.index] = outcome.error or "generation failed"
        else:
            outcomes[outcome.index] = store_in(
                outcome.artifact, uow, session=session, variation_set_id=set_id, variation_index=outcome.index
            )
    variation_set = uow.add(
        VariationSet.create(
            id=set_id,
            owner=uow.user_id,
            at=uow.now,
            session_id=session.id,
            base_artifact_id=cmd.base_artifact_id,
            query=cmd.query,
            model=cmd.model,
            style_variety=cmd.style_variety,
            temperatures=[o.temperature for o in cmd.outcomes],
            outcomes=outcomes,
        )
    )
    return VariationSetCreated(
        variation_set_id=set_id,
        session_id=session.id,
        members=[MemberView(**m.model_dump()) for m in variation_set.members],
        diversity=variation_set.diversity,
        rankings=variation_set.rankings,
    )


def tag_artifact(cmd: TagArtifact, uow: UnitOfWork) -> ArtifactTagged:
    artifact = uow.get(Artifact, cmd.artifact_id)
    artifact.tag(at=uow.now, tags=cmd.tags)
    return ArtifactTagged(artifact_id=artifact.id, tags=list(artifact.tags))


def record_preview(cmd: RecordPreview, uow: UnitOfWork) -> PreviewCached:
    artifact = uow.get(Artifact, cmd.artifact_id)
    artifact.cache_preview(at=uow.now, style=cmd.style, format=cmd.format, sha256=cmd.sha256, size=cmd.size)
    return PreviewCached(artifact_id=artifact.id, sha256=cmd.sha256, size=cmd.size)


def remove_artifact(cmd: RemoveArtifact, uow: UnitOfWork) -> ArtifactRemoved:
    artifact = uow.get(Artifact, cmd.artifact_id)
    return ArtifactRemoved(artifact_id=artifact.id, removed=artifact.remove(at=uow.now, reason=cmd.reason))
