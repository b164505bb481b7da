"""Rebuilding read models from the events, while the service keeps serving and writing."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from psycopg.sql import SQL, Identifier

from adapters.auth import TokenAuthority
from adapters.read_side.rebuild import rebuild_all
from adapters.store.postgres import PostgresTarget
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.read_models import PROJECTIONS, postgres_read_models
from entrypoints.rebuild_helper import HelperFailed, RebuildHelper
from tests.conftest import make_settings
from tests.servers import TestServers

TABLES = {
    "rm_history": ["sessions", "conversations", "messages"],
    "rm_stats": ["users", "conversations", "tags"],
    "rm_search": ["conversations", "messages"],
    "rm_hitl": ["conversations", "checkpoints"],
    "rm_optimizations": ["optimizations", "rounds", "trials"],
    "rm_lineage": ["candidates", "candidate_parents"],
}


def snapshot(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every read-model row, in a stable order, to compare two builds."""
    with psycopg.connect(url) as conn:
        return {
            f"{schema}.{table}": conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY 1, 2").fetchall()
            for schema, tables in TABLES.items()
            for table in tables
        }


def chronicle_cli(url: str, data_dir: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHRONICLE_DATABASE_URL": url, "CHRONICLE_DATA_DIR": str(data_dir),
           **{f"CHRONICLE_{name.upper()}": value for name, value in settings.items()}}
    return subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


async def fill(client: ChronicleClient, conversations: int, messages: int) -> None:
    session = await client.sessions.create("rebuild", tags=["s"])
    for n in range(conversations):
        started = await client.conversations.start(tags=[f"tag{n % 3}"], session_id=session.session_id)
        for m in range(messages):
            await client.conversations.add_message(started.conversation_id, "user", f"note {n}.{m} about kites")
        if n % 4 == 0:
            await client.conversations.update(started.conversation_id, title=f"renamed {n}", tags=["renamed"])
        if n % 5 == 0:
            await client.conversations.delete(started.conversation_id)
    state = client.optimization(name="rebuild", optimizer="evolutionary")
    parent = None
    for r in range(2):
        round = await state.start_round()
        for t in range(3):
            extra: dict[str, Any] = {"parents": [parent], "origin": "mutation"} if parent else {}
            parent = (await state.record_trial(round, candidate={"g": r * 3 + t}, score=t, extra=extra)).candidate_id
        await state.end_round(round)


async def test_rebuild_reproduces_live_read_models_while_writes_continue(
    instance: tuple[Chronicle, str], authority: TokenAuthority, tmp_path: Path
) -> None:
    chronicle, url = instance
    client = await ChronicleClient.connect(
        chronicle.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=chronicle.settings.subject_prefix
    )
    await fill(client, conversations=12, messages=4)

    # Writes keep coming while another process rebuilds; the swap must not lose any.
    writing = asyncio.create_task(fill(client, conversations=6, messages=3))
    rebuilt = await asyncio.to_thread(chronicle_cli, url, tmp_path, "projections", "rebuild", "all")
    await writing
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "history: rebuilt from" in rebuilt.stdout

    await client.conversations.list()  # waits for the read models to include the last write
    await client.conversations.stats()
    await client.conversations.search("kites")
    live = snapshot(url)

    # Again with a helper process building every read model but search (as a long log has).
    again = await asyncio.to_thread(
        chronicle_cli, url, tmp_path, "projections", "rebuild", "all", rebuild_helper_from="1"
    )
    assert again.returncode == 0, again.stderr
    assert snapshot(url) == live, "a rebuild from the events equals the live read models"
    # Every fifth conversation was deleted: 9 of 12 with 4 messages, 4 of 6 with 3.
    assert len(live["rm_history.messages"]) == len(live["rm_search.messages"]) == 9 * 4 + 4 * 3

    status = await asyncio.to_thread(chronicle_cli, url, tmp_path, "projections", "status")
    assert status.returncode == 0
    *table, search = [line for line in status.stdout.splitlines()[1:] if not line.startswith("parked:")]
    rows = [line.split() for line in table]
    assert {r[0] for r in rows} == {p.name for p in PROJECTIONS} | ({"semantic"} if search.startswith("search: hybrid") else set())
    assert all(r[3] == "0" for r in rows), status.stdout  # no lag
    assert search.startswith(("search: hybrid", "search: full text only: the pgvector extension is not installed"))
    await client.close()


