"""Erasure by crypto-shredding: content unreadable, read models cleared, audit trail and chains intact."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from adapters.auth import TokenAuthority
from adapters.read_side.verify import verify
from adapters.read_side.views import read_model_of
from adapters.store.hash_chains import verify_chains
from adapters.store.kek_rotation import PostgresKeyRotation
from adapters.store.keys import data_key_context
from entrypoints.bootstrap import Chronicle
from entrypoints.read_models import PROJECTIONS
from tests.conftest import ClientFactory
from tests.rows import scalar
from tests.waiting import eventually

SECRET = "my secret diagnosis: tulip allergy"


async def write_history(client: ChronicleClient) -> dict[str, uuid.UUID]:
    session = await client.sessions.create("private matters")
    started = await client.conversations.start(title="health", tags=["private"], session_id=session.session_id)
    await client.conversations.add_message(started.conversation_id, "user", SECRET)
    handle = await client.hitl.pause(started.conversation_id, step="confirm", prompt="Shall I book a doctor?")
    await client.hitl.resume(handle.run_id, approved=True, feedback="yes, about the tulips")
    state = client.optimization(name="tulip prompts", optimizer="grid")
    round = await state.start_round()
    await state.record_trial(round, candidate={"prompt": "tulip advice"}, score=1.0, extra={"origin": "fresh"})
    artifact = await client.artifacts.store(
        {"type": "page", "label": "tulip clinic"}, query="tulip allergy clinic", rag_examples=[{"id": "doc-1", "score": 1}]
    )
    await client.artifacts.cache_preview(artifact.artifact_id, b"tulip preview bytes")
    await client.artifacts.variations("tulip clinic variants", count=2, base_artifact_id=artifact.artifact_id)
    return {
        "session": session.session_id,
        "conversation": started.conversation_id,
        "optimization": await state.start(),
        "artifact": artifact.artifact_id,
    }


def owners_rows(url: str, owner: str) -> dict[str, int]:
    """Rows of this owner in every read-model table that has an owner column."""
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.columns"
            " WHERE column_name = 'owner' AND table_schema LIKE 'rm\\_%' AND table_schema NOT LIKE '%\\_\\_%'"
        ).fetchall()
        return {
            f"{schema}.{table}": scalar(conn.execute(
                psycopg.sql.SQL("SELECT count(*) FROM {}.{} WHERE owner = %s").format(
                    psycopg.sql.Identifier(schema), psycopg.sql.Identifier(table)
                ),
                (owner,),
            ))
            for schema, table in tables
        }


async def test_erasing_a_user_shreds_content_and_keeps_the_audit_trail(
    chronicle: Chronicle, connect: ClientFactory
) -> None:
    user = f"erase-me-{uuid.uuid4().hex[:8]}"
    alice, bob = await connect(user), await connect()
    ids = await write_history(alice)
    bobs = await bob.conversations.start(title="bob keeps this")
    await bob.conversations.add_message(bobs.conversation_id, "user", "tulips are nice")
    url = chronicle.settings.database_url or ""

    with psycopg.connect(url) as conn:
        states = [bytes(s) for (s,) in conn.execute(
            "SELECT state FROM chronicle.events WHERE originator_id = %s", (ids["conversation"],)
        ).fetchall()]
    assert states and not any(b"tulip" in s or b"secret" in s for s in states), "content is sealed at rest"
    assert (await alice.conversations.get(ids["conversation"])).messages[0].content == SECRET

    with pytest.raises(ChronicleError) as refused:
        await bob.request("cmd.user.erase", {"user_id": user})
    assert refused.value.code == "unauthorized"
    admin = await connect("admin-1", roles=("admin",))
    erased = await admin.request("cmd.user.erase", {"user_id": user})
    assert erased["erased"] is True
    again = await admin.request("cmd.user.erase", {"user_id": user})
    assert again["erased"] is False
    with pytest.raises(ChronicleError) as system:
        await admin.request("cmd.user.erase", {"user_id": "chronicle"})
    assert system.value.code == "invalid" and system.value.fields == ["user_id"]

    # Every read model drops the user's rows (once it has applied the erasure).
    bob.observed(erased["position"])
    await bob.conversations.list()  # waits for the history read model
    await chronicle.positions.wait_for([p.name for p in PROJECTIONS], erased["position"], 10)
    assert not any(owners_rows(url, user).values()), owners_rows(url, user)
    with psycopg.connect(url) as conn:
        blobs = scalar(conn.execute("SELECT count(*) FROM chronicle.blob_chunks WHERE owner = %s", (user,)))
    assert blobs == 0, "preview bytes are deleted with the key"
    assert (await bob.conversations.get(bobs.conversation_id)).messages[0].content == "tulips are nice"

    # The user can write nothing more, and their old aggregates are gone.
    with pytest.raises(ChronicleError) as gone:
        await alice.conversations.add_message(ids["conversation"], "user", "hello again")
    assert gone.value.code == "not_found"
    with pytest.raises(ChronicleError) as no_more:
        await alice.conversations.start(title="new")
    assert no_more.value.code == "conflict"

    # The audit trail keeps ids, types, timestamps; the content reads back as erased; chains hold.
    auditor = await connect("auditor-e", roles=("auditor",))
    page = await auditor.audit.stream(ids["conversation"], at_version=2)
    assert page.owner == user and all(e.erased for e in page.events) and page.state is None
    assert page.events[1].type == "Conversation.MessageAdded" and "content" not in page.events[1].payload
    assert "message_id" in page.events[1].payload and page.events[1].timestamp is not None
    report = await asyncio.to_thread(verify_chains, chronicle.target, ids["conversation"])
    assert report.breaks == [] and report.events == len(page.events)

    # A rebuild from the events gives the same read models: nothing of the user comes back.
    for projection in PROJECTIONS:
        result = await asyncio.to_thread(verify, chronicle.target, read_model_of(projection))
        assert result.ok, (projection.name, result.tables)


def events_after(chronicle: Chronicle, url: str, position: int, owner: str) -> list[int]:
    """Notification ids, after `position`, of events holding the owner's content."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT notification_id, state FROM chronicle.events WHERE notification_id > %s", (position,)
        ).fetchall()
    mapper = chronicle.postgres_store.mapper
    return [n for n, state in rows if mapper.stored_json(bytes(state)).get("_owner") == owner]


