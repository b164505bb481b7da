"""Query handlers of conversations: list, get, search, stats, export; scoped to the caller."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.base import Page
from chronicle_contract.conversations import (
    PAGE_BYTES,
    ConversationStats,
    ConversationStatsQuery,
    ConversationSummaryView,
    ConversationView,
    Export,
    ExportConversation,
    GetConversation,
    ListConversations,
    MessagePage,
    SearchConversations,
    SearchResults,
)
from psycopg.sql import SQL, Composed, Identifier

from services.ports.read_models import Queries, not_found
from services.runtime.cursors import invalid_cursor
from services.runtime.full_text import QUERY, fused, headline, mine_matching, ranked_search
from services.runtime.paging import Order, page_of
from services.runtime.replies import Wire

CONVERSATION_COLUMNS = (
    "id, title, tags, session_id, message_count, first_message, created_at, updated_at"
)


async def list_conversations(queries: Queries, user: str, q: ListConversations) -> Wire[Page[ConversationSummaryView]]:
    # Only the filters given reach the WHERE clause: a prepared statement with
    # "tags @> '{}'" gets a generic plan that scans the tags index for every call.
    # sort_by and order are closed Literals: they become identifiers and keywords.
    inner = SQL(
        "SELECT " + CONVERSATION_COLUMNS + ", {sort} AS page_key, id AS page_id FROM rm_history.conversations"
        " WHERE {where}"
    ).format(where=conversation_filters(q), sort=Identifier(q.sort_by))
    order = Order(f"conversations:{q.sort_by}:{q.order}", "text" if q.sort_by == "title" else "timestamptz",
                  descending=q.order == "desc")
    params = {"user": user, "tags": q.tags, "session": q.session_id}
    return Wire(await page_of(queries, user, order, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor))


async def get(queries: Queries, user: str, q: GetConversation) -> Wire[ConversationView]:
    return Wire(await get_conversation(queries, user, q.conversation_id, q.messages))


def messages_listing(conversation_id: UUID, order: str) -> str:
    """What a messages cursor is sealed for: one conversation's messages in one order."""
    return f"messages:{conversation_id}:{order}"


def encode_cursor(queries: Queries, user: str, conversation_id: UUID, seq: int, order: str) -> str:
    return queries.cursors.seal(user, messages_listing(conversation_id, order), str(seq).encode())


def decode_cursor(queries: Queries, user: str, conversation_id: UUID, cursor: str, order: str, field: str) -> int:
    """A page's next_cursor back to the message seq it continues from (`invalid` naming the
    field when it is not one, or was made for another conversation, order or user)."""
    sealed = queries.cursors.open(user, messages_listing(conversation_id, order), cursor, field=field)
    try:
        return int(sealed)
    except ValueError:  # (sealed by us, so never)
        raise invalid_cursor(field, "not a cursor this service gave you for this order") from None


async def get_conversation(
    queries: Queries, user: str, conversation_id: UUID, window: MessagePage | None = None, field: str = "messages.cursor"
) -> dict[str, Any]:
    """The conversation and one page of its messages (all of them when they fit one)."""
    window = window or MessagePage()
    conversation = await queries.fetch_one(
        "SELECT " + CONVERSATION_COLUMNS + ", document_context, embedding_provider"
        " FROM rm_history.conversations WHERE id = %s AND owner = %s",
        (conversation_id, user),
    )
    if conversation is None:
        raise not_found("conversation", conversation_id)
    newest = window.order == "newest"
    after = (
        decode_cursor(queries, user, conversation_id, window.cursor, window.order, field)
        if window.cursor else (2**63 - 1 if newest else -1)
    )
    rows = await queries.fetch_all(
        "SELECT id, role, content, metadata, pinned, message_type, created_at, seq,"
        " length(content) + length(metadata::text) AS size"
        " FROM rm_history.messages WHERE conversation_id = %s"
        + (" AND seq < %s ORDER BY seq DESC" if newest else " AND seq > %s ORDER BY seq")
        + " LIMIT %s",
        (conversation_id, after, window.limit + 1),
    )
    taken: list[dict[str, Any]] = []
    size = 0
    for row in rows[: window.limit]:
        size += row["size"]
        if taken and size > PAGE_BYTES:
            break
        taken.append(row)
    more = len(taken) < len(rows)
    conversation["next_cursor"] = (
        encode_cursor(queries, user, conversation_id, taken[-1]["seq"], window.order) if more else None
    )
    for row in taken:
        del row["seq"], row["size"]
    conversation["messages"] = taken[::-1] if newest else taken
    return conversation


# Messages and titles matching the words; a title match counts double.
TEXT_MATCHES = SQL("""
    SELECT m.conversation_id, m.id AS message_id, m.content AS text, m.created_at, ts_rank(m.tsv, query.words) AS score
    FROM rm_search.messages m, query WHERE {mine_m}
    UNION ALL
    SELECT c.id, NULL, c.title, c.created_at, ts_rank(c.tsv, query.words) * 2
    FROM rm_search.conversations c, query WHERE {mine_c}
""").format(mine_m=mine_matching("m"), mine_c=mine_matching("c"))

