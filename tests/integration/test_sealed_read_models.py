"""The history, search, HITL, jobs, artifacts and stats read models hold no plaintext of a user: content is sealed under
the owner's key and searched through blind terms, read back from the relations' files."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from chronicle_client import ChronicleClient
from psycopg.sql import SQL, Identifier

from adapters.auth import TokenAuthority
from adapters.read_side.sealing import Seals
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.read_models import PROJECTIONS
from projections.history import HistoryProjection
from projections.search import SearchProjection
from tests.integration.test_erasure import owners_rows

SEALED_SCHEMAS = ("rm_history", "rm_search", "rm_hitl", "rm_jobs", "rm_artifacts", "rm_stats")


def relation_files(conn: psycopg.Connection) -> dict[str, bytes]:
    """Every relation of the sealed read models as its files hold it: tables, their indexes,
    their TOAST tables and the TOAST tables' indexes."""
    oids = [oid for (oid,) in conn.execute(
        """
        WITH tables AS (
            SELECT c.oid, c.reltoastrelid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = ANY(%s) AND c.relkind = 'r'
        ), heaps AS (
            SELECT oid FROM tables UNION SELECT reltoastrelid FROM tables WHERE reltoastrelid <> 0
        )
        SELECT oid FROM heaps UNION SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM heaps)
        """,
        (list(SEALED_SCHEMAS),),
    )]
    files = {}
    for oid in oids:
        name, path, size = conn.execute(
            "SELECT %s::regclass::text, pg_relation_filepath(%s), pg_relation_size(%s)", (oid, oid, oid)
        ).fetchone()  # type: ignore[misc]
        if size:
            [data] = conn.execute("SELECT pg_read_binary_file(%s)", (path,)).fetchone()  # type: ignore[misc]
            files[name] = bytes(data)
    return files


