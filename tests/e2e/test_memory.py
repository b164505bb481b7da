"""`chronicle serve`'s memory under requests at the size limits: bounded by bytes, not by count (#20)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from chronicle_client.connection import ChronicleClient

from adapters.auth import TokenAuthority
from tests.servers import TestServers

SECRET = "memory-test-secret-that-is-long-enough-for-hs256"
GROWTH_BOUND = 100 * 1024 * 1024  # bytes of RSS 500 near-limit requests may add (the issue's bound)
LAYOUT = {"type": "page", "children": [{"type": "section", "label": "s"}]}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def served(servers: TestServers, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`chronicle serve` on a fresh database of its own; (the process, its subject prefix)."""
    prefix = f"mem{uuid.uuid4().hex[:8]}"
    with servers.fresh_database() as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        env.update({
            "CHRONICLE_DATABASE_URL": url, "CHRONICLE_NATS_URL": servers.nats_url, "CHRONICLE_JWT_SECRET": SECRET,
            "CHRONICLE_SUBJECT_PREFIX": prefix, "CHRONICLE_DATA_DIR": str(tmp_path / "data"), "CHRONICLE_HTTP_PORT": "0",
            "CHRONICLE_EVENT_FEED": "false",
            **{f"CHRONICLE_LIMIT_{name}": "0" for name in
               ("REQUESTS_PER_MINUTE", "SEARCH_PER_MINUTE", "EXPORT_PER_MINUTE", "HEAVY_PER_MINUTE", "IN_FLIGHT_PER_USER")},
        })
        log = tmp_path / "serve.log"
        with log.open("wb") as out:
            process = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "serve"], env=env, stderr=out)
        try:
            deadline = time.monotonic() + 120
            while not any(orjson.loads(line).get("msg") == "ready" for line in log.read_bytes().splitlines()
                          if line.startswith(b"{")):
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            yield process, prefix
        finally:
            process.terminate()
            process.wait(timeout=60)


async def test_five_hundred_requests_at_the_size_limits_grow_the_service_by_less_than_100_mb(
    served: tuple[subprocess.Popen[bytes], str], servers: TestServers,
) -> None:
    process, prefix = served
    token = TokenAuthority(secret=SECRET).issue(f"heavy-{uuid.uuid4().hex[:8]}")
    client = await ChronicleClient.connect(servers.nats_url, token, prefix=prefix, timeout=30)
    big_json = {"k": "x" * (64 * 1024 - 20)}  # CHRONICLE_MAX_JSON_BYTES, less the braces

    async def near_limit_requests(count: int) -> None:
        for n in range(count):
            kind = n % 4
            if kind == 0:  # the largest: a draft of 900,000 characters (a request under NATS's 1 MB)
                await client.artifacts.store(LAYOUT, query=f"q{n}", draft="d" * 900_000)
            elif kind == 1:
                await client.sessions.create(f"s{n}", metadata=big_json)
            elif kind == 2:
                await client.conversations.start(title=f"c{n}", document_context=big_json)
            else:
                started = await client.conversations.start(title=f"m{n}")
                await client.conversations.add_message(started.conversation_id, "user", "m" * 10_000, metadata=big_json)

    try:
        await near_limit_requests(100)  # warm: pools, caches, allocator arenas
        before = rss(process.pid)
        await near_limit_requests(500)
        after = rss(process.pid)
    finally:
        await client.close()
    print(f"service RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MB over 500 near-limit requests")
    assert after - before < GROWTH_BOUND, f"RSS grew {(after - before) / 2**20:.0f} MB (from {before / 2**20:.0f} MB)"
