"""The event feed across a kill -9: `chronicle serve` killed while commands stream in and
started again; a follower sees every committed event once, in order, no gap."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from adapters.auth import TokenAuthority
from tests.conftest import JWT_SECRET, new_prefix
from tests.servers import TestServers
from tests.waiting import eventually


def serve(env: dict[str, str]) -> subprocess.Popen[str]:
    """`chronicle serve` in a process group of its own (with its projection process),
    returned once its ready line is out; the rest of its log is read and dropped."""
    process = subprocess.Popen(
        [sys.executable, "-m", "entrypoints.cli", "serve"], env=env, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if orjson.loads(line).get("msg") == "ready":
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process
    raise AssertionError("serve exited before it was ready")


def log_positions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT notification_id FROM chronicle.events ORDER BY 1")]


@pytest.mark.timeout(240)
async def test_a_follower_sees_no_gap_and_no_duplicate_across_a_kill_9(servers: TestServers, tmp_path: Path) -> None:
    prefix = new_prefix("feed")
    authority = TokenAuthority(secret=JWT_SECRET)
    with servers.fresh_database() as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        env.update({
            "CHRONICLE_DATABASE_URL": url, "CHRONICLE_NATS_URL": servers.nats_url, "CHRONICLE_SUBJECT_PREFIX": prefix,
            "CHRONICLE_JWT_SECRET": JWT_SECRET, "CHRONICLE_DATA_DIR": str(tmp_path), "CHRONICLE_HTTP_PORT": "0",
            "CHRONICLE_JOB_WORKERS": "0",
        })
        service = await asyncio.to_thread(serve, env)
        user = await ChronicleClient.connect(servers.nats_url, authority.issue("writer"), prefix=prefix, timeout=3)
        follower = await ChronicleClient.connect(
            servers.nats_url, authority.issue("loader", claims={"roles": ["feed"], "durables": ["loader"]}), prefix=prefix
        )
        seen: list[int] = []

        async def follow() -> None:
            async for event in follower.events.follow(0, durable="loader"):
                seen.append(event.position)

        try:
            started = await user.conversations.start(title="kill -9 while writing")

            async def write(n: int) -> None:
                with contextlib.suppress(ChronicleError, TimeoutError, Exception):
                    await user.conversations.add_message(started.conversation_id, "user", f"message {n}")

            following = asyncio.create_task(follow())
            writing = [asyncio.create_task(write(n)) for n in range(300)]
            await eventually(lambda: len(seen) >= 50, "the follower to be under way")
            os.killpg(service.pid, signal.SIGKILL)  # mid-stream: writes and publishes in flight
            service.wait()
            await asyncio.gather(*writing)
            service = await asyncio.to_thread(serve, env)
            for n in range(300, 350):  # and more after the restart
                await write(n)
            logged = await asyncio.to_thread(log_positions, url)
            await eventually(lambda: len(seen) >= len(logged), f"the follower to see all {len(logged)} events", timeout=60)
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            assert seen == logged, "every committed event once, in the log's order"
            assert len(logged) > 100
        finally:
            await user.close()
            await follower.close()
            service.send_signal(signal.SIGTERM)
            await asyncio.to_thread(service.wait, 60)
