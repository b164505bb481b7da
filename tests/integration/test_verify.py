"""Verifying read models against a rebuild from the events: clean, while writing, and tampered with."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from psycopg.sql import SQL, Identifier

from adapters.auth import TokenAuthority
from adapters.read_side.compare import compare
from adapters.read_side.verify import Verification, report, verify
from adapters.read_side.views import read_model_of
from adapters.store.postgres import PostgresTarget
from entrypoints import cli
from entrypoints.bootstrap import Chronicle
from entrypoints.read_models import PROJECTIONS
from tests.integration.test_rebuild import chronicle_cli, fill
from tests.rows import scalar


async def connected(chronicle: Chronicle, authority: TokenAuthority) -> ChronicleClient:
    return await ChronicleClient.connect(
        chronicle.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=chronicle.settings.subject_prefix
    )


def verify_all(url: str) -> dict[str, Verification]:
    target = PostgresTarget(url)
    return {p.name: verify(target, read_model_of(p), batch_size=7) for p in PROJECTIONS}  # small batches: many commits


def live_state(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every table of every schema except the event store's, and the tracking rows."""
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname LIKE 'rm\\_%' ORDER BY 1, 2"
        ).fetchall()
        state = {
            f"{schema}.{table}": conn.execute(
                SQL("SELECT * FROM {}.{} t ORDER BY t::text").format(Identifier(schema), Identifier(table))
            ).fetchall()
            for schema, table in tables
        }
        state["tracking"] = conn.execute(
            "SELECT name, position, version, updated_at FROM chronicle.projections ORDER BY name"
        ).fetchall()
        return state


async def caught_up(client: ChronicleClient) -> None:
    """Queries wait for their read models to include this client's last write."""
    await client.conversations.list()
    await client.conversations.stats()
    await client.conversations.search("kites")


async def test_verify_passes_while_the_live_read_models_move_and_changes_nothing(
    instance: tuple[Chronicle, str], authority: TokenAuthority, tmp_path: Path
) -> None:
    chronicle, url = instance
    client = await connected(chronicle, authority)
    await fill(client, conversations=8, messages=3)
    moving = await client.conversations.start(title="moving", tags=["m"])
    loop = asyncio.get_running_loop()

    async def write_and_wait() -> None:
        await client.conversations.add_message(moving.conversation_id, "user", "written during a verify, kites")
        await caught_up(client)

    def write_meanwhile(done: int, total: int) -> None:
        # Called after every batch of the scratch build, the last time inside the comparison's
        # snapshot: each time the live read models move on before the verify goes on.
        asyncio.run_coroutine_threadsafe(write_and_wait(), loop).result(timeout=30)

    target = PostgresTarget(url)
    for projection_class in PROJECTIONS:
        result = await asyncio.to_thread(verify, target, read_model_of(projection_class), batch_size=7, progress=write_meanwhile)
        assert result.ok, "\n".join(report(result))
        with psycopg.connect(url) as conn:
            live_position = scalar(conn.execute("SELECT max(notification_id) FROM chronicle.events"))
        assert 0 < result.position < live_position  # compared at a position the live side had left
        if projection_class.name == "history":
            assert {t.table for t in result.tables} == {"sessions", "conversations", "messages"}
            assert sum(t.live_rows for t in result.tables) > 0

    await caught_up(client)
    await client.close()
    await chronicle.stop()  # nothing else moves: whatever changes now is verify's doing
    before = live_state(url)
    checked = await asyncio.to_thread(chronicle_cli, url, tmp_path, "projections", "verify")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for name in ("history", "stats", "search", "hitl"):
        assert f"{name}: ok at position" in checked.stdout
    assert "verify history" in checked.stderr  # the progress bar
    assert live_state(url) == before, "verify changed the live read models or their tracking"
    with psycopg.connect(url) as conn:
        assert not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname LIKE '%\\_\\_verify'").fetchall()
        assert not conn.execute("SELECT 1 FROM chronicle.projections WHERE name LIKE '%\\_\\_verify'").fetchall()