async def test_rebuild_of_an_unknown_projection_fails_clearly(instance: tuple[Chronicle, str], tmp_path: Path) -> None:
    _, url = instance
    result = await asyncio.to_thread(chronicle_cli, url, tmp_path, "projections", "rebuild", "nonsense")
    assert result.returncode != 0
    assert "unknown projection" in result.stderr and "history" in result.stderr


async def filled(chronicle: Chronicle, authority: TokenAuthority, conversations: int, messages: int) -> None:
    """A user's history written (`fill`), and the live read models caught up with it."""
    client = await ChronicleClient.connect(
        chronicle.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=chronicle.settings.subject_prefix
    )
    await fill(client, conversations, messages)
    await client.conversations.search("kites")  # (waits for the read models to include the last write)
    await client.close()


def rebuild_recording(
    chronicle: Chronicle, helper: RebuildHelper | None, reached: dict[str, set[str]] | None = None
) -> dict[str, int]:
    """`rebuild_all` of every read model the instance keeps; `reached` records, per read
    model, the threads its progress was reported on once it reached the log's end."""

    def progress(name: str, done: int, total: int) -> None:
        if reached is not None and done >= total:
            reached.setdefault(name, set()).add(threading.current_thread().name)

    models = postgres_read_models(chronicle.settings, chronicle.read_models.classes)
    return rebuild_all(chronicle.target, models, batch_size=40, helper=helper, progress=progress)


async def test_a_helper_process_builds_every_read_model_but_search_as_one_process_does(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    chronicle, url = instance
    await filled(chronicle, authority, conversations=8, messages=3)

    reached: dict[str, set[str]] = {}
    helper = RebuildHelper(chronicle.settings, chronicle.target, from_events=1)
    helped = await asyncio.to_thread(rebuild_recording, chronicle, helper, reached)
    rows = snapshot(url)
    alone = await asyncio.to_thread(rebuild_recording, chronicle, None)
    assert helped == alone and alone["history"] > 0
    assert snapshot(url) == rows, "the read models the helper built equal those one process builds"
    # Every read model reported its end; all but search's came from the helper's lines.
    assert set(reached) == set(alone)
    assert {name for name, threads in reached.items() if threads == {"rebuild-helper-reader"}} == set(alone) - {"search"}


async def test_a_failed_helper_fails_the_rebuild_and_the_next_one_builds_all(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    chronicle, url = instance
    await filled(chronicle, authority, conversations=4, messages=2)
    rows = snapshot(url)

    nowhere = PostgresTarget("postgresql://postgres@127.0.0.1:1/nowhere")  # (the helper cannot connect)
    with pytest.raises(HelperFailed):
        await asyncio.to_thread(rebuild_recording, chronicle, RebuildHelper(chronicle.settings, nowhere, from_events=1))
    # The locks were let go: a rebuild of a log shorter than a helper's threshold does without it.
    unused = RebuildHelper(chronicle.settings, nowhere, from_events=10**9)
    rebuilt = await asyncio.to_thread(rebuild_recording, chronicle, unused)
    assert rebuilt["history"] > 0 and snapshot(url) == rows


async def test_a_first_start_on_a_long_log_builds_the_read_models_with_a_helper(
    instance: tuple[Chronicle, str], authority: TokenAuthority, servers: TestServers, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    chronicle, url = instance
    await filled(chronicle, authority, conversations=6, messages=3)
    rows = snapshot(url)
    await chronicle.stop()
    with psycopg.connect(url, autocommit=True) as conn:  # (a store whose read models were never built)
        for schema in {name.split(".")[0] for name in rows} | {f"rm_{p.name}" for p in PROJECTIONS}:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))
        conn.execute("DELETE FROM chronicle.projections WHERE name = ANY(%s)", ([p.name for p in PROJECTIONS],))

    # "Long" from one event on; the engine in this process, so that its log is seen here.
    caplog.set_level(logging.INFO, logger="adapters.read_side.rebuild")
    second = await bootstrap(make_settings(url, servers.nats_url, tmp_path, rebuild_helper_from=1, projection_process=False))
    try:
        assert second.engine is not None and await asyncio.to_thread(second.engine.wait_prepared, 120)
        assert snapshot(url) == rows
    finally:
        await second.stop()
    helped = [r for r in caplog.records if r.getMessage() == "rebuilding with a helper process"]
    assert helped and helped[0].here == ["search"] and "history" in helped[0].helper  # type: ignore[attr-defined]
