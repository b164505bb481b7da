"""conversations.list sorted by title: titles are sealed, so the service opens and sorts them."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID, uuid4

import pytest
from chronicle_contract.conversations import ListConversations
from chronicle_contract.errors import ChronicleError
from psycopg.sql import Composable

from adapters.read_side.sealing import Seals
from adapters.store.memory import InMemoryKeyRing
from services.conversations.queries import MAX_TITLE_SORTED, list_conversations
from services.ports.read_models import Queries
from services.runtime.cursors import CursorSeal
from tests.unit.fake_queries import FakeQueries

USER = "alice"


class SealedConversations(FakeQueries):
    """The history read model's conversations of one user, their titles sealed as the view seals them;
    answers the two statements a title sort makes (the titles, then one page's rows by id)."""

    def __init__(self, titles: list[str]):
        self.cursors = CursorSeal.of_this_process()
        self.sealing = Seals(InMemoryKeyRing())
        seal = self.sealing.for_writing(USER)
        assert seal is not None
        self.rows = {
            ident: {"id": ident, "title": seal.seal(f"conversation:{ident}:title", title), "tags": seal.seal_json("t", []),
                    "first_message": None}
            for ident, title in ((uuid4(), title) for title in titles)
        }

    async def fetch_all(self, query: Any, params: Any, *, binary: bool = False) -> list[dict[str, Any]]:
        if isinstance(query, Composable):  # the titles, at most params["most"]
            return [{"id": row["id"], "title": row["title"]} for row in self.rows.values()][: params["most"]]
        user, idents = params
        return [dict(self.rows[i]) for i in idents if user == USER]



def listed(queries: Queries, **fields: Any) -> dict[str, Any]:
    return dict(asyncio.run(list_conversations(queries, USER, ListConversations(sort_by="title", **fields))))


def titles_of(page: dict[str, Any]) -> list[str]:
    return [row["title"] for row in page["items"]]


def test_titles_are_opened_and_sorted_both_ways_and_a_cursor_goes_on_after_the_last_one_seen() -> None:
    queries = SealedConversations(["pear", "apple", "Zebra", "mango", "apple"])
    ascending = listed(queries, order="asc", limit=10)
    assert titles_of(ascending) == ["Zebra", "apple", "apple", "mango", "pear"] and ascending["total"] == 5
    apples = [row["id"] for row in ascending["items"] if row["title"] == "apple"]
    assert apples == sorted(apples, key=lambda i: UUID(str(i)).int)  # (ties by id, as Postgres ordered them)
    assert titles_of(listed(queries, order="desc", limit=10)) == ["pear", "mango", "apple", "apple", "Zebra"]
    first = listed(queries, order="asc", limit=2)
    assert titles_of(first) == ["Zebra", "apple"] and first["next_cursor"] is not None
    second = listed(queries, order="asc", limit=2, cursor=first["next_cursor"])
    assert titles_of(second) == ["apple", "mango"] and second["items"][0]["id"] == apples[1]
    assert titles_of(listed(queries, order="asc", limit=2, offset=3)) == ["mango", "pear"]
    with pytest.raises(ChronicleError) as other_order:
        listed(queries, order="desc", limit=2, cursor=first["next_cursor"])
    assert other_order.value.code == "invalid"


def test_a_title_sort_over_more_conversations_than_the_bound_is_refused_naming_sort_by() -> None:
    queries = SealedConversations(["t"] * (MAX_TITLE_SORTED + 1))
    with pytest.raises(ChronicleError) as refused:
        listed(queries, limit=1)
    assert refused.value.code == "invalid" and refused.value.fields == ["sort_by"]
