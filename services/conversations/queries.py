"""Query handlers of conversations: list, get, search, stats, export; scoped to the caller."""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable
from typing import Any
from uuid import UUID

import orjson
import psycopg
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
from chronicle_contract.errors import ChronicleError
from psycopg.sql import SQL, Composed, Identifier

from services.ports.read_models import Queries, not_found
from services.ports.sealing import UserSeal, tag_terms
from services.runtime.cursors import invalid_cursor
from services.runtime.full_text import QUERY, fused, headlines, mine_matching, ranked_search
from services.runtime.paging import Order, opened, page_of, sealed
from services.runtime.replies import Wire

CONVERSATION_COLUMNS = (
    "id, title, tags, session_id, message_count, first_message, created_at, updated_at"
)
CONVERSATION_DETAILS = ("document_context", "embedding_provider")  # (read by a get, not by a list)


# A list sorted by title is sorted in the service, over the caller's titles opened: at most
# this many conversations (those the filters leave), beyond which the sort is refused.
MAX_TITLE_SORTED = 20_000


async def list_conversations(queries: Queries, user: str, q: ListConversations) -> Wire[Page[ConversationSummaryView]]:
    order = Order(f"conversations:{q.sort_by}:{q.order}", "text" if q.sort_by == "title" else "timestamptz",
                  descending=q.order == "desc")
    seal = await queries.sealing.of(user)
    if seal is None:  # (no key: nothing written, or erased)
        if q.cursor is not None:
            opened(queries, user, order, q.cursor)  # (a foreign cursor is still invalid)
        return Wire({"items": [], "total": 0, "limit": q.limit, "offset": q.offset, "next_cursor": None})
    params = {"user": user, "tags": tag_terms(seal, q.tags or []), "session": q.session_id}
    if q.sort_by == "title":
        page = await page_by_title(queries, user, seal, order, q, params)
    else:
        # Only the filters given reach the WHERE clause: a prepared statement with
        # "tags @> '{}'" gets a generic plan that scans the tags index for every call.
        # sort_by and order are closed Literals: they become identifiers and keywords.
        inner = SQL(
            "SELECT " + CONVERSATION_COLUMNS + ", {sort} AS page_key, id AS page_id FROM rm_history.conversations"
            " WHERE {where}"
        ).format(where=conversation_filters(q), sort=Identifier(q.sort_by))
        page = await page_of(queries, user, order, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor)
    for row in page["items"]:
        open_conversation(seal, row)
    return Wire(page)


async def page_by_title(
    queries: Queries, user: str, seal: UserSeal, order: Order, q: ListConversations, params: dict[str, Any]
) -> dict[str, Any]:
    """A page of the list sorted by title (then id), as `page_of` gives one: titles are
    sealed, so the caller's (filtered) titles are read and opened, sorted here, and the
    page's rows read by id. Its cost grows with the caller's conversations, not the page."""
    after = opened(queries, user, order, q.cursor) if q.cursor is not None else None
    titles = await queries.fetch_all(
        SQL("SELECT id, title FROM rm_history.conversations WHERE {where} LIMIT %(most)s").format(
            where=conversation_filters(q)
        ),
        params | {"most": MAX_TITLE_SORTED + 1},
    )
    if len(titles) > MAX_TITLE_SORTED:
        rule = f"at most {MAX_TITLE_SORTED} conversations sort by title: filter by tags or session"
        raise ChronicleError("invalid", rule, [{"field": "sort_by", "rule": "title_sort_limit", "message": rule}])
    keyed = sorted(((seal.open(row["title"]) or "", row["id"]) for row in titles), reverse=order.descending)
    if after is not None:
        after_key = (after[0], as_uuid(after[1]))
        keyed = [k for k in keyed if (k < after_key if order.descending else k > after_key)]
    window = keyed[q.offset : q.offset + q.limit + 1]
    taken, more = window[: q.limit], len(window) > q.limit
    rows = await queries.fetch_all(
        "SELECT " + CONVERSATION_COLUMNS + " FROM rm_history.conversations WHERE owner = %s AND id = ANY(%s)",
        (user, [ident for _, ident in taken]),
    )
    by_id = {row["id"]: row for row in rows}
    items = [by_id[ident] for _, ident in taken if ident in by_id]
    next_cursor = sealed(queries, user, order, *taken[-1]) if more else None
    return {"items": items, "total": len(titles), "limit": q.limit, "offset": q.offset, "next_cursor": next_cursor}


