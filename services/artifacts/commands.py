"""Command handlers of generation artifacts: store, tag, previews, variation sets, retention."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from chronicle_contract.artifacts import (
    RecordPreview,
    RemoveArtifact,
    StoreArtifact,
    StoreGenerated,
    StoreVariations,
    TagArtifact,
)
from chronicle_contract.sessions import CreateSession

from domain.artifact import Artifact, GenerationStats, RagExample
from domain.current_session import CurrentSession
from domain.errors import NotFound
from domain.session import Session
from domain.variation_set import VariationSet
from services.runtime.unit_of_work import UnitOfWork
from services.sessions.commands import open_session

CURRENT_SESSION_NAME = "Generated artifacts"


def session_for(session_id: UUID | None, uow: UnitOfWork) -> Session:
    """The session named, or the caller's current one (opened on first use, and again
    when the current one was closed)."""
    if session_id is not None:
        session = uow.get(Session, session_id)
        session.check_open()
        return session
    current = uow.find(CurrentSession, CurrentSession.id_for(uow.user_id))
    if current is not None:
        found = uow.find(Session, current.session_id)
        if found is not None and not found.closed:
            return found
    session = open_session(CreateSession(name=CURRENT_SESSION_NAME, kind="generation"), uow)
    if current is None:
        uow.add(CurrentSession.choose(owner=uow.user_id, session_id=session.id, at=uow.now))
    else:
        current.move_to(session_id=session.id, at=uow.now)
    return session


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
        "artifact_id": str(artifact.id),
        "session_id": str(artifact.session_id),
        "parent_id": str(artifact.parent_id) if artifact.parent_id else None,
        "generation": artifact.generation,
    }


def store_artifact(cmd: StoreArtifact, uow: UnitOfWork) -> dict[str, Any]:
    return stored(store_in(cmd, uow))


def store_generated(cmd: StoreGenerated, uow: UnitOfWork) -> dict[str, Any]:
    artifact = store_in(cmd, uow)
    generated = cmd.model_dump(mode="json", include={"layout", "draft", "model", "provider", "stats"})
    return {**stored(artifact), **generated}


def store_variations(cmd: StoreVariations, uow: UnitOfWork) -> dict[str, Any]:
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
    return {
        "variation_set_id": str(set_id),
        "session_id": str(session.id),
        "members": [m.model_dump(mode="json") for m in variation_set.members],
        "diversity": variation_set.diversity,
        "rankings": variation_set.rankings,
    }


def tag_artifact(cmd: TagArtifact, uow: UnitOfWork) -> dict[str, Any]:
    artifact = uow.get(Artifact, cmd.artifact_id)
    artifact.tag(at=uow.now, tags=cmd.tags)
    return {"artifact_id": str(artifact.id), "tags": list(artifact.tags)}


def record_preview(cmd: RecordPreview, uow: UnitOfWork) -> dict[str, Any]:
    artifact = uow.get(Artifact, cmd.artifact_id)
    artifact.cache_preview(at=uow.now, style=cmd.style, format=cmd.format, sha256=cmd.sha256, size=cmd.size)
    return {"artifact_id": str(artifact.id), "sha256": cmd.sha256, "size": cmd.size}


def remove_artifact(cmd: RemoveArtifact, uow: UnitOfWork) -> dict[str, Any]:
    artifact = uow.get(Artifact, cmd.artifact_id)
    return {"artifact_id": str(artifact.id), "removed": artifact.remove(at=uow.now, reason=cmd.reason)}