async def test_verify_catches_rows_changed_behind_the_projections_back(
    instance: tuple[Chronicle, str], authority: TokenAuthority, tmp_path: Path
) -> None:
    chronicle, url = instance
    client = await connected(chronicle, authority)
    await fill(client, conversations=6, messages=3)
    await caught_up(client)
    stray = uuid.uuid4()
    with psycopg.connect(url) as conn:
        changed = conn.execute(
            "UPDATE rm_history.messages m SET message = convert_to('tampered by hand', 'UTF8') FROM rm_history.messages old"
            " WHERE m.conversation_id = old.conversation_id AND m.seq = old.seq"
            " AND (m.conversation_id, m.seq) = (SELECT conversation_id, seq FROM rm_history.messages LIMIT 1)"
            " RETURNING m.conversation_id, m.seq, old.message"
        ).fetchone()
        assert changed is not None
        changed_conversation, changed_seq, original = changed
        deleted_tag = conn.execute(
            "DELETE FROM rm_stats.tags WHERE (owner, term) = (SELECT owner, term FROM rm_stats.tags"
            " WHERE count > 0 ORDER BY owner, term LIMIT 1) RETURNING term"
        ).fetchone()
        assert deleted_tag is not None
        [deleted_term] = deleted_tag
        conn.execute(
            "INSERT INTO rm_search.conversations (id, owner, title, tsv, created_at)"
            " VALUES (%s, 'intruder', 'stray'::bytea, to_tsvector('stray'), now())",
            (stray,),
        )

    results = await asyncio.to_thread(verify_all, url)
    history = {t.table: t for t in results["history"].tables}
    assert (history["messages"].only_live, history["messages"].only_rebuilt) == (1, 1)
    assert history["sessions"].matches and history["conversations"].matches
    (live_side, live_row), (rebuilt_side, rebuilt_row) = history["messages"].samples
    assert (live_side, rebuilt_side) == ("live", "rebuilt")
    assert live_row["conversation_id"] == rebuilt_row["conversation_id"] == changed_conversation
    assert live_row["seq"] == rebuilt_row["seq"] == changed_seq
    assert (live_row["message"], rebuilt_row["message"]) == (b"tampered by hand", original)  # (the original sealed)
    stats = {t.table: t for t in results["stats"].tables}
    assert (stats["tags"].only_live, stats["tags"].only_rebuilt) == (0, 1)
    assert stats["tags"].samples[0][1]["term"] == deleted_term
    assert stats["users"].matches and stats["conversations"].matches
    search = {t.table: t for t in results["search"].tables}
    assert (search["conversations"].only_live, search["conversations"].only_rebuilt) == (1, 0)
    assert search["conversations"].samples == [("live", search["conversations"].samples[0][1])]
    assert search["conversations"].samples[0][1]["id"] == stray
    assert results["hitl"].ok

    checked = await asyncio.to_thread(chronicle_cli, url, tmp_path, "projections", "verify")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    out = checked.stdout
    assert "history: DIFFERENT" in out and "stats: DIFFERENT" in out and "search: DIFFERENT" in out
    assert "hitl: ok" in out
    messages = history["messages"].live_rows
    assert f"messages: live {messages}, rebuilt {messages}, only live 1, only rebuilt 1" in out
    assert "messages only live: {" in out and f"'message': '0x{b'tampered by hand'.hex()}'" in out
    assert "tags only rebuilt: {" in out and f"'term': '{deleted_term}'" in out
    assert f"conversations only live: {{'id': '{stray}'" in out
    only_hitl = await asyncio.to_thread(chronicle_cli, url, tmp_path, "projections", "verify", "hitl")
    assert only_hitl.returncode == 0 and "history" not in only_hitl.stdout
    await client.close()


def test_verify_of_an_unknown_projection_fails_clearly(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test database and a data dir of its own: never the repository's .chronicle.
    monkeypatch.setenv("CHRONICLE_DATABASE_URL", database_url)
    monkeypatch.setenv("CHRONICLE_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        cli.main(["projections", "verify", "history", "nonsense"])
    assert exited.value.code != 0 and "unknown projection(s): nonsense" in str(exited.value.code)


def test_compare_counts_duplicates_and_reads_any_column_type(database_url: str) -> None:
    """Generic over future read models: json (no equality operator) compares as text, a
    duplicated row counts, and a table's shape or absence is reported, not compared."""
    left, right = f"cmp_{uuid.uuid4().hex[:8]}", f"cmp_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        try:
            for schema in (left, right):
                conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
                conn.execute(SQL("CREATE TABLE {}.t (k int, doc json, at point)").format(Identifier(schema)))
            conn.execute(
                SQL("INSERT INTO {}.t VALUES (1, '{{\"a\": 1}}', '(1,2)'), (1, '{{\"a\": 1}}', '(1,2)')").format(
                    Identifier(left)
                )
            )
            conn.execute(SQL("INSERT INTO {}.t VALUES (1, '{{\"a\": 1}}', '(1,2)')").format(Identifier(right)))
            conn.execute(SQL("CREATE TABLE {}.only_left (k int)").format(Identifier(left)))
            conn.execute(SQL("CREATE TABLE {}.shape (k int)").format(Identifier(left)))
            conn.execute(SQL("CREATE TABLE {}.shape (k bigint)").format(Identifier(right)))
            tables = {t.table: t for t in compare(conn, left, right)}
        finally:
            for schema in (left, right):
                conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))
    assert (tables["t"].live_rows, tables["t"].rebuilt_rows, tables["t"].only_live, tables["t"].only_rebuilt) == (
        2,
        1,
        1,
        0,
    )
    assert tables["t"].samples == [("live", {"k": 1, "doc": '{"a": 1}', "at": "(1,2)"})]
    assert tables["only_left"].problem == "in the live read model, but not declared by the projection"
    assert "columns differ" in (tables["shape"].problem or "") and "bigint" in (tables["shape"].problem or "")
