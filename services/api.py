"""The subject table: which NATS subject runs which command or query."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from adapters.nats_service import Route
from services import contract as c
from services import contract_artifacts as ca
from services import contract_audit as a
from services import contract_jobs as cj
from services import contract_optimization as o
from services import queries_artifacts as qa
from services import queries_jobs as qj
from services import queries_optimization as qo
from services.command_bus import CommandBus
from services.commands import COMMANDS
from services.digests import Digests
from services.erasure import ADMIN, erase_user
from services.errors import ChronicleError
from services.generation import Generating
from services.jobs import Jobs
from services.positions import ProjectionPositions
from services.previews import Previews
from services.queries import Queries
from services.queries_audit import Audit

QueryFn = Callable[[Queries, str, Any], Awaitable[dict[str, Any]]]

# query subject suffix -> (request model, read models it needs, handler)
QUERIES: dict[str, tuple[type[c.Query], list[str], QueryFn]] = {
    "sessions.list": (c.ListSessions, ["history", "stats"], Queries.list_sessions),
    "sessions.get": (c.GetSession, ["history", "stats"], Queries.get_session),
    "conversations.list": (c.ListConversations, ["history"], Queries.list_conversations),
    "conversations.get": (
        c.GetConversation, ["history"], lambda queries, user, q: queries.get_conversation(user, q.conversation_id)
    ),
    "conversations.search": (c.SearchConversations, ["search"], Queries.search_conversations),
    "conversations.stats": (c.ConversationStatsQuery, ["stats"], Queries.conversation_stats),
    "conversations.export": (c.ExportConversation, ["history"], Queries.export_conversation),
    "hitl.get": (c.GetRun, ["hitl"], Queries.get_run),
    "hitl.list": (c.ListRuns, ["hitl"], Queries.list_runs),
    "optimizations.list": (o.ListOptimizations, ["optimizations"], qo.list_optimizations),
    "optimizations.get": (o.GetOptimization, ["optimizations"], qo.get),
    "optimizations.history": (o.OptimizationHistory, ["optimizations"], qo.history),
    "optimizations.pareto": (o.ParetoQuery, ["optimizations"], qo.pareto),
    "optimizations.compare": (o.CompareOptimizations, ["optimizations"], qo.compare),
    "candidates.lineage": (o.CandidateLineage, ["lineage", "optimizations"], qo.lineage),
    "artifacts.list": (ca.ListArtifacts, ["artifacts"], qa.list_artifacts),
    "artifacts.search": (ca.SearchArtifacts, ["search", "artifacts"], qa.search),
    "artifacts.lineage": (ca.ArtifactLineage, ["lineage"], qa.lineage),
    "artifacts.rag_influence": (ca.RagInfluence, ["artifacts"], qa.rag_influence),
    "artifacts.by_example": (ca.ByExample, ["lineage"], qa.by_example),
    "artifacts.compare": (ca.CompareArtifacts, ["artifacts"], qa.compare),
    "variations.get": (ca.GetVariations, ["artifacts"], qa.variations),
    "jobs.get": (cj.GetJob, ["jobs"], qj.get),
    "jobs.list": (cj.ListJobs, ["jobs"], qj.list_jobs),
}

# Commands that do slow work (a generator call, a 20 MiB upload) before the bus stores
# the outcome: subject suffix -> (request model, method of Generating or Previews).
GENERATING_COMMANDS: dict[str, tuple[type[c.Command], Any]] = {
    "artifact.generate": (ca.GenerateArtifact, Generating.generate),
    "artifact.refine": (ca.RefineArtifact, Generating.refine),
    "artifact.variations": (ca.CreateVariations, Generating.variations),
}
PREVIEW_QUERIES: dict[str, tuple[type[c.Query], list[str], Any]] = {
    "artifacts.get": (ca.GetArtifact, ["artifacts"], Previews.get),
    "artifacts.preview": (ca.PreviewChunk, ["artifacts"], Previews.chunk),
}


# audit subject suffix -> (request model, read models it needs, Audit method)
AUDIT_QUERIES: dict[str, tuple[type[c.Query], list[str], Any]] = {
    "audit.stream": (a.AuditStream, [], Audit.stream),
    "audit.timeline": (a.AuditTimeline, ["audit"], Audit.timeline),
}


def routes(
    prefix: str,
    bus: CommandBus,
    queries: Queries,
    positions: ProjectionPositions,
    wait_timeout: float,
    generating: Generating,
    previews: Previews,
    jobs: Jobs,
) -> list[Route]:
    def command(name: str) -> Any:
        async def run(user: str, payload: c.Command, key: str | None) -> dict[str, Any]:
            return await bus.execute(name, payload, str(user), key)

        return run

    async def record_read(auditor: str, read: dict[str, Any]) -> None:
        await bus.execute("audit.record_read", c.RecordRead(**read), auditor)

    audit = Audit(queries, record_read, bus.store.mapper.keys)

    async def erase(user: str, request: c.EraseUser, _: str | None) -> dict[str, Any]:
        if ADMIN not in getattr(user, "roles", ()):
            raise ChronicleError("unauthorized", "erasing a user needs the admin role")
        return await erase_user(bus, bus.store.mapper.keys, request.user_id, str(user))

    def query(read_models: list[str], handler: QueryFn, target: Any = queries) -> Any:
        async def run(user: str, request: c.Query, _: str | None) -> dict[str, Any]:
            await positions.wait_for(read_models, request.min_position, wait_timeout)
            return await handler(target, user, request)

        return run

    return [
        *(Route(f"{prefix}.cmd.{name}", model, command(name)) for name, (model, _) in COMMANDS.items()),
        *(
            Route(f"{prefix}.query.{name}", model, query(read_models, handler))
            for name, (model, read_models, handler) in QUERIES.items()
        ),
        *(
            Route(f"{prefix}.query.{name}", model, query(read_models, handler, audit))
            for name, (model, read_models, handler) in AUDIT_QUERIES.items()
        ),
        *(
            Route(f"{prefix}.cmd.{name}", model, method.__get__(generating))
            for name, (model, method) in GENERATING_COMMANDS.items()
        ),
        Route(f"{prefix}.cmd.artifact.cache_preview", ca.CachePreview, previews.cache),
        Route(f"{prefix}.cmd.job.request", cj.RequestJob, jobs.request),
        *(
            Route(f"{prefix}.query.{name}", model, query(read_models, handler, previews))
            for name, (model, read_models, handler) in PREVIEW_QUERIES.items()
        ),
        Route(f"{prefix}.cmd.user.erase", c.EraseUser, erase),
        # Any caller may read the digests: they reveal only hashes and counts.
        Route(f"{prefix}.query.audit.digests", a.ListDigests, query([], Digests.list, Digests(queries, bus.store.mapper))),
    ]
