"""The subject table: which NATS subject runs which command or query."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from adapters.nats_service import Route
from services import contract as c
from services import contract_audit as a
from services import contract_optimization as o
from services import queries_optimization as qo
from services.command_bus import CommandBus
from services.commands import COMMANDS
from services.digests import Digests
from services.erasure import ADMIN, erase_user
from services.errors import ChronicleError
from services.positions import ProjectionPositions
from services.queries import Queries
from services.queries_audit import Audit

QueryFn = Callable[[Queries, str, Any], Awaitable[dict[str, Any]]]

# query subject suffix -> (request model, read models it needs, handler)
QUERIES: dict[str, tuple[type[c.Query], list[str], QueryFn]] = {
    "sessions.list": (c.ListSessions, ["history"], Queries.list_sessions),
    "sessions.get": (c.GetSession, ["history"], Queries.get_session),
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
}


# audit subject suffix -> (request model, read models it needs, Audit method)
AUDIT_QUERIES: dict[str, tuple[type[c.Query], list[str], Any]] = {
    "audit.stream": (a.AuditStream, [], Audit.stream),
    "audit.timeline": (a.AuditTimeline, ["audit"], Audit.timeline),
}


def routes(
    prefix: str, bus: CommandBus, queries: Queries, positions: ProjectionPositions, wait_timeout: float
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
        Route(f"{prefix}.cmd.user.erase", c.EraseUser, erase),
        # Any caller may read the digests: they reveal only hashes and counts.
        Route(f"{prefix}.query.audit.digests", a.ListDigests, query([], Digests.list, Digests(queries, bus.store.mapper))),
    ]