def as_uuid(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:  # (sealed by us, so never)
        raise invalid_cursor("cursor", "not a cursor this service gave you for this list and order") from None


def open_conversation(seal: UserSeal, row: dict[str, Any]) -> None:
    """A conversation row's sealed columns opened, in place."""
    row["title"] = seal.open(row["title"])
    row["tags"] = seal.open_json(row["tags"])
    row["first_message"] = seal.open(row["first_message"])
    if "document_context" in row:
        row["document_context"] = seal.open_json(row["document_context"])


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
    queries: Queries, user: str, conversation_id: UUID, window: MessagePage | None = None, field: str = "messages.cursor",
    *, decoded: bool = False,
) -> dict[str, Any]:
    """The conversation and one page of its messages (all of them when they fit one), each
    message as the wire carries it (JSON), or as a dict when `decoded` (an export's)."""
    window = window or MessagePage()
    seal = await queries.sealing.of(user)
    if seal is None:
        raise not_found("conversation", conversation_id)
    newest = window.order == "newest"
    after = (
        decode_cursor(queries, user, conversation_id, window.cursor, window.order, field)
        if window.cursor else (2**63 - 1 if newest else -1)
    )
    # The read model's current version first; until an upgrade's rebuild of it is done,
    # the version before answers (its columns are another set).
    for tried, shape in enumerate(MESSAGE_SHAPES, 1):
        try:
            found = await queries.fetch_all(
                conversation_with_page(shape[0], newest),
                {"after": after, "limit": window.limit + 1, "id": conversation_id, "user": user}, binary=True,
            )
            break
        except psycopg.errors.UndefinedColumn:
            if tried == len(MESSAGE_SHAPES):
                raise
    opened_messages = shape[1]
    if not found:
        raise not_found("conversation", conversation_id)
    conversation = found[0]
    columns = [conversation.pop(f"m{n}")[: window.limit] for n in range(len(shape[0].split(", ")))]
    seqs = conversation.pop("seqs")
    open_conversation(seal, conversation)
    messages, counted = opened_messages(seal, columns, decoded)
    last_seq = seqs[counted - 1] if counted else 0
    more = counted < len(seqs)
    conversation["next_cursor"] = encode_cursor(queries, user, conversation_id, last_seq, window.order) if more else None
    conversation["messages"] = messages[::-1] if newest else messages
    return conversation


def fitting(sizes: list[int]) -> int:
    """How many messages of a page (their sizes, in page order) it holds: those within
    PAGE_BYTES, and the first one whatever its size."""
    return max(min(1, len(sizes)), bisect.bisect_right(list(itertools.accumulate(sizes)), PAGE_BYTES))


def _opened_whole(seal: UserSeal, columns: list[list[Any]], decoded: bool) -> tuple[list[Any], int]:
    """Version 4: each message's JSON as sealed, as the reply carries it (a dict when
    `decoded`); only those the page holds are opened. A message whose owner was erased
    before it was written (None) counts, and is left out."""
    sealed = columns[0]
    counted = fitting(list(map(seal.opened_size, sealed)))
    opened = filter(None, map(seal.open_bytes, sealed[:counted]))
    return list(map(orjson.loads if decoded else orjson.Fragment, opened)), counted


