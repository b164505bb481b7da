"""Audit log export and import: scopes, hash checks, erased users, and a round trip that
reproduces every read model in another store."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from psycopg.sql import SQL, Composable, Identifier

from adapters.auth import TokenAuthority
from adapters.read_side.views.semantic import semantic_support
from adapters.store.event_store import EventStore
from adapters.store.export import ExportScope, export_events, verify_export
from adapters.store.hash_chains import ChainBreak, verify_chains
from adapters.store.keys import KeyRing, UserErased
from adapters.store.postgres import PostgresTarget
from domain.conversation import Conversation
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.read_models import PROJECTIONS
from projections.semantic import SemanticProjection
from tests.conftest import make_settings
from tests.integration.test_rebuild import chronicle_cli
from tests.rows import scalar
from tests.servers import TestServers

SECRET = f"carol's secret {uuid.uuid4().hex}: afraid of kites"
LINE_FIELDS = {
    "position", "aggregate_id", "aggregate_type", "version", "type", "topic", "timestamp", "owner", "hash",
    "payload", "erased", "state",
}


@dataclass
class Source:
    chronicle: Chronicle
    url: str
    data_dir: Path
    users: dict[str, str]
    ids: dict[str, uuid.UUID]
    export: Path  # `export --all` of the whole history
    lines: list[dict[str, Any]]


async def write_history(
    alice: ChronicleClient, bob: ChronicleClient, carol: ChronicleClient
) -> dict[str, uuid.UUID]:
    session = await alice.sessions.create("export me", tags=["audit"])
    talk = await alice.conversations.start(title="plans", tags=["t1"], session_id=session.session_id)
    for n in range(3):
        await alice.conversations.add_message(talk.conversation_id, "user", f"plan step {n}")
    await alice.conversations.update(talk.conversation_id, title="plans, renamed", tags=["t2", "t3"])
    run = await alice.hitl.pause(talk.conversation_id, step="approve", prompt="Proceed with step 3?")
    await alice.hitl.resume(run.run_id, approved=True, feedback="yes", edits={"step": 3})
    dropped = await alice.conversations.start(title="dropped", session_id=session.session_id)
    await alice.conversations.add_message(dropped.conversation_id, "agent", "soon gone")
    await alice.conversations.delete(dropped.conversation_id)
    optimization = alice.optimization(name="prompt search", optimizer="evolutionary")
    parent = None
    for r in range(2):
        round = await optimization.start_round(extras={"population": 3})
        for t in range(3):
            extra = {"parents": [parent], "origin": "mutation"} if parent else {"origin": "fresh"}
            recorded = await optimization.record_trial(
                round, candidate={"prompt": f"variant {r}.{t}"}, score=r + t / 10, metrics={"f1": t / 3}, extra=extra
            )
            parent = recorded.candidate_id
        await optimization.end_round(round)

    bobs = await bob.conversations.start(title="bob's own", tags=["t1"])
    await bob.conversations.add_message(bobs.conversation_id, "user", "nothing to hide")

    carols_session = await carol.sessions.create(f"session about {SECRET}")
    secret_talk = await carol.conversations.start(title=SECRET, session_id=carols_session.session_id)
    await carol.conversations.add_message(secret_talk.conversation_id, "user", SECRET)
    pause = await carol.hitl.pause(secret_talk.conversation_id, step="confirm", prompt=f"Confirm {SECRET}?")
    await carol.hitl.resume(pause.run_id, approved=False, feedback=SECRET)
    carols_optimization = carol.optimization(name=SECRET, optimizer="grid")
    carols_round = await carols_optimization.start_round()
    await carols_optimization.record_trial(carols_round, candidate={"prompt": SECRET}, score=1.0)
    return {
        "session": session.session_id,
        "conversation": talk.conversation_id,
        "optimization": await optimization.start(),
        "bobs": bobs.conversation_id,
        "carols_session": carols_session.session_id,
        "carols_conversation": secret_talk.conversation_id,
    }


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(text) for text in path.read_bytes().splitlines()]


def head(url: str) -> int:
    with psycopg.connect(url) as conn:
        return scalar(conn.execute("SELECT coalesce(max(notification_id), 0) FROM chronicle.events"))


def export(source: Source, *args: str) -> list[dict[str, Any]]:
    """`chronicle export ARGS` to stdout, parsed."""
    done = chronicle_cli(source.url, source.data_dir, "export", *args)
    assert done.returncode == 0, done.stderr
    return [orjson.loads(text) for text in done.stdout.splitlines()]


@pytest.fixture(scope="module")
async def source(
    servers: TestServers, authority: TokenAuthority, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Source]:
    data_dir = tmp_path_factory.mktemp("export-source")
    with servers.fresh_database() as url:
        chronicle = await bootstrap(make_settings(url, servers.nats_url, data_dir))
        users = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in ("alice", "bob", "carol")}
        clients = {
            name: await ChronicleClient.connect(
                chronicle.nats_url, authority.issue(user), prefix=chronicle.settings.subject_prefix
            )
            for name, user in users.items()
        }
        auditor = await ChronicleClient.connect(
            chronicle.nats_url, authority.issue("auditor-x", claims={"roles": ["auditor"]}),
            prefix=chronicle.settings.subject_prefix,
        )
        admin = await ChronicleClient.connect(
            chronicle.nats_url, authority.issue("admin-x", claims={"roles": ["admin"]}),
            prefix=chronicle.settings.subject_prefix,
        )
        try:
            ids = await write_history(clients["alice"], clients["bob"], clients["carol"])
            await auditor.audit.stream(ids["carols_conversation"])  # an auditor's read is recorded too
            await admin.request("cmd.user.erase", {"user_id": users["carol"]})
            await chronicle.positions.wait_for([p.name for p in PROJECTIONS], head(url), 10)

            path = data_dir / "all.jsonl"
            done = await asyncio.to_thread(chronicle_cli, url, data_dir, "export", "--all", "--output", str(path))
            assert done.returncode == 0, done.stderr
            yield Source(chronicle, url, data_dir, users, ids, path, read_lines(path))
        finally:
            for client in [*clients.values(), auditor, admin]:
                await client.close()
            await chronicle.stop()


def read_models(url: str) -> dict[str, list[str]]:
    """Every live read-model table (all rm_* schemas) as a sorted list of its rows as text.
    What is keyed by its owner's key (sealed content, blind terms) differs between two
    stores, whose keys differ: it is compared by its size (the service shows it opened)."""
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name, array_agg(column_name::text ORDER BY ordinal_position),"
            " array_agg(data_type::text ORDER BY ordinal_position) FROM information_schema.columns"
            " WHERE table_schema LIKE 'rm\\_%' AND table_schema NOT LIKE '%\\_\\_%' GROUP BY 1, 2"
        ).fetchall()
        return {
            f"{schema}.{table}": sorted(
                row for (row,) in conn.execute(
                    SQL("SELECT ROW({})::text FROM {}.{} t").format(
                        SQL(", ").join(keyed_by_size(column, kind) for column, kind in zip(names, kinds, strict=True)),
                        Identifier(schema), Identifier(table),
                    )
                )
            )
            for schema, table, names, kinds in tables
        }


def keyed_by_size(column: str, kind: str) -> Composable:
    if kind == "bytea":
        return SQL("length(t.{})").format(Identifier(column))
    if kind == "tsvector":
        return SQL("length(t.{})").format(Identifier(column))
    if column == "tag_terms" or (column == "tags" and kind == "ARRAY"):  # (blind terms)
        return SQL("cardinality(t.{})").format(Identifier(column))
    if column == "term" or column.endswith("_term"):  # (a blind term: the optimizations' project, optimizer)
        return SQL("length(t.{})").format(Identifier(column))
    return SQL("t.{}").format(Identifier(column))


def stream_hashes(url: str, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, int, bytes]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT originator_id, originator_version, hash FROM chronicle.events"
            " WHERE originator_id = ANY(%s) ORDER BY 1, 2",
            (ids,),
        ).fetchall()


def test_export_all_lines_are_in_global_order_with_hashes_and_erased_users_show_no_content(source: Source) -> None:
    lines = source.lines
    assert len(lines) == head(source.url) and all(set(line) == LINE_FIELDS for line in lines)
    assert [line["position"] for line in lines] == sorted(line["position"] for line in lines)
    text = source.export.read_text()
    assert SECRET not in text and "kites" not in text

    carol = source.users["carol"]
    carols = [line for line in lines if line["owner"] == carol]
    assert carols and all(line["erased"] for line in carols)
    assert not any(line["erased"] for line in lines if line["owner"] != carol)
    message = next(line for line in carols if line["type"] == "Conversation.MessageAdded")
    assert "content" not in message["payload"] and "message_id" in message["payload"]
    talk = next(line for line in lines if line["aggregate_id"] == str(source.ids["conversation"]) and line["version"] == 2)
    assert talk["aggregate_type"] == "Conversation" and talk["payload"]["content"] == "plan step 0"
    assert talk["owner"] == source.users["alice"] and talk["topic"].endswith(":Conversation.MessageAdded")


def test_exported_hashes_verify_and_tampering_is_detected(source: Source) -> None:
    raw = source.export.read_bytes().splitlines()
    report = verify_export(raw)
    assert report.intact and report.events == len(raw) and report.streams == len({line["aggregate_id"] for line in source.lines})

    index, line = next((i, dict(line)) for i, line in enumerate(source.lines) if line["version"] == 2)
    stream = uuid.UUID(line["aggregate_id"])
    state = bytearray(base64.b64decode(line["state"]))
    state[len(state) // 2] ^= 0x01
    tampered = [*raw[:index], orjson.dumps({**line, "state": base64.b64encode(bytes(state)).decode()}), *raw[index + 1:]]
    assert verify_export(tampered).breaks == [ChainBreak(stream, 2, "hash mismatch")]

    backdated = [*raw[:index], orjson.dumps({**line, "timestamp": "2001-01-01T00:00:00+00:00"}), *raw[index + 1:]]
    assert verify_export(backdated).breaks == [ChainBreak(stream, 2, "metadata differs from the hashed state")]

    removed = [*raw[:index], *raw[index + 1:]]
    assert ChainBreak(stream, 2, "missing") in verify_export(removed).breaks


def test_an_export_in_small_batches_writes_the_same_bytes(source: Source) -> None:
    # Each line's owner and type come from its stream's creation event, met in the same
    # batch or an earlier one (or looked up when the scope leaves it out): batch bounds
    # must not change a line.
    target = PostgresTarget(source.url)
    with contextlib.closing(KeyRing(target)) as keys:
        for batch_size in (1, 7):
            out = io.BytesIO()
            written = export_events(target, keys, ExportScope(), out, batch_size=batch_size)
            assert written == len(source.lines) and out.getvalue() == source.export.read_bytes()


def test_user_session_and_since_exports_hold_exactly_their_events(source: Source) -> None:
    alice, carol = source.users["alice"], source.users["carol"]
    assert export(source, "--user", alice) == [line for line in source.lines if line["owner"] == alice]
    carols = export(source, "--user", carol)
    assert carols == [line for line in source.lines if line["owner"] == carol] and all(e["erased"] for e in carols)

    # The session, and every aggregate that names it or names one that does (its
    # conversations, their HITL runs), found here from the creation events' *_id fields.
    members = {str(source.ids["session"])}
    while True:
        found = members | {
            line["aggregate_id"]
            for line in source.lines
            if line["version"] == 1 and any(k.endswith("_id") and v in members for k, v in line["payload"].items())
        }
        if found == members:
            break
        members = found
    in_session = export(source, "--session", str(source.ids["session"]))
    assert in_session == [line for line in source.lines if line["aggregate_id"] in members]
    assert {line["aggregate_type"] for line in in_session} >= {"Session", "Conversation", "HitlRun"}
    optimization = export(source, "--session", str(source.ids["optimization"]))
    assert {line["aggregate_type"] for line in optimization} == {"Session", "Round", "Trial"}

    middle = source.lines[len(source.lines) // 2]["timestamp"]
    since = export(source, "--all", "--since", middle)
    expected = [line for line in source.lines if datetime.fromisoformat(line["timestamp"]) >= datetime.fromisoformat(middle)]
    assert since == expected and 0 < len(since) < len(source.lines)
    assert export(source, "--user", alice, "--since", middle) == [line for line in expected if line["owner"] == alice]


async def test_import_into_an_empty_store_reproduces_every_read_model_and_keeps_erasures(
    source: Source, servers: TestServers, authority: TokenAuthority, tmp_path: Path
) -> None:
    with servers.fresh_database() as url:
        # A log with a stream that does not start at version 1 (as --since makes) is refused
        # before anything is written.
        partial = tmp_path / "partial.jsonl"
        partial.write_bytes(b"".join(
            text + b"\n" for text, line in zip(source.export.read_bytes().splitlines(), source.lines, strict=True)
            if (line["aggregate_id"], line["version"]) != (str(source.ids["conversation"]), 1)
        ))
        refused = await asyncio.to_thread(chronicle_cli, url, tmp_path, "import", str(partial))
        assert refused.returncode == 1 and "streams must be complete" in refused.stderr, refused.stderr
        with psycopg.connect(url) as conn:
            assert scalar(conn.execute("SELECT to_regclass('chronicle.events')")) is None, "nothing was touched"

        done = await asyncio.to_thread(chronicle_cli, url, tmp_path, "import", str(source.export))
        assert done.returncode == 0, done.stderr
        assert f"import: {len(source.lines)} events appended" in done.stdout

        imported = read_models(url)
        with psycopg.connect(url, autocommit=True) as conn:  # (the semantic one where the server has pgvector)
            kept = PROJECTIONS + ([SemanticProjection] if semantic_support(conn) is None else [])
        assert {name.partition(".")[0] for name in imported} == {f"rm_{p.name}" for p in kept}
        assert imported["rm_history.messages"] and imported["rm_optimizations.trials"]
        assert imported == read_models(source.url)
        target = PostgresTarget(url)
        assert (await asyncio.to_thread(verify_chains, target)).intact

        # Erased events were stored byte for byte: the same chains, and still unreadable.
        carol = source.users["carol"]
        carols = sorted({uuid.UUID(line["aggregate_id"]) for line in source.lines if line["owner"] == carol})
        assert stream_hashes(url, carols) == stream_hashes(source.url, carols)
        keys = KeyRing(target)
        assert keys.is_erased(carol)
        with pytest.raises(UserErased):
            keys.key_for_writing(carol)
        store = EventStore(target, keys=keys)
        try:
            assert store.load_many(carols) == {}
            # Readable events were sealed again, with the new store's key for their owner.
            alices = store.load_many([source.ids["conversation"]])
            conversation = alices[source.ids["conversation"]]
            assert isinstance(conversation, Conversation) and conversation.title == "plans, renamed"
        finally:
            store.close()
            keys.close()
        own, theirs = (stream_hashes(u, [source.ids["conversation"]]) for u in (url, source.url))
        assert len(own) == len(theirs) and own[0][2] != theirs[0][2]
        # System records stay unsealed (the same bytes, so the same chain), as the service writes them.
        erasure = sorted({uuid.UUID(line["aggregate_id"]) for line in source.lines if line["type"] == "DataSubject.Erased"})
        assert erasure and stream_hashes(url, erasure) == stream_hashes(source.url, erasure)

        again = await asyncio.to_thread(chronicle_cli, url, tmp_path, "import", str(source.export))
        assert again.returncode == 1 and "import refused" in again.stderr and "empty store" in again.stderr

        # A service started on the imported store serves the history and refuses the erased user.
        chronicle = await bootstrap(make_settings(url, servers.nats_url, tmp_path))
        try:
            alice = await ChronicleClient.connect(
                chronicle.nats_url, authority.issue(source.users["alice"]), prefix=chronicle.settings.subject_prefix
            )
            carol_client = await ChronicleClient.connect(
                chronicle.nats_url, authority.issue(carol), prefix=chronicle.settings.subject_prefix
            )
            got = await alice.conversations.get(source.ids["conversation"])
            assert [m.content for m in got.messages][:3] == ["plan step 0", "plan step 1", "plan step 2"]
            with pytest.raises(ChronicleError) as erased:
                await carol_client.conversations.start(title="back again")
            assert erased.value.code == "conflict"
            await alice.close()
            await carol_client.close()
        finally:
            await chronicle.stop()
