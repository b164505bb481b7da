"""Query handlers of human in the loop: a run's status, the caller's paused runs; due runs for the sweeper."""

from __future__ import annotations

from typing import Any

from chronicle_contract.base import Page
from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import GetRun, ListRuns, RunStatus
from psycopg.sql import SQL

from services.ports.read_models import Queries
from services.ports.sealing import UserSeal
from services.runtime.paging import Order, page_of
from services.runtime.replies import Wire

RUN_COLUMNS = (
    "run_id, conversation_id, status, step, checkpoint_type, prompt, data, conversation_mode, paused_at,"
    " expires_at, resumed_at, expired_at, approved, edits, feedback"
)


async def get_run(queries: Queries, user: str, q: GetRun) -> Wire[RunStatus]:
    row = await queries.fetch_one(
        "SELECT " + RUN_COLUMNS + ", count(*) OVER () AS checkpoints FROM rm_hitl.checkpoints"
        " WHERE run_id = %s AND owner = %s ORDER BY seq DESC LIMIT 1",
        (q.run_id, user),
    )
    seal = await queries.sealing.of(user) if row is not None else None
    if row is None or seal is None:
        raise ChronicleError("not_found", f"run {q.run_id} not found")
    return Wire(opened_run(seal, row))


async def list_runs(queries: Queries, user: str, q: ListRuns) -> Wire[Page[RunStatus]]:
    inner = SQL(
        "SELECT " + RUN_COLUMNS + ", 1 AS checkpoints, paused_at AS page_key, run_id AS page_id FROM rm_hitl.checkpoints"
        " WHERE owner = %(user)s AND status = 'paused'"
    )
    page = await page_of(queries, user, OLDEST_PAUSED, inner, {"user": user}, limit=q.limit, offset=q.offset, cursor=q.cursor)
    seal = await queries.sealing.of(user) if page["items"] else None
    page["items"] = [opened_run(seal, row) for row in page["items"] if seal is not None]
    return Wire(page)


def opened_run(seal: UserSeal, row: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint row's sealed columns opened, in place."""
    row["step"], row["prompt"], row["feedback"] = seal.open(row["step"]), seal.open(row["prompt"]), seal.open(row["feedback"])
    row["data"], row["edits"] = seal.open_json(row["data"]), seal.open_json(row["edits"])
    return row


OLDEST_PAUSED = Order("paused_runs", "timestamptz", id_type="text", descending=False)


async def due_runs(queries: Queries, limit: int = 100) -> list[dict[str, Any]]:
    """Paused checkpoints whose expiry has passed, for the sweeper (not scoped: internal)."""
    return await queries.fetch_all(
        "SELECT run_id, owner FROM rm_hitl.checkpoints WHERE status = 'paused' AND expires_at <= now()"
        " ORDER BY expires_at LIMIT %s",
        (limit,),
    )

