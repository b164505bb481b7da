"""Rebuilding every read model in one pass over the log gives what rebuilding each on its own gives."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.auth import TokenAuthority
from adapters.read_side.rebuild import rebuild, rebuild_all
from adapters.read_side.views import read_model_of
from adapters.store.postgres import PostgresTarget
from entrypoints.bootstrap import Chronicle
from entrypoints.read_models import PROJECTIONS
from tests.integration.test_rebuild import fill
from tests.integration.test_verify import caught_up, connected, live_state, verify_all


def read_models_and_positions(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every read-model row, and each read model's tracked position and version (not when)."""
    state = live_state(url)
    names = {p.name for p in PROJECTIONS}  # (not the relays' rows: they move on their own)
    state["tracking"] = [row[:3] for row in state["tracking"] if row[0] in names]
    return state


async def test_one_pass_equals_a_rebuild_of_each_read_model_on_its_own(
    instance: tuple[Chronicle, str], authority: TokenAuthority, tmp_path: Path
) -> None:
    chronicle, url = instance
    client = await connected(chronicle, authority)
    await fill(client, conversations=10, messages=3)
    await caught_up(client)
    target = PostgresTarget(url)
    read_models = [read_model_of(p) for p in PROJECTIONS]

    def each_on_its_own() -> None:
        for read_model in read_models:
            rebuild(target, read_model, batch_size=7)

    await asyncio.to_thread(each_on_its_own)
    alone = read_models_and_positions(url)
    # Small batches: events of one batch wanted by some read models and not others, many commits.
    applied = await asyncio.to_thread(rebuild_all, target, read_models, batch_size=7)
    together = read_models_and_positions(url)

    assert together == alone
    assert set(applied) == {p.name for p in PROJECTIONS}
    assert applied["history"] > 10 * 3  # each read model counts the events it applied
    assert all(v.ok for v in verify_all(url).values())
    await client.close()


async def test_one_pass_leaves_current_read_models_alone_when_asked(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    chronicle, url = instance
    client = await connected(chronicle, authority)
    await fill(client, conversations=2, messages=2)
    await caught_up(client)
    target = PostgresTarget(url)
    before = read_models_and_positions(url)

    applied = await asyncio.to_thread(
        rebuild_all, target, [read_model_of(p) for p in PROJECTIONS], only_if_outdated=True
    )

    assert applied == {}  # the service built them all at its start: none outdated
    assert read_models_and_positions(url) == before
    await client.close()


def search_message_indexes(url: str) -> list[tuple[object, ...]]:
    """The search read model's indexes on its messages: (access method, valid, options)."""
    with PostgresTarget(url).connect(autocommit=True) as conn:
        return conn.execute(
            "SELECT a.amname, i.indisvalid, c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'rm_search.messages'::regclass ORDER BY a.amname"
        ).fetchall()


def pending_entries(url: str) -> int:
    """Pending-list pages left in the search messages' GIN index (merging them, so 0 after)."""
    with PostgresTarget(url).connect(autocommit=True) as conn:
        return int(conn.execute(
            "SELECT gin_clean_pending_list(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'rm_search.messages'::regclass AND a.amname = 'gin'"
        ).fetchone()[0])  # type: ignore[index]


async def test_the_search_messages_gin_index_is_merged_while_loading_and_left_whole(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    """The search messages' GIN index is made with its table and merged while a rebuild
    loads it (PostgresSearchView.merged_while_loading), not built after: either way of
    rebuilding leaves it there, valid, with the live limit on its pending list, nothing
    pending, and searches finding what they did."""
    chronicle, url = instance
    client = await connected(chronicle, authority)
    await fill(client, conversations=4, messages=3)
    await caught_up(client)
    before = search_message_indexes(url)
    assert [row[0] for row in before] == ["btree", "gin"]
    found = await client.conversations.search("kites")
    target = PostgresTarget(url)
    search = next(read_model_of(p) for p in PROJECTIONS if p.name == "search")
    for rebuilt in (lambda: rebuild(target, search, batch_size=5),
                    lambda: rebuild_all(target, [read_model_of(p) for p in PROJECTIONS], batch_size=5)):
        await asyncio.to_thread(rebuilt)
        assert search_message_indexes(url) == before
        assert pending_entries(url) == 0
        again = await client.conversations.search("kites")
        assert {(hit.conversation_id, hit.message_id) for hit in again.items} == {(hit.conversation_id, hit.message_id) for hit in found.items}
    assert found.items  # (the search finds something to compare)
    await client.close()
