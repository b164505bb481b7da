"""The runnable examples run, against the test servers, and tell the story they promise."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from tests.conftest import new_prefix
from tests.servers import TestServers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


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
