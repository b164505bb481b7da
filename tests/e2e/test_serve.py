"""`chronicle serve` as a subprocess with its embedded Postgres and NATS, driven over NATS."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import nats.errors
import orjson
import pytest
from chronicle_client.connection import ChronicleClient

from adapters.embedded import free_port

READY_TIMEOUT = 120


class Served:
    """A running `chronicle serve` and the fields of its ready line."""

    def __init__(self, data_dir: Path, prefix: str):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        env.update({"CHRONICLE_DATA_DIR": str(data_dir), "CHRONICLE_SUBJECT_PREFIX": prefix, "CHRONICLE_CHECK_REPLIES": "true",
                    "CHRONICLE_HTTP_PORT": str(free_port())})
        self.env = env
        self.process = subprocess.Popen(
            [sys.executable, "-m", "entrypoints.cli", "serve"], env=env, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[dict[str, object]] = []
        try:
            self.ready = self._read_until("ready")
        except BaseException:
            self.process.kill()  # never leave a half-started service behind
            self.process.wait()
            raise

    def _read_until(self, message: str) -> dict[str, object]:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                rest = [next(self.process.stderr, "") for _ in range(40)]
                raise AssertionError(f"serve wrote lines that are not JSON: {line}{''.join(rest)}") from None
            self.lines.append(entry)
            if entry.get("msg") == message:
                return entry
        raise AssertionError(f"serve exited before '{message}': {self.lines}")

    def token(self, user: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "entrypoints.cli", "token", user],
            env=self.env, capture_output=True, text=True, check=True,
        ).stdout.strip()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        self._read_until("stopped")
        return self.process.wait(timeout=60)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "chronicle"


@pytest.mark.timeout(300)
async def test_serve_embedded_restart_keeps_data(data_dir: Path) -> None:
    served = await asyncio.to_thread(Served, data_dir, "e2e")
    try:
        assert served.ready["postgres"] and str(served.ready["nats"]).startswith("nats://127.0.0.1:")
        assert served.ready["subjects"] == "e2e.cmd.>, e2e.query.>"
        assert served.ready["rebuilding"] == []  # a fresh database's read models exist before ready
        # The embedded NATS is closed: no connection without a token, no secret in the log.
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(str(served.ready["nats"]), allow_reconnect=False, max_reconnect_attempts=0)
        secrets = orjson.loads((data_dir / "nats-secrets.json").read_bytes())
        logged = orjson.dumps(served.lines).decode()
        assert all(secret not in logged for secret in secrets.values())
        token = await asyncio.to_thread(served.token, "erin")
        client = await ChronicleClient.connect(str(served.ready["nats"]), token, prefix="e2e")
        started = await client.conversations.start(tags=["e2e"])
        await client.conversations.add_message(started.conversation_id, "user", "Remember the lighthouse")
        poster = await client.artifacts.generate("a lighthouse poster")
        preview = os.urandom(1_500_000)  # over one NATS message: in parts, through the service
        await client.artifacts.cache_preview(poster.artifact_id, preview, style="print")
        in_flight = [
            asyncio.create_task(client.conversations.add_message(started.conversation_id, "agent", f"reply {n}"))
            for n in range(30)
        ]
        await client.nc.flush()
        exit_code = await asyncio.to_thread(served.stop)
        replies = await asyncio.gather(*in_flight)
        await client.close()
    finally:
        if served.process.poll() is None:
            served.process.kill()
    assert exit_code == 0
    assert len(replies) == 30, "requests delivered before SIGTERM are answered"

    served = await asyncio.to_thread(Served, data_dir, "e2e")
    try:
        client = await ChronicleClient.connect(str(served.ready["nats"]), await asyncio.to_thread(served.token, "erin"), prefix="e2e")
        page = await client.conversations.list(tags=["e2e"], min_position=replies[-1].position)
        assert [c.title for c in page.items] == ["Remember the lighthouse"]
        assert page.items[0].message_count == 31
        hits = await client.conversations.search("lighthouse")
        assert hits.items and hits.items[0].conversation_id == started.conversation_id
        # The embedded default serves the REST API too, over the closed bus, as the token's user.
        async with httpx.AsyncClient(base_url=str(served.ready["http"])) as web:
            listed = await web.get("/api/conversations", params={"tags": "e2e"}, headers={"Authorization": f"Bearer {client.token}"})
            refused = await web.get("/api/conversations", headers={"Authorization": "Bearer forged.token.here"})
        assert listed.json()["conversations"][0]["messageCount"] == 31
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        kept = await client.artifacts.get(poster.artifact_id, include_preview=True)
        assert kept.layout == poster.layout and kept.previews[0].bytes() == preview
        variations = await client.artifacts.variations("lighthouse poster", count=3, base_artifact_id=poster.artifact_id)
        assert [m.status for m in variations.members] == ["stored"] * 3
        await client.close()
    finally:
        assert await asyncio.to_thread(served.stop) == 0
