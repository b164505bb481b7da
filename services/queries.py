"""Query handlers: read models only, always scoped to the caller, via the async driver."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import orjson
import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composed, Identifier
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from services import contract as c
from services.errors import ChronicleError

SESSION_COLUMNS = (
    "s.id, s.name, s.description, s.kind, s.tags, s.status, s.conversation_count,"
    " coalesce(st.artifact_count, 0) AS artifact_count, coalesce(st.total_tokens, 0) AS total_tokens,"
    " s.created_at, s.updated_at"
)
SESSIONS = "rm_history.sessions s LEFT JOIN rm_stats.sessions st ON st.session_id = s.id"
CONVERSATION_COLUMNS = (
    "id, title, tags, session_id, message_count, first_message, created_at, updated_at"
)


async def read_json_with_orjson(conn: psycopg.AsyncConnection) -> None:
    # jsonb turns a float like 1e20 into the integer 100000000000000000000, which the
    # orjson reply encoder refuses; orjson's own parser reads it back as the float it was.
    set_json_loads(orjson.loads, conn)


def query_pool(url: str, *, min_size: int = 1, max_size: int = 1) -> AsyncConnectionPool:
    """The connections `Queries` reads through (open it before use). In autocommit: every
    read is one statement, and in a transaction each took three round trips (BEGIN, the
    query, the COMMIT as the pool took it back; a small query's p50 0.39 -> 0.19 ms)."""
    return AsyncConnectionPool(
        url, min_size=min_size, max_size=max_size, open=False, kwargs={"autocommit": True},
        configure=read_json_with_orjson,
    )


def not_found(kind: str, ident: UUID) -> ChronicleError:
    return ChronicleError("not_found", f"{kind} {ident} not found")


class Queries:
    def __init__(self, pool: AsyncConnectionPool, *, language: str = "english"):
        self.pool = pool
        self.language = language

    async def fetch_all(self, query: Any, params: Any) -> list[dict[str, Any]]:
        # Pooled connections are not pinged before use (a round trip per query); a read
        # that meets a dropped one is simply tried once more on another.
        for attempt in (1, 2):
            try:
                async with self.pool.connection() as conn:
                    cur = conn.cursor(row_factory=dict_row)
                    await cur.execute(query, params, prepare=True)
                    return await cur.fetchall()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def fetch_one(self, query: Any, params: Any) -> dict[str, Any] | None:
        rows = await self.fetch_all(query, params)
        return rows[0] if rows else None

    # --- sessions -------------------------------------------------------------------------

    async def list_sessions(self, user: str, q: c.ListSessions) -> dict[str, Any]:
        rows = await self.fetch_all(
            "SELECT " + SESSION_COLUMNS + ", count(*) OVER () AS total FROM " + SESSIONS +
            " WHERE s.owner = %(user)s AND (%(kind)s::text IS NULL OR s.kind = %(kind)s)"
            " ORDER BY s.created_at DESC, s.id LIMIT %(limit)s OFFSET %(offset)s",
            {"user": user, "kind": q.kind, "limit": q.limit, "offset": q.offset},
        )
        return page(rows, q.limit, q.offset)

    async def get_session(self, user: str, q: c.GetSession) -> dict[str, Any]:
        row = await self.fetch_one(
            "SELECT " + SESSION_COLUMNS + " FROM " + SESSIONS + " WHERE s.id = %s AND s.owner = %s",
            (q.session_id, user),
        )
        if row is None:
            raise not_found("session", q.session_id)
        return row

    # --- conversations --------------------------------------------------------------------

    async def list_conversations(self, user: str, q: c.ListConversations) -> dict[str, Any]:
        # Only the filters given reach the WHERE clause: a prepared statement with
        # "tags @> '{}'" gets a generic plan that scans the tags index for every call.
        # sort_by and order are closed Literals: they become identifiers and keywords.
        where = conversation_filters(q)
        order = SQL("DESC" if q.order == "desc" else "ASC")
        query = SQL(
            "SELECT " + CONVERSATION_COLUMNS + ", count(*) OVER () AS total FROM rm_history.conversations"
            " WHERE {where} ORDER BY {sort} {order}, id {order} LIMIT %(limit)s OFFSET %(offset)s"
        ).format(where=where, sort=Identifier(q.sort_by), order=order)
        params = {"user": user, "tags": q.tags, "session": q.session_id, "limit": q.limit, "offset": q.offset}
        rows = await self.fetch_all(query, params)
        if not rows and q.offset:
            count = SQL("SELECT count(*) AS total FROM rm_history.conversations WHERE {where}").format(where=where)
            total = await self.fetch_one(count, params)
            return {"items": [], "total": total["total"] if total else 0, "limit": q.limit, "offset": q.offset}
        return page(rows, q.limit, q.offset)

    async def get_conversation(self, user: str, conversation_id: UUID) -> dict[str, Any]:
        conversation = await self.fetch_one(
            "SELECT " + CONVERSATION_COLUMNS + ", document_context, embedding_provider"
            " FROM rm_history.conversations WHERE id = %s AND owner = %s",
            (conversation_id, user),
        )
        if conversation is None:
            raise not_found("conversation", conversation_id)
        conversation["messages"] = await self.fetch_all(
            "SELECT id, role, content, metadata, pinned, message_type, created_at"
            " FROM rm_history.messages WHERE conversation_id = %s ORDER BY seq",
            (conversation_id,),
        )
        return conversation

    async def search_conversations(self, user: str, q: c.SearchConversations) -> dict[str, Any]:
        # The owner lexeme is ANDed into the query so the GIN index returns only the
        # caller's documents (the owner column check is the guarantee, the lexeme the
        # speed); ts_rank then scores just those, and ts_headline runs only on the page.
        rows = await self.fetch_all(
            """
            WITH query AS (
                SELECT websearch_to_tsquery(%(language)s::regconfig, %(q)s) AS words,
                       quote_literal('OWNER ' || md5(%(user)s))::tsquery AS mine
            ),
            hits AS (
                SELECT m.conversation_id, m.id AS message_id, m.content AS text, m.created_at,
                       ts_rank(m.tsv, query.words) AS score
                FROM rm_search.messages m, query
                WHERE m.tsv @@ (query.words && query.mine) AND m.owner = %(user)s
                  AND numnode(query.words) > 0
                UNION ALL
                SELECT c.id, NULL, c.title, c.created_at, ts_rank(c.tsv, query.words) * 2
                FROM rm_search.conversations c, query
                WHERE c.tsv @@ (query.words && query.mine) AND c.owner = %(user)s
                  AND numnode(query.words) > 0
            ),
            best AS (
                SELECT * FROM hits ORDER BY score DESC, created_at DESC LIMIT %(limit)s
            )
            SELECT best.conversation_id, sc.title, best.message_id, best.created_at,
                   ts_headline(%(language)s::regconfig, best.text, query.words,
                               'StartSel=<mark>, StopSel=</mark>, MaxWords=30, MinWords=10') AS snippet
            FROM best JOIN rm_search.conversations sc ON sc.id = best.conversation_id, query
            ORDER BY best.score DESC, best.created_at DESC
            """,
            {"language": self.language, "q": q.q, "user": user, "limit": q.limit},
        )
        for rank, row in enumerate(rows, start=1):
            row["rank"] = rank
        return {"items": rows, "query": q.q}

    async def conversation_stats(self, user: str, q: c.ConversationStatsQuery) -> dict[str, Any]:
        totals = await self.fetch_one(
            "SELECT coalesce(u.conversations, 0) AS total_conversations, coalesce(u.messages, 0) AS total_messages,"
            " (SELECT min(created_at) FROM rm_stats.conversations WHERE owner = %(user)s) AS first_conversation_at,"
            " (SELECT max(created_at) FROM rm_stats.conversations WHERE owner = %(user)s) AS last_conversation_at"
            " FROM (SELECT 1) one LEFT JOIN rm_stats.users u ON u.owner = %(user)s",
            {"user": user},
        )
        assert totals is not None
        tags = await self.fetch_all(
            "SELECT tag, count FROM rm_stats.tags WHERE owner = %s AND count > 0"
            " ORDER BY count DESC, tag LIMIT %s",
            (user, q.top_tags),
        )
        conversations = totals["total_conversations"]
        totals["average_messages"] = round(totals["total_messages"] / conversations, 2) if conversations else 0.0
        totals["top_tags"] = tags
        return totals

    # --- human in the loop -----------------------------------------------------------------

    async def get_run(self, user: str, q: c.GetRun) -> dict[str, Any]:
        row = await self.fetch_one(
            "SELECT " + RUN_COLUMNS + ", count(*) OVER () AS checkpoints FROM rm_hitl.checkpoints"
            " WHERE run_id = %s AND owner = %s ORDER BY seq DESC LIMIT 1",
            (q.run_id, user),
        )
        if row is None:
            raise ChronicleError("not_found", f"run {q.run_id} not found")
        return row

    async def list_runs(self, user: str, q: c.ListRuns) -> dict[str, Any]:
        rows = await self.fetch_all(
            "SELECT " + RUN_COLUMNS + ", 1 AS checkpoints, count(*) OVER () AS total FROM rm_hitl.checkpoints"
            " WHERE owner = %s AND status = 'paused' ORDER BY paused_at, run_id LIMIT %s OFFSET %s",
            (user, q.limit, q.offset),
        )
        return page(rows, q.limit, q.offset)

    async def due_runs(self, limit: int = 100) -> list[dict[str, Any]]:
        """Paused checkpoints whose expiry has passed, for the sweeper (not scoped: internal)."""
        return await self.fetch_all(
            "SELECT run_id, owner FROM rm_hitl.checkpoints WHERE status = 'paused' AND expires_at <= now()"
            " ORDER BY expires_at LIMIT %s",
            (limit,),
        )

    async def export_conversation(self, user: str, q: c.ExportConversation) -> dict[str, Any]:
        conversation = await self.get_conversation(user, q.conversation_id)
        if q.format == "json":
            content = orjson.dumps(conversation, option=orjson.OPT_INDENT_2).decode()
        else:
            content = to_markdown(conversation)
        return {"format": q.format, "content": content}


RUN_COLUMNS = (
    "run_id, conversation_id, status, step, checkpoint_type, prompt, data, conversation_mode, paused_at,"
    " expires_at, resumed_at, expired_at, approved, edits, feedback"
)


def conversation_filters(q: c.ListConversations) -> Composed:
    conditions = [SQL("owner = %(user)s")]
    if q.tags:
        conditions.append(SQL("tags @> %(tags)s::text[]"))
    if q.session_id is not None:
        conditions.append(SQL("session_id = %(session)s"))
    return SQL(" AND ").join(conditions)


def page(rows: list[dict[str, Any]], limit: int, offset: int) -> dict[str, Any]:
    total = rows[0]["total"] if rows else 0
    for row in rows:
        del row["total"]
    return {"items": rows, "total": total, "limit": limit, "offset": offset}


def to_markdown(conversation: dict[str, Any]) -> str:
    lines = [f"# {conversation['title'] or 'Untitled conversation'}", ""]
    if conversation["tags"]:
        lines += ["Tags: " + ", ".join(conversation["tags"]), ""]
    lines += [f"Created: {conversation['created_at'].isoformat()}", ""]
    for message in conversation["messages"]:
        lines += [f"## {message['role']} · {message['created_at'].isoformat()}", "", message["content"], ""]
    return "\n".join(lines)
