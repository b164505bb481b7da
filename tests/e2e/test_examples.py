"""The runnable examples run, against the test servers, and tell the story they promise."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.rest import build_app
from tests.conftest import new_prefix
from tests.servers import TestServers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )


async def test_rest_conversations_story_over_plain_http(chronicle: Chronicle, authority: TokenAuthority) -> None:
    """Seed 001: a front end's conversations, through the REST API with nothing but HTTP."""
    app = build_app(UserClients(chronicle.nats_url, chronicle.settings.subject_prefix))
    server = await HttpServer(app, "127.0.0.1", free_port()).start()
    try:
        token = authority.issue(f"rest-{uuid.uuid4().hex[:8]}")
        result = await asyncio.to_thread(
            run_example, "rest_conversations.py", {"CHRONICLE_API_URL": server.url, "CHRONICLE_TOKEN": token}
        )
    finally:
        await server.stop()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "2 conversations:"
    assert lines[1].split() == ["Quarterly", "report", "1", "messages", "first:", "'Summarise", "the", "sales", "figures'"]
    assert lines[2].split()[:5] == ["Trip", "to", "Lisbon", "4", "messages"]
    assert lines[3] == "search 'sardines': Trip to Lisbon (Try the grilled <mark>sardines</mark>.)"
    assert "continuing 'Trip to Lisbon' after 4 messages" in lines
    assert "stats: 2 conversations, 6 messages, 3.0 on average, top tags ['food', 'travel', 'work']" in lines
    assert "Book a table for two" in result.stdout and "Lisbon food" in result.stdout
    assert lines[-1] == "after deleting the report: ['Lisbon food']"


async def test_mcp_agent_session_story(chronicle: Chronicle, authority: TokenAuthority) -> None:
    """Seed 000: an agent's session through `chronicle mcp`, with the official SDK's client."""
    token = authority.issue(f"agent-{uuid.uuid4().hex[:8]}")
    result = await asyncio.to_thread(
        run_example, "mcp_agent_session.py",
        {"CHRONICLE_NATS_URL": chronicle.nats_url, "CHRONICLE_SUBJECT_PREFIX": chronicle.settings.subject_prefix,
         "CHRONICLE_TOKEN": token},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "generate_variations" in lines[0] and "refine_layout" in lines[0]
    variations = [line.split()[1] for line in lines if line.startswith("  #")]
    assert len(variations) == 3
    refined = next(line for line in lines if line.startswith("refined ")).split()
    assert refined[3] == variations[1]
    assert "compared: 1 pair(s)" in lines and "history: 4 artifacts" in lines
    assert f"  gen 1 {refined[1]} <- {variations[1]}" in lines


async def test_hitl_error_recovery_story(servers: TestServers, tmp_path: Path) -> None:
    with servers.fresh_database() as url:
        result = await asyncio.to_thread(
            run_example,
            "hitl_error_recovery.py",
            {
                "CHRONICLE_DATABASE_URL": url,
                "CHRONICLE_NATS_URL": servers.nats_url,
                "CHRONICLE_CHECK_REPLIES": "true",
                "CHRONICLE_SUBJECT_PREFIX": new_prefix("ex"),
                "CHRONICLE_DATA_DIR": str(tmp_path),
            },
        )
    assert result.returncode == 0, result.stderr
    assert "the original request, from the history: 'Make me a 1:1 sunset image'" in result.stdout
    assert "[hitl_feedback] use 1:1" in result.stdout
    assert result.stdout.rstrip().endswith("Here is your sunset: https://images.example/sunset-1x1.png")


async def test_optimization_random_search_example(servers: TestServers, tmp_path: Path) -> None:
    with servers.fresh_database() as url:
        env = {
            "CHRONICLE_DATABASE_URL": url,
            "CHRONICLE_NATS_URL": servers.nats_url,
            "CHRONICLE_CHECK_REPLIES": "true",
            "CHRONICLE_SUBJECT_PREFIX": new_prefix("ex"),
            "CHRONICLE_DATA_DIR": str(tmp_path),
        }
        result = await asyncio.to_thread(run_example, "optimization_random_search.py", env)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        rounds = [line.split() for line in lines if line[:5].strip().isdigit()]
        assert [int(r[0]) for r in rounds] == list(range(len(rounds))) and all(r[1] == "8" for r in rounds)
        best_so_far = [float(r[3]) for r in rounds]
        assert best_so_far == sorted(best_so_far), "best so far never gets worse"
        assert "stopped:" in lines[1] and "best so far by trial:" in result.stdout
        ancestry = lines[lines.index("ancestry of the best candidate:") + 1:]
        assert ancestry and "round" in ancestry[0]

        # The CLI shows the same optimization from the read model.
        with psycopg.connect(url) as conn:
            [(optimization_id,)] = conn.execute("SELECT id FROM rm_optimizations.optimizations").fetchall()
        shown = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "entrypoints.cli", "optimizations", "show", str(optimization_id)],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[:len(rounds) + 4] == lines[:len(rounds) + 4]
        missing = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "entrypoints.cli", "optimizations", "show", str(uuid.uuid4())],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        )
        assert missing.returncode != 0 and "not found" in missing.stderr