@pytest.mark.parametrize("repetition", range(20))
async def test_no_write_of_an_erased_user_commits_after_the_erasure(
    chronicle: Chronicle, second_instance: Chronicle, connect: ClientFactory, repetition: int
) -> None:
    """8 writers add messages while the user is erased, with two instances (each with its
    own key cache) taking the requests: nothing of the user's commits after the erasure,
    and the read models hold none of their rows once they have applied it."""
    url = chronicle.settings.database_url or ""
    user = f"racer-{repetition}-{uuid.uuid4().hex[:6]}"
    writer, admin = await connect(user), await connect("admin-race", roles=("admin",))
    started = await writer.conversations.start(title="a race")
    written = asyncio.Event()
    count = 0

    async def write(n: int) -> None:
        nonlocal count
        while True:
            try:
                await writer.conversations.add_message(started.conversation_id, "user", f"canary {n}")
            except ChronicleError as error:
                assert error.code in ("conflict", "not_found"), error
                return
            count += 1
            if count >= 16:
                written.set()

    writers = [asyncio.create_task(write(n)) for n in range(8)]
    await asyncio.wait_for(written.wait(), 30)  # the erasure lands among writes
    erased = await admin.request("cmd.user.erase", {"user_id": user})
    await asyncio.wait_for(asyncio.gather(*writers), 30)

    assert events_after(chronicle, url, erased["position"], user) == []
    await chronicle.positions.wait_for([p.name for p in PROJECTIONS], erased["position"], 10)
    assert not any(owners_rows(url, user).values()), owners_rows(url, user)


PAGE = 8192


def heap_pages(conn: psycopg.Connection, relation: str) -> list[bytes]:
    """A table's pages as its file holds them on disk (after a checkpoint wrote them out)."""
    [path] = conn.execute("SELECT pg_relation_filepath(%s::regclass)", (relation,)).fetchone()  # type: ignore[misc]
    [data] = conn.execute("SELECT pg_read_binary_file(%s)", (path,)).fetchone()  # type: ignore[misc]
    return [bytes(data[n : n + PAGE]) for n in range(0, len(data), PAGE)]


