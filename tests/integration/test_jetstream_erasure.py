"""Preview upload parts go to JetStream sealed under the uploader's key: a delete leaves the
bytes in the stream's block files, and after an erasure they open no more (issue 30)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from chronicle_client import ChronicleClient
from chronicle_contract.artifacts import upload_bucket

from adapters.auth import TokenAuthority
from adapters.embedded import EmbeddedNats
from entrypoints.bootstrap import bootstrap
from tests.conftest import make_settings
from tests.servers import TestServers


@pytest.fixture
def own_nats() -> Iterator[tuple[EmbeddedNats, Path]]:
    """A nats-server of this test's own, whose store directory the test reads."""
    with tempfile.TemporaryDirectory(prefix="chronicle-js-") as scratch:
        server = EmbeddedNats(Path(scratch))
        server.start()
        try:
            yield server, Path(scratch)
        finally:
            server.stop()


def files_holding(directory: Path, needle: bytes) -> list[str]:
    return [str(f) for f in directory.rglob("*") if f.is_file() and needle in f.read_bytes()]


async def test_an_erased_users_upload_parts_are_nowhere_in_jetstreams_files(
    own_nats: tuple[EmbeddedNats, Path], servers: TestServers, authority: TokenAuthority
) -> None:
    server, scratch = own_nats
    canary = f"CANARY-{uuid.uuid4().hex}".encode()
    user = f"uploader-{uuid.uuid4().hex[:8]}"
    with servers.fresh_database() as url:
        chronicle = await bootstrap(make_settings(url, server.url, scratch / "data"))
        prefix = chronicle.settings.subject_prefix
        try:
            client = await ChronicleClient.connect(server.url, authority.issue(user), prefix=prefix)
            admin = await ChronicleClient.connect(
                server.url, authority.issue("admin-1", claims={"roles": ["admin"]}), prefix=prefix
            )
            try:
                artifact = await client.artifacts.store({"type": "page", "label": "x"}, query="preview owner")
                preview = canary * (700 * 1024 // len(canary))  # over 512 KiB: it goes up in parts
                await client.artifacts.cache_preview(artifact.artifact_id, preview)  # claimed, then deleted
                assert await client.artifacts.preview(artifact.artifact_id) == preview
                await admin.request("cmd.user.erase", {"user_id": user})
            finally:
                await client.close()
                await admin.close()

            # The scan finds what is there: bytes put and deleted unsealed stay in the block file.
            planted = f"PLANTED-{uuid.uuid4().hex}".encode()
            nc = await nats.connect(server.url)
            try:
                store = await nc.jetstream().object_store(upload_bucket(prefix))
                await store.put("planted", planted * 100)
                await store.delete("planted")
            finally:
                await nc.close()
        finally:
            await chronicle.stop()
    server.stop()  # (cleanly: whatever it buffered is in its files)

    store_dir = scratch / "nats"
    assert files_holding(store_dir, planted)
    assert files_holding(store_dir, canary) == []
