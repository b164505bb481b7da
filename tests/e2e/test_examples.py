"""The runnable examples run, against the test servers, and tell the story they promise."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

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
                "CHRONICLE_SUBJECT_PREFIX": f"ex{uuid.uuid4().hex[:8]}",
                "CHRONICLE_DATA_DIR": str(tmp_path),
            },
        )
    assert result.returncode == 0, result.stderr
    assert "the original request, from the history: 'Make me a 1:1 sunset image'" in result.stdout
    assert "[hitl_feedback] use 1:1" in result.stdout
    assert result.stdout.rstrip().endswith("Here is your sunset: https://images.example/sunset-1x1.png")
