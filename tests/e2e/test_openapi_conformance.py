"""The OpenAPI document is the truth: schemathesis, an independent tester, generates requests
from it (every check, valid and invalid data, undeclared methods) against a running REST
gateway and finds nothing. It takes a few minutes (marked slow: the default run skips it,
`./dev test -m slow tests/e2e/test_openapi_conformance.py` runs it); the report is written
beside the test's temporary directory as report.txt."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.rest import build_app
from tests.conftest import fresh_chronicle
from tests.servers import TestServers

EXAMPLES = 10  # per operation and phase: bounded, so the whole run takes minutes


# How long a read waits for its minPosition here (the service's default is 5 s): the tester
# asks for positions far past the log by the hundred, each answered (conflict) when its wait
# runs out, and the run should take minutes.
WAIT = 1.0


@pytest.fixture
async def gateway(servers: TestServers, tmp_path: Path) -> AsyncIterator[HttpServer]:
    async with fresh_chronicle(servers, tmp_path / "data", servers.nats_url, query_wait_timeout=WAIT) as (chronicle, _):
        app = build_app(UserClients(chronicle.nats_url, chronicle.settings.subject_prefix))
        server = await HttpServer(app, "127.0.0.1", free_port()).start()
        yield server
        await server.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_schemathesis_finds_nothing(gateway: HttpServer, authority: TokenAuthority, tmp_path: Path) -> None:
    token = authority.issue(f"tester-{uuid.uuid4().hex[:8]}")
    runner = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    tester = await asyncio.create_subprocess_exec(
        # Every check, every operation, no exceptions: schemathesis 4 runs them all unless told
        # otherwise. (A minPosition past the log's head is a `conflict`, so a quiet run answers no
        # 503; the document says that no string holds NUL; the pareto query's objectives carry
        # their directions, so no rule spans two parameters.)
        runner, "run", f"{gateway.url}/openapi.json", "--max-examples", str(EXAMPLES),
        # One worker: hypothesis describes its filters by parsing their source, and CPython 3.11's
        # parser is not safe across threads ("AST constructor recursion depth mismatch", seen
        # once in CI with two workers).
        "--header", f"Authorization: Bearer {token}", "--workers", "1", "--no-color",
        "--phases", "examples,coverage,fuzzing", "--request-timeout", "30",
        cwd=tmp_path, env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await tester.communicate()
    finally:
        if tester.returncode is None:  # (cancelled: the tester goes too)
            tester.kill()
            await tester.wait()
    report = output.decode(errors="replace")
    (tmp_path / "report.txt").write_text(report)
    assert tester.returncode == 0, report[-20_000:]
