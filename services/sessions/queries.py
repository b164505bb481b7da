"""Query handlers of sessions, scoped to the caller like every query."""

from __future__ import annotations

from typing import Any

from chronicle_contract.base import Page
from chronicle_contract.sessions import GetSession, ListSessions, SessionView
from psycopg.sql import SQL

from services.ports.read_models import Queries, not_found
from services.ports.sealing import UserSeal
from services.runtime.paging import Order, page_of
from services.runtime.replies import Wire

SESSION_COLUMNS = (
    "s.id, s.name, s.description, s.kind, s.tags, s.status, s.conversation_count,"
    " coalesce(st.artifact_count, 0) AS artifact_count, coalesce(st.total_tokens, 0) AS total_tokens,"
    " s.created_at, s.updated_at"
)


SESSIONS = "rm_history.sessions s LEFT JOIN rm_stats.sessions st ON st.session_id = s.id"


async def list_sessions(queries: Queries, user: str, q: ListSessions) -> Wire[Page[SessionView]]:
    inner = SQL(
        "SELECT " + SESSION_COLUMNS + ", s.created_at AS page_key, s.id AS page_id FROM " + SESSIONS +
        " WHERE s.owner = %(user)s AND (%(kind)s::text IS NULL OR s.kind = %(kind)s)"
    )
    params = {"user": user, "kind": q.kind}
    page = await page_of(queries, user, NEWEST_SESSIONS, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor)
    if page["items"]:
        seal = await queries.sealing.of(user)
        page["items"] = [opened_session(seal, row) for row in page["items"]]
    return Wire(page)


def opened_session(seal: UserSeal | None, row: dict[str, Any]) -> dict[str, Any]:
    """A session row's sealed columns opened, in place (rows of a user without a key: none)."""
    if seal is None:
        raise not_found("session", row["id"])
    row["name"], row["description"] = seal.open(row["name"]), seal.open(row["description"])
    row["tags"] = seal.open_json(row["tags"])
    return row


NEWEST_SESSIONS = Order("sessions", "timestamptz")


async def get_session(queries: Queries, user: str, q: GetSession) -> Wire[SessionView]:
    row = await queries.fetch_one(
        "SELECT " + SESSION_COLUMNS + " FROM " + SESSIONS + " WHERE s.id = %s AND s.owner = %s",
        (q.session_id, user),
    )
    if row is None:
        raise not_found("session", q.session_id)
    return Wire(opened_session(await queries.sealing.of(user), row))

