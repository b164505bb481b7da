"""A projection killed mid-batch restarts where its last commit left it: no double, no gap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient

from entrypoints.bootstrap import Chronicle, bootstrap
from tests.conftest import make_settings
from tests.rows import scalar
from tests.servers import TestServers
from tests.waiting import wait_until


def projection_position(url: str, name: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT position FROM chronicle.projections WHERE name = %s", (name,)).fetchone()
        return row[0] if row else -1


def head(url: str) -> int:
    with psycopg.connect(url) as conn:
        return scalar(conn.execute("SELECT coalesce(max(notification_id), 0) FROM chronicle.events"))


def start_projection_worker(url: str, data_dir: Path, batch_size: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "CHRONICLE_DATABASE_URL": url,
        "CHRONICLE_NATS_URL": "nats://unused",
        "CHRONICLE_DATA_DIR": str(data_dir),
        "CHRONICLE_PROJECTION_BATCH_SIZE": str(batch_size),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "entrypoints.cli", "projections", "run"], env=env, stdout=subprocess.DEVNULL
    )


@pytest.fixture
async def writer_without_projections(
    servers: TestServers, tmp_path: Path
) -> AsyncIterator[tuple[Chronicle, str]]:
    with servers.fresh_database() as url:
        instance = await bootstrap(make_settings(url, servers.nats_url, tmp_path, run_projections=False))
        yield instance, url
        await instance.stop()


async def test_killed_mid_batch_then_restarted_read_model_is_exact(
    writer_without_projections: tuple[Chronicle, str], authority: object, tmp_path: Path
) -> None:
    chronicle, url = writer_without_projections
    client = await ChronicleClient.connect(
        chronicle.nats_url, authority.issue("recovery-user"), prefix=chronicle.settings.subject_prefix  # type: ignore[attr-defined]
    )
    blocker = await client.conversations.start(title="blocker")
    worker = start_projection_worker(url, tmp_path, batch_size=10_000)
    try:
        wait_until(lambda: projection_position(url, "history") >= head(url), "first catch-up")

        # Hold a lock on one read-model row, then write events around it: the worker's next
        # batch applies the earlier events and then waits on that row, mid-transaction.
        lock = psycopg.connect(url)
        lock.execute("SELECT 1 FROM rm_history.conversations WHERE id = %s FOR UPDATE", (blocker.conversation_id,))
        expected: dict[uuid.UUID, list[str]] = {}
        for n in range(20):
            started = await client.conversations.start(title=f"c{n}")
            contents = [f"conversation {n} message {m}" for m in range(5)]
            for content in contents:
                await client.conversations.add_message(started.conversation_id, "user", content)
            expected[started.conversation_id] = contents
            if n == 10:
                await client.conversations.add_message(blocker.conversation_id, "user", "in the middle")
        position_before = projection_position(url, "history")

        def worker_blocked_on_lock() -> bool:
            with psycopg.connect(url) as conn:
                return bool(
                    scalar(conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock'"
                    ))
                )

        wait_until(worker_blocked_on_lock, "the worker to block mid-batch")
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        lock.rollback()
        lock.close()
        assert projection_position(url, "history") == position_before, "a killed batch commits nothing"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    restarted = start_projection_worker(url, tmp_path, batch_size=7)
    try:
        wait_until(lambda: projection_position(url, "history") >= head(url), "recovery")
        wait_until(lambda: projection_position(url, "stats") >= head(url), "stats recovery")
        for conversation_id, contents in expected.items():
            conversation = await client.conversations.get(conversation_id)
            assert [m.content for m in conversation.messages] == contents
            assert conversation.message_count == len(contents)
        blocked = await client.conversations.get(blocker.conversation_id)
        assert [m.content for m in blocked.messages] == ["in the middle"]
        stats = await client.conversations.stats()
        assert (stats.total_conversations, stats.total_messages) == (21, 101)
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=30)
        await client.close()
