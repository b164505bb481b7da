"""artifact.generate, artifact.refine and artifact.variations: call the generator, then store
(artifact.draft: only call it).

The generator runs outside the writer thread (it may be a remote model taking seconds);
what it produced is stored by one internal command, so a retried request with the same
Idempotency-Key gets the first reply and never a second generation.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import UUID

from chronicle_contract.artifacts import (
    CreateVariations,
    DraftArtifact,
    Drafted,
    GenerateArtifact,
    Generated,
    RefineArtifact,
    StoreGenerated,
    StoreVariations,
    VariationOutcome,
    VariationSetCreated,
)
from chronicle_contract.base import Command
from chronicle_contract.errors import ChronicleError
from chronicle_contract.values import GenerationStats as WireStats

from domain.artifact import Artifact
from services.ports.generator import Generation, GenerationFailed, GenerationRequest, Generator
from services.runtime.command_bus import CommandBus, Store
from services.runtime.replies import Wire

log = logging.getLogger(__name__)


def generated_artifact(generation: Generation, request: GenerationRequest, **provenance: Any) -> StoreGenerated:
    return StoreGenerated(
        layout=generation.layout,
        draft=generation.draft,
        query=request.query,
        model=generation.model,
        temperature=request.temperature,
        provider=generation.provider,
        stats=WireStats.model_validate(generation.stats.model_dump()),
        **provenance,
    )


async def visible_artifact(store: Store, user: str, artifact_id: UUID, field: str) -> Artifact:
    """The caller's live artifact as the event store has it (layout, draft, session), or not_found."""
    found = (await asyncio.to_thread(store.load_many, [artifact_id])).get(artifact_id)
    if not isinstance(found, Artifact) or found.owner != user or found.removed:
        raise ChronicleError(
            "not_found",
            f"artifact {artifact_id} not found",
            [{"field": field, "rule": "exists", "message": "no such artifact"}],
        )
    return found


class Generating:
    def __init__(self, bus: CommandBus, generator: Generator):
        self.bus = bus
        self.generator = generator

    async def _call(self, request: GenerationRequest) -> Generation:
        try:
            return await self.generator.generate(request)
        except GenerationFailed as failure:
            raise ChronicleError("unavailable", f"the generator failed: {failure}") from None

    async def _artifact(self, user: str, artifact_id: UUID, field: str) -> Artifact:
        return await visible_artifact(self.bus.store, user, artifact_id, field)

    async def generate(self, user: str, cmd: GenerateArtifact, key: str | None) -> Wire[Generated]:
        async def work() -> Command[Any]:
            request = GenerationRequest(query=cmd.query, model=cmd.model, temperature=cmd.temperature)
            generation = await self._call(request)
            provenance = cmd.model_dump(include={"session_id", "tags", "rag_examples", "parent_id"})
            made = generated_artifact(generation, request, origin="generated", **provenance)
            return made if cmd.provider is None else made.model_copy(update={"provider": cmd.provider})

        return await self.bus.execute_prepared(cmd, user, key, work)

    async def draft(self, user: str, cmd: DraftArtifact, key: str | None) -> Drafted:
        """Generate only: the caller keeps what it gets (nothing is stored, nothing to repeat)."""
        generation = await self._call(GenerationRequest(query=cmd.query, model=cmd.model, temperature=cmd.temperature))
        return Drafted(
            layout=generation.layout, draft=generation.draft, model=generation.model,
            provider=cmd.provider or generation.provider, stats=WireStats(**generation.stats.model_dump()),
        )

    async def refine(self, user: str, cmd: RefineArtifact, key: str | None) -> Wire[Generated]:
        async def work() -> Command[Any]:
            base = await self._artifact(user, cmd.artifact_id, "artifact_id")
            request = GenerationRequest(
                query=base.query or cmd.refinement,
                model=cmd.model,
                temperature=cmd.temperature,
                base_layout=base.layout,
                base_draft=base.draft,
                refinement=cmd.refinement,
                preserve_structure=cmd.preserve_structure,
            )
            generation = await self._call(request)
            artifact = generated_artifact(
                generation,
                request,
                origin="refined",
                refinement=cmd.refinement,
                parent_id=base.id,
                session_id=base.session_id,
                tags=list(base.tags) if cmd.tags is None else cmd.tags,
            )
            return artifact

        return await self.bus.execute_prepared(cmd, user, key, work)

    async def variations(self, user: str, cmd: CreateVariations, key: str | None) -> Wire[VariationSetCreated]:
        async def work() -> Command[Any]:
            base = await self._artifact(user, cmd.base_artifact_id, "base_artifact_id") if cmd.base_artifact_id else None
            requests = [
                GenerationRequest(
                    query=cmd.query,
                    model=cmd.model,
                    temperature=temperature,
                    base_layout=base.layout if base else None,
                    base_draft=base.draft if base else None,
                    style_variety=cmd.style_variety,
                    variation_index=index,
                )
                for index, temperature in enumerate(cmd.temperatures())
            ]
            results = await asyncio.gather(*(self.generator.generate(r) for r in requests), return_exceptions=True)
            provenance = cmd.model_dump(include={"tags", "rag_examples"})
            outcomes = []
            for index, (request, result) in enumerate(zip(requests, results, strict=True)):
                outcome = VariationOutcome(index=index, temperature=request.temperature)
                if isinstance(result, Generation):
                    parent = {"parent_id": base.id} if base else {}
                    artifact = generated_artifact(result, request, origin="variation", **provenance, **parent)
                    outcome = outcome.model_copy(update={"artifact": artifact})
                else:
                    if not isinstance(result, GenerationFailed):
                        log.error("variation failed", extra={"error_type": type(result).__name__})
                    reason = str(result) if isinstance(result, GenerationFailed) else "internal error"
                    outcome = outcome.model_copy(update={"error": reason})
                outcomes.append(outcome)
            stored = StoreVariations(
                session_id=cmd.session_id or (base.session_id if base else None),
                base_artifact_id=cmd.base_artifact_id,
                query=cmd.query,
                model=cmd.model,
                style_variety=cmd.style_variety,
                outcomes=outcomes,
            )
            return stored

        return await self.bus.execute_prepared(cmd, user, key, work)