CONVERSATION_HITS_TEXT = SQL("""
    WITH {query},
    hits AS ({matches}),
    best AS (
        SELECT * FROM hits ORDER BY score DESC, created_at DESC LIMIT %(limit)s
    )
    SELECT best.conversation_id, sc.title, best.message_id, best.created_at, {snippet}, ARRAY['text'] AS matched_by
    FROM best JOIN rm_search.conversations sc ON sc.id = best.conversation_id, query
    ORDER BY best.score DESC, best.created_at DESC
""").format(query=QUERY, matches=TEXT_MATCHES, snippet=headline(SQL("best.text")))

CONVERSATION_HITS_HYBRID = SQL("""
    WITH {query},
    text_hits AS (
        SELECT conversation_id, message_id, row_number() OVER (ORDER BY score DESC, created_at DESC) AS r
        FROM ({matches}) t ORDER BY r LIMIT %(candidates)s
    ),
    near AS (
        (SELECT m.conversation_id, m.id AS message_id, m.embedding <=> %(vector)s::vector AS distance
         FROM rm_semantic.messages m WHERE m.owner = %(user)s ORDER BY distance LIMIT %(candidates)s)
        UNION ALL
        (SELECT c.id, NULL, c.embedding <=> %(vector)s::vector AS distance
         FROM rm_semantic.conversations c WHERE c.owner = %(user)s ORDER BY distance LIMIT %(candidates)s)
    ),
    vector_hits AS (
        SELECT conversation_id, message_id, row_number() OVER (ORDER BY distance) AS r
        FROM near WHERE distance <= %(max_distance)s ORDER BY r LIMIT %(candidates)s
    ),
    {fused}
    SELECT f.conversation_id, sc.title, f.message_id, coalesce(m.created_at, sc.created_at) AS created_at,
           {snippet}, f.matched_by
    FROM fused f JOIN rm_search.conversations sc ON sc.id = f.conversation_id
    LEFT JOIN rm_search.messages m ON m.conversation_id = f.conversation_id AND m.id = f.message_id, query
    ORDER BY f.score DESC, 4 DESC
""").format(
    query=QUERY, matches=TEXT_MATCHES, fused=fused("conversation_id, message_id"),
    snippet=headline(SQL("coalesce(m.content, sc.title)")),
)


async def search_conversations(queries: Queries, user: str, q: SearchConversations) -> Wire[SearchResults]:
    """Messages and titles matching the words or meaning much the same, best first."""
    return Wire(await ranked_search(queries, CONVERSATION_HITS_TEXT, user, q.q, q.limit, hybrid=CONVERSATION_HITS_HYBRID))


async def conversation_stats(queries: Queries, user: str, q: ConversationStatsQuery) -> Wire[ConversationStats]:
    totals = await queries.fetch_one(
        "SELECT coalesce(u.conversations, 0) AS total_conversations, coalesce(u.messages, 0) AS total_messages,"
        " (SELECT min(created_at) FROM rm_stats.conversations WHERE owner = %(user)s) AS first_conversation_at,"
        " (SELECT max(created_at) FROM rm_stats.conversations WHERE owner = %(user)s) AS last_conversation_at"
        " FROM (SELECT 1) one LEFT JOIN rm_stats.users u ON u.owner = %(user)s",
        {"user": user},
    )
    assert totals is not None
    tags = await queries.fetch_all(
        "SELECT tag, count FROM rm_stats.tags WHERE owner = %s AND count > 0"
        " ORDER BY count DESC, tag LIMIT %s",
        (user, q.top_tags),
    )
    conversations = totals["total_conversations"]
    totals["average_messages"] = round(totals["total_messages"] / conversations, 2) if conversations else 0.0
    totals["top_tags"] = tags
    return Wire(totals)


async def export_conversation(queries: Queries, user: str, q: ExportConversation) -> Export:
    """One part of the export: the conversation with one page of its messages (the
    client joins the parts: clients/python/chronicle_client/connection.py)."""
    page = MessagePage(cursor=q.cursor)
    conversation = await get_conversation(queries, user, q.conversation_id, page, field="cursor")
    next_cursor = conversation.pop("next_cursor")
    if q.format == "json":
        content = orjson.dumps(conversation, option=orjson.OPT_INDENT_2).decode()
    else:
        content = to_markdown(conversation, heading=q.cursor is None)
    return Export(format=q.format, content=content, next_cursor=next_cursor)


def conversation_filters(q: ListConversations) -> Composed:
    conditions = [SQL("owner = %(user)s")]
    if q.tags:
        conditions.append(SQL("tags @> %(tags)s::text[]"))
    if q.session_id is not None:
        conditions.append(SQL("session_id = %(session)s"))
    return SQL(" AND ").join(conditions)


def to_markdown(conversation: dict[str, Any], *, heading: bool = True) -> str:
    """Markdown of the conversation's messages, after its heading unless `heading` is off
    (a later part of an export)."""
    lines: list[str] = []
    if heading:
        lines += [f"# {conversation['title'] or 'Untitled conversation'}", ""]
        if conversation["tags"]:
            lines += ["Tags: " + ", ".join(conversation["tags"]), ""]
        lines += [f"Created: {conversation['created_at'].isoformat()}", ""]
    for message in conversation["messages"]:
        lines += [f"## {message['role']} · {message['created_at'].isoformat()}", "", message["content"], ""]
    return "\n".join(lines)

