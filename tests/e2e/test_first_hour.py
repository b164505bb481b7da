"""A newcomer's and an operator's first hour with `chronicle serve` on the embedded default:
the operator's commands beside it, a desktop MCP configuration across a restart, and bad
settings or unreachable servers said in one line, within seconds, leaving nothing running."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from chronicle_client.connection import ChronicleClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from adapters.embedded import free_port
from tests.e2e.test_serve import Served

CHRONICLE = Path(sys.executable).parent / "chronicle"  # the README's `/path/to/chronicle/.venv/bin/chronicle`
EXIT_WITHIN = 30  # seconds


def cli(data_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`chronicle ARGS` as an operator runs it: nothing set but the data dir."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    return subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", *args],
        env={**clean, "CHRONICLE_DATA_DIR": str(data_dir), "CHRONICLE_METRICS_PORT": "0", **(env or {})},
        capture_output=True, text=True, timeout=timeout,
    )


def processes_using(data_dir: Path) -> list[str]:
    """The command lines of the processes (embedded servers) that run on data_dir."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(data_dir) in command:
                found.append(command)
    return found


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "chronicle"


def tool_result(called: Any) -> dict[str, Any]:
    assert not called.is_error, called.content
    return dict(called.structured_content)


@pytest.mark.timeout(600)
async def test_operator_commands_and_a_desktop_mcp_config_work_beside_serve_and_across_a_restart(data_dir: Path) -> None:
    served = await asyncio.to_thread(Served, data_dir, "chronicle")
    try:
        token = await asyncio.to_thread(served.token, "dave")
        client = await ChronicleClient.connect(str(served.ready["nats"]), token)
        poster = await client.artifacts.generate("a lighthouse poster")
        await client.close()

        # The README's operator commands, while the service runs on the embedded default.
        for args in (["projections", "status"], ["audit", "verify", "--all"],
                     ["export", "--all", "-o", str(data_dir.parent / "all.jsonl")],
                     ["replay", str(poster.artifact_id)], ["artifacts", "show", str(poster.artifact_id)],
                     ["token", "carol", "--role", "auditor"], ["erase-user", "mallory"]):
            done = await asyncio.to_thread(cli, data_dir, *args)
            assert done.returncode == 0, f"chronicle {' '.join(args)}: {done.stderr}"
        assert b"lighthouse poster" in (data_dir.parent / "all.jsonl").read_bytes()
        second = await asyncio.to_thread(cli, data_dir, "serve")
        assert second.returncode != 0 and len(second.stderr.splitlines()) == 1
        assert f"(pid {served.process.pid}) already runs the embedded servers" in second.stderr

        # The README's desktop MCP configuration: the command, a token, the data dir; no URL.
        mcp_env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        mcp_env.update({"CHRONICLE_TOKEN": token, "CHRONICLE_DATA_DIR": str(data_dir)})
        command = str(CHRONICLE) if CHRONICLE.exists() else sys.executable
        args = ["mcp"] if CHRONICLE.exists() else ["-m", "entrypoints.cli", "mcp"]
        async with Client(StdioServerParameters(command=command, args=args, env=mcp_env), read_timeout_seconds=60) as mcp:
            history = tool_result(await mcp.call_tool("get_history", {"limit": 10}))
            assert [a["id"] for a in history["artifacts"]] == [str(poster.artifact_id)]

            # The README's console: the bundle at the root; on the embedded default one click signs
            # the person at the machine in, as a roleless user whose token the service takes.
            url = str(served.ready["http"])
            async with httpx.AsyncClient(base_url=url) as http:
                assert "default-src 'none'" in (await http.get("/")).headers["content-security-policy"]
                signed = await http.post("/api/console/local-sign-in", headers={"Origin": url})
                assert signed.status_code == 200 and signed.json()["userId"] == "local"
                runs = await http.get("/api/hitl/runs", headers={"Authorization": f"Bearer {signed.json()['token']}"})
                assert runs.status_code == 200 and runs.json()["items"] == []

            first_nats = served.ready["nats"]
            assert await asyncio.to_thread(served.stop) == 0
            served = await asyncio.to_thread(Served, data_dir, "chronicle")
            assert served.ready["nats"] == first_nats  # the embedded NATS keeps its port

            made = tool_result(await mcp.call_tool("generate_layout", {"query": "a tide table"}))
            history = tool_result(await mcp.call_tool("get_history", {"limit": 10}))
            assert {a["id"] for a in history["artifacts"]} == {str(poster.artifact_id), made["artifact_id"]}
    finally:
        if served.process.poll() is None:
            assert await asyncio.to_thread(served.stop) == 0
    assert processes_using(data_dir) == []


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield int(listening.getsockname()[1])


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CHRONICLE_NATS_URL", "garbage"),
        ("CHRONICLE_NATS_URL", "nats://127.0.0.1:1"),
        ("CHRONICLE_DATABASE_URL", "notaurl"),
        ("CHRONICLE_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/chronicle"),
        ("CHRONICLE_HTTP_PORT", "abc"),
        ("CHRONICLE_HTTP_PORT", "taken"),
    ],
)
def test_a_bad_setting_or_an_unreachable_server_is_one_line_and_a_quick_exit(
    data_dir: Path, taken_port: int, variable: str, value: str
) -> None:
    began = time.monotonic()
    failed = cli(data_dir, "serve", env={variable: str(taken_port) if value == "taken" else value}, timeout=EXIT_WITHIN)
    assert time.monotonic() - began < EXIT_WITHIN
    assert failed.returncode == 1
    said = [line for line in failed.stderr.splitlines() if not line.startswith("{")]  # (JSON: the log)
    assert len(said) == 1 and said[0].startswith("chronicle serve: ") and variable in said[0], failed.stderr
    assert "Traceback" not in failed.stderr and "nats error" not in failed.stderr
    assert processes_using(data_dir) == []


def test_a_signal_stops_a_start_that_waits_for_a_silent_nats(data_dir: Path) -> None:
    """A NATS that takes the connection and never says a word: SIGTERM ends the start at once,
    and what it started (the embedded Postgres) is stopped."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        process = subprocess.Popen(
            [sys.executable, "-m", "entrypoints.cli", "serve"],
            env={**clean, "CHRONICLE_DATA_DIR": str(data_dir), "CHRONICLE_METRICS_PORT": "0",
                 "CHRONICLE_HTTP_PORT": str(free_port()), "CHRONICLE_NATS_URL": f"nats://127.0.0.1:{silent.getsockname()[1]}"},
            stderr=subprocess.PIPE, text=True,
        )
        try:
            silent.settimeout(120)
            connection, _ = silent.accept()  # the start is waiting for NATS now (Postgres is up)
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=EXIT_WITHIN)
            connection.close()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert time.monotonic() - began < EXIT_WITHIN
    logged = [orjson.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert process.returncode == 0 and [line["msg"] for line in logged][-1] == "stopped while starting", stderr
    assert processes_using(data_dir) == []
