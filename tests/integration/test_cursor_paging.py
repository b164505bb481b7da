"""Lists page by cursor as well as by offset: a cursor goes on after the last row seen,
whatever was added meanwhile (#18)."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError

LAYOUT = {"type": "page", "children": [{"type": "section", "label": "s"}]}


async def walk(list_page: Callable[..., Awaitable[Any]], limit: int, **fields: Any) -> list[Any]:
    """Every page from the first, by cursor; the items in order."""
    items: list[Any] = []
    page = await list_page(limit=limit, **fields)
    while True:
        assert len(page.items) <= limit
        items += page.items
        if page.next_cursor is None:
            return items
        page = await list_page(limit=limit, cursor=page.next_cursor, **fields)


async def test_a_cursor_goes_on_after_the_last_row_seen_while_rows_are_added(client: ChronicleClient) -> None:
    first = [(await client.artifacts.store(LAYOUT, query=f"a{n}")).artifact_id for n in range(5)][::-1]  # newest first
    page = await client.artifacts.list(limit=2)
    assert [a.id for a in page.items] == first[:2] and page.total == 5 and page.next_cursor is not None
    added = [(await client.artifacts.store(LAYOUT, query=f"b{n}")).artifact_id for n in range(2)]
    by_offset = await client.artifacts.list(limit=2, offset=2)
    assert [a.id for a in by_offset.items] == first[:2]  # an offset shows the first page again
    rest = await client.artifacts.list(limit=2, cursor=page.next_cursor)
    assert [a.id for a in rest.items] == first[2:4] and rest.total == 7
    last = await client.artifacts.list(limit=2, cursor=rest.next_cursor)
    assert [a.id for a in last.items] == first[4:] and last.next_cursor is None
    assert {a.id for a in await walk(client.artifacts.list, 3)} == set(first) | set(added)


async def test_every_list_pages_by_cursor_through_what_offset_shows(client: ChronicleClient) -> None:
    for n in range(3):
        session = await client.sessions.create(f"s{n}")
        started = await client.conversations.start(title=f"title {2 - n}", session_id=session.session_id)
        await client.hitl.pause(started.conversation_id, step=f"step {n}", prompt="ok?")
        await client.artifacts.store(LAYOUT, query=f"q{n}", rag_examples=[{"id": "example-1", "score": 0.5 + n / 10}])
        await client.jobs.request(f"a layout number {n}", "layout", options={"chunks": 0})
        await client.optimization(name=f"o{n}", optimizer="grid").start()
    lists: dict[str, tuple[Callable[..., Awaitable[Any]], dict[str, Any]]] = {
        "sessions": (client.sessions.list, {}),
        "conversations by title": (client.conversations.list, {"sort_by": "title", "order": "asc"}),
        "conversations by update": (client.conversations.list, {}),
        "paused runs": (client.hitl.list, {}),
        "jobs": (client.jobs.list, {}),
        "optimizations": (client.optimizations.list, {}),
        "by example": (lambda **fields: client.artifacts.by_example("example-1", **fields), {}),
    }
    for name, (list_page, fields) in lists.items():
        everything = await list_page(limit=100, **fields)
        assert everything.total == len(everything.items) >= 3, name
        # (compared by id: a job finishing meanwhile changes a row, not the order)
        assert [ident(item) for item in await walk(list_page, 1, **fields)] == [ident(item) for item in everything.items], name


def ident(item: Any) -> Any:
    return next(getattr(item, f) for f in ("id", "run_id", "job_id", "optimization_id", "artifact_id") if hasattr(item, f))


async def test_a_cursor_that_is_not_one_of_this_lists_is_invalid(client: ChronicleClient) -> None:
    await client.sessions.create("one")
    await client.sessions.create("two")
    await client.sessions.create("three")
    sessions_cursor = (await client.sessions.list(limit=1)).next_cursor
    assert sessions_cursor is not None
    # An offset given with a cursor skips that many rows after it.
    after = [s.name for s in (await client.sessions.list(cursor=sessions_cursor)).items]
    assert [s.name for s in (await client.sessions.list(cursor=sessions_cursor, offset=1)).items] == after[1:]

    def forged(*values: Any) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(list(values))).decode().rstrip("=")

    attempts = [
        client.artifacts.list(cursor=sessions_cursor),  # another list's
        client.conversations.list(cursor=forged("conversations:updated_at:asc", "2026-01-01T00:00:00+00:00", "x")),
        client.sessions.list(cursor="not-base64-json"),
        client.sessions.list(cursor=forged("sessions", "yesterday", "00000000-0000-0000-0000-000000000000")),
        client.sessions.list(cursor=forged("sessions", "2026-01-01T00:00:00+00:00", "not a uuid")),
        client.conversations.list(sort_by="title", cursor=forged("conversations:title:desc", "a\x00b", "x")),
    ]
    for attempt in attempts:
        with pytest.raises(ChronicleError) as refused:
            await attempt
        assert refused.value.code == "invalid" and refused.value.fields == ["cursor"], refused.value
