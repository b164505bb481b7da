"""Query handlers of human in the loop: a run's status, the caller's paused runs; due runs for the sweeper."""

from __future__ import annotations

from typing import Any

from services.contract.errors import ChronicleError
from services.contract.hitl import GetRun, ListRuns
from services.runtime.read_models import Queries, page

RUN_COLUMNS = (
    "run_id, conversation_id, status, step, checkpoint_type, prompt, data, conversation_mode, paused_at,"
    " expires_at, resumed_at, expired_at, approved, edits, feedback"
)


async def get_run(queries: Queries, user: str, q: GetRun) -> dict[str, Any]:
    row = await queries.fetch_one(
        "SELECT " + RUN_COLUMNS + ", count(*) OVER () AS checkpoints FROM rm_hitl.checkpoints"
        " WHERE run_id = %s AND owner = %s ORDER BY seq DESC LIMIT 1",
        (q.run_id, user),
    )
    if row is None:
        raise ChronicleError("not_found", f"run {q.run_id} not found")
    return row


async def list_runs(queries: Queries, user: str, q: ListRuns) -> dict[str, Any]:
    rows = await queries.fetch_all(
        "SELECT " + RUN_COLUMNS + ", 1 AS checkpoints, count(*) OVER () AS total FROM rm_hitl.checkpoints"
        " WHERE owner = %s AND status = 'paused' ORDER BY paused_at, run_id LIMIT %s OFFSET %s",
        (user, q.limit, q.offset),
    )
    return page(rows, q.limit, q.offset)


async def due_runs(queries: Queries, limit: int = 100) -> list[dict[str, Any]]:
    """Paused checkpoints whose expiry has passed, for the sweeper (not scoped: internal)."""
    return await queries.fetch_all(
        "SELECT run_id, owner FROM rm_hitl.checkpoints WHERE status = 'paused' AND expires_at <= now()"
        " ORDER BY expires_at LIMIT %s",
        (limit,),
    )