def _opened_together(seal: UserSeal, columns: list[list[Any]], decoded: bool) -> tuple[list[Any], int]:
    """Version 3: content and metadata sealed together (JSON [content, metadata]) beside
    the message's other columns."""
    counted = fitting(list(map(seal.opened_size, columns[2])))
    messages = []
    for message_id, role, body, pinned, message_type, created_at in list(zip(*columns, strict=True))[:counted]:
        opened = seal.open_bytes(body)
        content, metadata = orjson.loads(opened) if opened is not None else ("", None)
        messages.append({"id": message_id, "role": role, "content": content, "metadata": metadata, "pinned": pinned,
                         "message_type": message_type, "created_at": created_at})
    return messages, counted


def _opened_apart(seal: UserSeal, columns: list[list[Any]], decoded: bool) -> tuple[list[Any], int]:
    """Version 2: content and metadata sealed apart."""
    counted = fitting([seal.opened_size(content) + seal.opened_size(metadata)
                       for content, metadata in zip(columns[2], columns[3], strict=True)])
    messages = []
    for message_id, role, sealed_content, sealed_metadata, pinned, message_type, created_at in list(
        zip(*columns, strict=True)
    )[:counted]:
        content, metadata = seal.open(sealed_content) or "", seal.open(sealed_metadata) or "null"
        messages.append({"id": message_id, "role": role, "content": content, "metadata": orjson.loads(metadata),
                         "pinned": pinned, "message_type": message_type, "created_at": created_at})
    return messages, counted


@functools.cache
def conversation_with_page(message_columns: str, newest: bool) -> str:
    """The caller's conversation and one page of its messages in one row, each message
    column an array in page order (`m0`, `m1` ..., then `seqs`; an ARRAY of a subquery
    keeps its ORDER BY), read only once the conversation is the user's: one statement,
    whose one row costs the service about half the CPU of two statements' rows (the
    conversation, then a row per message) in one pipeline, and Postgres about the same.
    Parameters: `after` (the seq the page starts after), `limit`, `id`, `user`."""
    page = (" FROM rm_history.messages WHERE conversation_id = c.id"
            + (" AND seq < %(after)s ORDER BY seq DESC" if newest else " AND seq > %(after)s ORDER BY seq")
            + " LIMIT %(limit)s)")
    arrays = [f"ARRAY(SELECT {column}{page} AS m{n}" for n, column in enumerate(message_columns.split(", "))]
    return (
        "SELECT " + CONVERSATION_COLUMNS + ", " + ", ".join([*CONVERSATION_DETAILS, *arrays])
        + ", ARRAY(SELECT seq" + page + " AS seqs"
        " FROM rm_history.conversations c WHERE c.id = %(id)s AND c.owner = %(user)s"
    )


# A page's messages by the history read model's version, newest first: its columns (the id
# as text: as the reply carries it, without a uuid.UUID made per message) and their opener.
MESSAGE_SHAPES: tuple[tuple[str, Callable[[UserSeal, list[list[Any]], bool], tuple[list[Any], int]]], ...] = (
    ("message", _opened_whole),
    ("id::text, role, body, pinned, message_type, created_at", _opened_together),
    ("id::text, role, content, metadata, pinned, message_type, created_at", _opened_apart),
)


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
    SELECT best.conversation_id, sc.title, best.message_id, best.created_at, best.text AS snippet,
           ARRAY['text'] AS matched_by
    FROM best JOIN rm_search.conversations sc ON sc.id = best.conversation_id
    ORDER BY best.score DESC, best.created_at DESC
""").format(query=QUERY, matches=TEXT_MATCHES)

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
           coalesce(m.content, sc.title) AS snippet, f.matched_by
    FROM fused f JOIN rm_search.conversations sc ON sc.id = f.conversation_id
    LEFT JOIN rm_search.messages m ON m.conversation_id = f.conversation_id AND m.id = f.message_id
    ORDER BY f.score DESC, 4 DESC
""").format(query=QUERY, matches=TEXT_MATCHES, fused=fused("conversation_id, message_id"))