def occurrences(url: str, needles: list[bytes]) -> dict[str, int]:
    """How often any needle occurs in each relation file of the sealed read models, after a
    checkpoint wrote every page out; relations without one left out."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        found = {name: sum(data.count(needle) for needle in needles) for name, data in relation_files(conn).items()}
    assert any(name.startswith("rm_history.") for name in found)  # (the scan reads something)
    return {name: count for name, count in found.items() if count}


async def write_canary(client: ChronicleClient, canary: str) -> uuid.UUID:
    """The canary through every kind of content the history and search read models keep."""
    session = await client.sessions.create(f"{canary} session", description=f"{canary} described", tags=[canary])
    await client.sessions.update(session.session_id, name=f"{canary} renamed", tags=[canary, "two"])
    started = await client.conversations.start(
        title=f"{canary} title", tags=[canary], session_id=session.session_id,
        document_context={"note": f"{canary} context"},
    )
    for n in range(3):
        await client.conversations.add_message(
            started.conversation_id, "user", f"message {n} about the {canary} and tulips", metadata={"note": canary}
        )
    await client.conversations.update(started.conversation_id, title=f"{canary} retitled", tags=[canary, "kept"])
    stored = await client.artifacts.store(
        {"type": "page", "label": f"{canary} label", "children": []}, query=f"{canary} artifact query", tags=[canary],
        rag_examples=[{"id": "example-1", "score": 0.5, "text": f"{canary} example"}],
    )
    await client.artifacts.variations(f"{canary} variants", count=2, base_artifact_id=stored.artifact_id)
    answered = await client.hitl.pause(
        started.conversation_id, step=f"{canary} step", prompt=f"{canary} prompt?", data={"draft": canary},
        run_id="answered-run",
    )
    await client.hitl.resume(answered.run_id, approved=False, edits={"draft": f"{canary} edited"}, feedback=f"{canary} feedback")
    await client.hitl.pause(started.conversation_id, step="second", prompt=f"{canary} waiting", run_id="waiting-run")
    return started.conversation_id


async def test_no_plaintext_of_a_user_in_the_files_of_history_and_search_before_or_after_erasure(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    chronicle, url = instance
    canary = f"canary{uuid.uuid4().hex[:12]}"
    user = f"sealed-{uuid.uuid4().hex[:8]}"
    prefix = chronicle.settings.subject_prefix
    alice = await ChronicleClient.connect(chronicle.nats_url, authority.issue(user), prefix=prefix)
    bob = await ChronicleClient.connect(chronicle.nats_url, authority.issue(f"bob-{uuid.uuid4().hex[:6]}"), prefix=prefix)
    admin = await ChronicleClient.connect(
        chronicle.nats_url, authority.issue("admin-1", claims={"roles": ["admin"]}), prefix=prefix
    )
    try:
        conversation_id = await write_canary(alice, canary)
        bobs = await bob.conversations.start(title="bob's tulips", tags=["garden"])
        await bob.conversations.add_message(bobs.conversation_id, "user", "tulips bloom in spring")

        # Alice reads her content back in clear: opened at query time.
        conversation = await alice.conversations.get(conversation_id)
        assert conversation.title == f"{canary} retitled" and conversation.tags == [canary, "kept"]
        assert conversation.messages[0].content == f"message 0 about the {canary} and tulips"
        assert conversation.messages[0].metadata == {"note": canary}
        assert conversation.document_context == {"note": f"{canary} context"}
        [listed] = (await alice.conversations.list(tags=[canary])).items
        assert listed.id == conversation_id and listed.first_message == conversation.messages[0].content
        assert (await alice.conversations.list(tags=["two"])).items == []
        stats = await alice.conversations.stats()
        assert [(t.tag, t.count) for t in stats.top_tags] == [(canary, 1), ("kept", 1)]
        [session] = [s for s in (await alice.sessions.list()).items if s.id == conversation.session_id]
        assert (session.name, session.description, session.tags) == (f"{canary} renamed", f"{canary} described", [canary, "two"])
        hits = await alice.conversations.search(canary)
        assert {hit.conversation_id for hit in hits.items} == {conversation_id} and len(hits.items) == 7  # (title, 3 messages, 3 of the pauses)
        assert all(f"<mark>{canary}</mark>" in hit.snippet for hit in hits.items), hits.items
        assert all(hit.title == f"{canary} retitled" for hit in hits.items)
        found = (await alice.artifacts.search(canary)).items
        # (a snippet may be a draft's line alone, where the generator wrote the word capitalised)
        assert found and all(f"<mark>{canary}</mark>" in hit.snippet.lower() for hit in found), found
        [artifact] = (await alice.artifacts.list(tags=[canary])).items
        assert artifact.query == f"{canary} artifact query" and artifact.tags == [canary]
        detail = await alice.artifacts.get(artifact.id)
        assert detail.layout["label"] == f"{canary} label" and detail.rag_examples[0].text == f"{canary} example"
        job = await alice.jobs.request(f"a summary of the {canary} notes", "summary")
        done = await alice.jobs.wait(job.job_id, timeout=60)
        assert done.status == "completed" and canary in str(done.result), done
        assert [j.result for j in (await alice.jobs.list()).items] == [done.result]
        [waiting] = (await alice.hitl.list()).items
        assert (waiting.run_id, waiting.step, waiting.prompt) == ("waiting-run", "second", f"{canary} waiting")
        status = await alice.hitl.get("answered-run")
        assert (status.step, status.prompt, status.data) == (f"{canary} step", f"{canary} prompt?", {"draft": canary})
        assert (status.edits, status.feedback) == ({"draft": f"{canary} edited"}, f"{canary} feedback")
        answered = [m for m in conversation.messages if m.message_type == "hitl_feedback"]
        assert answered and answered[0].content == f"{canary} feedback"
        assert (await bob.conversations.search(canary)).items == []  # (terms are keyed by each owner's key)
        assert {hit.conversation_id for hit in (await bob.conversations.search("tulips")).items} == {bobs.conversation_id}

        # Nothing of it in any file of the two read models: heap, TOAST or index.
        needles = [canary.encode()]
        assert await asyncio.to_thread(occurrences, url, needles) == {}
        with psycopg.connect(url, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = ANY(%s)", (list(SEALED_SCHEMAS),)
            ).fetchall()
            for schema, table in tables:
                conn.execute(SQL("ANALYZE {}.{}").format(Identifier(schema), Identifier(table)))
            gathered = conn.execute(
                "SELECT schemaname || '.' || tablename || '.' || attname FROM pg_stats WHERE schemaname = ANY(%s)"
                " AND attname IN ('name', 'description', 'tags', 'tag_terms', 'title', 'document_context',"
                " 'first_message', 'content', 'metadata', 'body', 'message', 'tsv', 'step', 'prompt', 'data', 'edits', 'feedback',"
                " 'plan', 'result', 'error', 'query', 'draft', 'layout', 'rag_examples', 'refinement', 'members',"
                " 'term', 'tag')",
                (list(SEALED_SCHEMAS),),
            ).fetchall()
        assert gathered == [], "no statistics on sealed or blind columns"

        erased = await admin.request("cmd.user.erase", {"user_id": user})
        await chronicle.positions.wait_for([p.name for p in PROJECTIONS], erased["position"], 10)
    finally:
        await alice.close()
        await admin.close()
    try:
        assert not any(owners_rows(url, user).values()), owners_rows(url, user)
        with psycopg.connect(url, autocommit=True) as conn:
            for schema, table in conn.execute(
                "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = ANY(%s)", (list(SEALED_SCHEMAS),)
            ).fetchall():
                conn.execute(SQL("VACUUM FULL {}.{}").format(Identifier(schema), Identifier(table)))
        assert await asyncio.to_thread(occurrences, url, needles) == {}
        assert {hit.conversation_id for hit in (await bob.conversations.search("tulips")).items} == {bobs.conversation_id}
    finally:
        await bob.close()


async def test_a_store_from_before_sealing_is_rebuilt_sealed_by_the_usual_start(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    """A read model built by an older version (plaintext columns) is rebuilt at the next
    start: its old tables and their files are gone, the new ones hold no plaintext."""
    chronicle, url = instance
    canary = f"canary{uuid.uuid4().hex[:12]}"
    user = f"upgraded-{uuid.uuid4().hex[:8]}"
    client = await ChronicleClient.connect(chronicle.nats_url, authority.issue(user), prefix=chronicle.settings.subject_prefix)
    try:
        started = await client.conversations.start(title=f"{canary} title", tags=["kept"])
        await client.conversations.add_message(started.conversation_id, "user", f"the {canary} message")
        await client.conversations.get(started.conversation_id)  # (the read models have it)
    finally:
        await client.close()
    await chronicle.stop()
    with psycopg.connect(url, autocommit=True) as conn:  # what a store from before sealing held
        conn.execute("ALTER TABLE rm_history.messages ADD COLUMN plain text")
        conn.execute("UPDATE rm_history.messages SET plain = %s", (f"the {canary} message",))
        conn.execute("UPDATE chronicle.projections SET version = 1 WHERE name IN ('history', 'search')")
    assert await asyncio.to_thread(occurrences, url, [canary.encode()])

    restarted = await bootstrap(chronicle.settings)
    try:
        with psycopg.connect(url) as conn:
            versions: dict[str, int] = dict(conn.execute(
                "SELECT name, version FROM chronicle.projections WHERE name IN ('history', 'search')"
            ).fetchall())
        assert versions == {"history": HistoryProjection.version, "search": SearchProjection.version}
        assert await asyncio.to_thread(occurrences, url, [canary.encode()]) == {}
        client = await ChronicleClient.connect(
            restarted.nats_url, authority.issue(user), prefix=restarted.settings.subject_prefix
        )
        try:
            conversation = await client.conversations.get(started.conversation_id)
            assert [m.content for m in conversation.messages] == [f"the {canary} message"]
            assert {hit.conversation_id for hit in (await client.conversations.search(canary)).items} == {
                started.conversation_id
            }
        finally:
            await client.close()
    finally:
        await restarted.stop()


@pytest.mark.parametrize("version", [3, 2])
async def test_a_get_reads_an_older_history_read_model_while_an_upgrade_rebuilds_it(
    instance: tuple[Chronicle, str], authority: TokenAuthority, version: int
) -> None:
    """Version 4 seals each message whole (`message`); until an upgrade's rebuild swaps it
    in, the tables of the version before answer: 3 sealed content and metadata together
    (`body`) beside the other columns, 2 sealed them apart."""
    chronicle, url = instance
    user = f"upgrading-{uuid.uuid4().hex[:8]}"
    client = await ChronicleClient.connect(chronicle.nats_url, authority.issue(user), prefix=chronicle.settings.subject_prefix)
    try:
        started = await client.conversations.start(title="kept while rebuilt")
        await client.conversations.add_message(started.conversation_id, "user", "first", metadata={"k": [1, "two"]})
        await client.conversations.add_message(started.conversation_id, "agent", "second")
        before = await client.conversations.get(started.conversation_id)
        assert [(m.content, m.metadata) for m in before.messages] == [("first", {"k": [1, "two"]}), ("second", {})]

        seal = Seals(chronicle.keys).for_reading(user)
        assert seal is not None
        with psycopg.connect(url) as conn:  # the messages table as that version wrote it
            sealed = "body bytea" if version == 3 else "content bytea, metadata bytea"
            conn.execute(
                "ALTER TABLE rm_history.messages ADD COLUMN id uuid, ADD COLUMN role text, ADD COLUMN pinned boolean,"
                " ADD COLUMN message_type text, ADD COLUMN created_at timestamptz, "
                + ", ".join(f"ADD COLUMN {column}" for column in sealed.split(", "))
            )
            for conversation_id, seq, whole in conn.execute(
                "SELECT conversation_id, seq, message FROM rm_history.messages"
            ).fetchall():
                message = seal.open_json(whole)
                row = f"message:{conversation_id}:{seq}:"
                content = (
                    [seal.seal_json(row + "body", [message["content"], message["metadata"]])] if version == 3
                    else [seal.seal(row + "content", message["content"]), seal.seal_json(row + "metadata", message["metadata"])]
                )
                conn.execute(
                    "UPDATE rm_history.messages SET id = %s, role = %s, pinned = %s, message_type = %s, created_at = %s, "
                    + ", ".join(f"{column.split()[0]} = %s" for column in sealed.split(", "))
                    + " WHERE conversation_id = %s AND seq = %s",
                    (message["id"], message["role"], message["pinned"], message["message_type"], message["created_at"],
                     *content, conversation_id, seq),
                )
            conn.execute("ALTER TABLE rm_history.messages DROP COLUMN message")

        after = await client.conversations.get(started.conversation_id)
        assert after.messages == before.messages
    finally:
        await client.close()