def row_versions(page: bytes) -> list[bytes]:
    """Every row version a heap page holds, live or dead: the bytes its line pointers point
    at (the page header's pd_lower ends the pointers; each is offset:15, flags:2, length:15)."""
    lower = int.from_bytes(page[12:14], "little")
    versions = []
    for at in range(24, lower, 4):
        pointer = int.from_bytes(page[at : at + 4], "little")
        offset, length = pointer & 0x7FFF, pointer >> 17
        if length:
            versions.append(page[offset : offset + length])
    return versions


def relations_holding(url: str, needle: bytes) -> list[str]:
    """The tables (TOAST included) of Chronicle's schemas with a row version, live or dead,
    whose bytes contain `needle`, read from their files."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        relations = [r for (r,) in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind IN ('r', 't') AND c.relpersistence = 'p' AND pg_relation_size(c.oid) > 0"
            " AND (n.nspname LIKE 'rm\\_%%' OR n.nspname IN ('chronicle', 'pg_toast'))"
        )]
        return [
            relation for relation in relations
            if any(needle in version for page in heap_pages(conn, relation) for version in row_versions(page))
        ]


def key_table_pages_holding(url: str, key: bytes) -> int:
    """Pages of the key table whose bytes, free space included, contain `key`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        return sum(key in page for page in heap_pages(conn, "chronicle.data_keys"))


async def test_after_an_erasure_no_row_version_keeps_the_content_and_the_key_is_gone_from_its_pages(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    """Deleted rows stay in a table's pages as dead versions until a vacuum (#18). The key
    table's rows hold keys only wrapped (#30): a dead version may keep the erased key, wrapped,
    while a transaction that began before the erasure runs; the rotation after the erasure
    destroys what wrapped it."""
    chronicle, url = instance
    user = f"shred-{uuid.uuid4().hex[:8]}"
    prefix = chronicle.settings.subject_prefix
    client = await ChronicleClient.connect(chronicle.nats_url, authority.issue(user), prefix=prefix)
    admin = await ChronicleClient.connect(
        chronicle.nats_url, authority.issue("admin-1", claims={"roles": ["admin"]}), prefix=prefix
    )
    try:
        ids = await write_history(client)
        await client.conversations.update(ids["conversation"], title="tulip health, renamed")  # a dead version more
        await client.conversations.get(ids["conversation"])  # (read models have the writes)
        key = chronicle.keys.key_for_reading(user)
        with psycopg.connect(url) as conn:
            [wrapped, generation] = conn.execute(  # type: ignore[misc]
                "SELECT wrapped, kek_generation FROM chronicle.data_keys WHERE owner = %s", (user,)
            ).fetchone()
        # Every read model seals it (tests/integration/test_sealed_read_models.py): no row
        # version, live or dead, holds it; the same scan finds the owner's id, kept in clear.
        assert await asyncio.to_thread(relations_holding, url, b"tulip") == []
        assert await asyncio.to_thread(relations_holding, url, user.encode())
        assert key is not None and await asyncio.to_thread(key_table_pages_holding, url, key) == 0  # kept wrapped only
        assert await asyncio.to_thread(key_table_pages_holding, url, bytes(wrapped)) == 1

        erased = await admin.request("cmd.user.erase", {"user_id": user})
        await chronicle.positions.wait_for([p.name for p in chronicle.projections], erased["position"], 10)
    finally:
        await client.close()
        await admin.close()
    assert await asyncio.to_thread(key_table_pages_holding, url, key) == 0
    assert await asyncio.to_thread(PostgresKeyRotation(chronicle.target, chronicle.keks).rotate)
    with pytest.raises(KeyError):  # whatever page still holds the wrapped key, nothing unwraps it
        chronicle.keks.unwrap(generation, bytes(wrapped), data_key_context(user))
    await eventually(lambda: not relations_holding(url, b"tulip"), "the read models the erasure touched to be vacuumed")