async def search_conversations(queries: Queries, user: str, q: SearchConversations) -> Wire[SearchResults]:
    """Messages and titles matching the words or meaning much the same, best first."""
    return Wire(await ranked_search(
        queries, CONVERSATION_HITS_TEXT, user, q.q, q.limit, hybrid=CONVERSATION_HITS_HYBRID, opening=open_hits
    ))


async def open_hits(queries: Queries, seal: UserSeal, words: str, hits: list[dict[str, Any]]) -> None:
    """Each hit's title opened, and its snippet made from its text (a message's or the title) opened."""
    texts = [seal.open(hit["snippet"]) or "" for hit in hits]
    for hit, snippet in zip(hits, await headlines(queries, words, texts), strict=True):
        hit["title"], hit["snippet"] = seal.open(hit["title"]), snippet


async def conversation_stats(queries: Queries, user: str, q: ConversationStatsQuery) -> Wire[ConversationStats]:
    totals = await queries.fetch_one(
        "SELECT coalesce(u.conversations, 0) AS total_conversations, coalesce(u.messages, 0) AS total_messages,"
        " (SELECT min(created_at) FROM rm_stats.conversations WHERE owner = %(user)s) AS first_conversation_at,"
        " (SELECT max(created_at) FROM rm_stats.conversations WHERE owner = %(user)s) AS last_conversation_at"
        " FROM (SELECT 1) one LEFT JOIN rm_stats.users u ON u.owner = %(user)s",
        {"user": user},
    )
    assert totals is not None
    tags = await top_tags(queries, user, q.top_tags)
    conversations = totals["total_conversations"]
    totals["average_messages"] = round(totals["total_messages"] / conversations, 2) if conversations else 0.0
    totals["top_tags"] = tags
    return Wire(totals)


# Tags tied at the cut are ordered by name, which is sealed: the tags counted at least as
# often as the last one shown are read (at most this many) and ordered here.
MAX_TIED_TAGS = 10_000
TOP_TAGS = """
SELECT tag, count FROM rm_stats.tags WHERE owner = %(user)s AND count >= greatest(1, (
    SELECT count FROM rm_stats.tags WHERE owner = %(user)s AND count > 0 ORDER BY count DESC OFFSET %(cut)s LIMIT 1
)) ORDER BY count DESC LIMIT %(most)s
"""


async def top_tags(queries: Queries, user: str, top: int) -> list[dict[str, Any]]:
    """The caller's `top` most used tags, most used first, then by name."""
    rows = await queries.fetch_all(TOP_TAGS, {"user": user, "cut": top - 1, "most": MAX_TIED_TAGS})
    seal = await queries.sealing.of(user) if rows else None
    if seal is None:
        return []
    named = sorted((-row["count"], seal.open(row["tag"]) or "") for row in rows)
    return [{"tag": tag, "count": -negative} for negative, tag in named[:top]]


async def export_conversation(queries: Queries, user: str, q: ExportConversation) -> Export:
    """One part of the export: the conversation with one page of its messages (the
    client joins the parts: clients/python/chronicle_client/connection.py)."""
    page = MessagePage(cursor=q.cursor)
    conversation = await get_conversation(queries, user, q.conversation_id, page, field="cursor", decoded=True)
    next_cursor = conversation.pop("next_cursor")
    if q.format == "json":
        content = orjson.dumps(conversation, option=orjson.OPT_INDENT_2).decode()
    else:
        content = to_markdown(conversation, heading=q.cursor is None)
    return Export(format=q.format, content=content, next_cursor=next_cursor)


def conversation_filters(q: ListConversations) -> Composed:
    conditions = [SQL("owner = %(user)s")]
    if q.tags:
        conditions.append(SQL("tag_terms @> %(tags)s::text[]"))
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
        lines += [f"## {message['role']} · {_iso(message['created_at'])}", "", message["content"], ""]
    return "\n".join(lines)


def _iso(when: Any) -> str:
    """A message's time as ISO 8601: a decoded message carries it as such already."""
    return when if isinstance(when, str) else when.isoformat()
