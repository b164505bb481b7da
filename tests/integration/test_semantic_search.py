"""Hybrid search (full text + pgvector) on a Postgres that has pgvector (the embedded
pgserver ships it), and full text alone where the semantic read model is not kept."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from adapters.auth import TokenAuthority
from adapters.embedded import EmbeddedPostgres, free_port
from adapters.embedding.hashed import HashedNgramEmbedder
from adapters.read_side.tracking import head_position, tracked_version
from adapters.read_side.verify import verify
from adapters.store.postgres import PostgresTarget
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.mcp import streamable_http_app
from entrypoints.read_models import ReadModels, postgres_read_model
from tests.conftest import ClientFactory, make_settings, new_prefix
from tests.rows import scalar
from tests.servers import TestServers

LAYOUT = {"type": "page", "children": [{"type": "section", "label": "s"}]}


@pytest.fixture(scope="module")
def vector_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Postgres of this module's own with pgvector."""
    postgres = EmbeddedPostgres(tmp_path_factory.mktemp("pgvector"))
    url = postgres.start()
    yield url
    postgres.stop()


@pytest.fixture(scope="module")
async def hybrid(vector_postgres: str, servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    instance = await bootstrap(make_settings(vector_postgres, servers.nats_url, tmp_path_factory.mktemp("hybrid")))
    yield instance
    await instance.stop()


@pytest.fixture
async def people(hybrid: Chronicle, authority: TokenAuthority) -> AsyncIterator[ClientFactory]:
    """`await people(name=None, roles=())`: a client of the hybrid instance."""
    clients: list[ChronicleClient] = []

    async def make(name: str | None = None, roles: tuple[str, ...] = ()) -> ChronicleClient:
        token = authority.issue(name or f"u-{uuid.uuid4().hex[:10]}", claims={"roles": list(roles)} if roles else None)
        clients.append(await ChronicleClient.connect(hybrid.nats_url, token, prefix=hybrid.settings.subject_prefix))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def user(people: ClientFactory) -> ChronicleClient:
    return await people()


async def embedded(instance: Chronicle, *clients: ChronicleClient) -> None:
    """Wait until the semantic read model holds these clients' writes (a search waits for
    the full-text half only)."""
    await instance.positions.wait_for(["semantic"], max(c.last_position or 0 for c in clients), 10)


async def test_a_misspelt_query_finds_by_meaning_what_full_text_misses(hybrid: Chronicle, user: ChronicleClient) -> None:
    dashboard = await user.artifacts.store(LAYOUT, query="analytics dashboard with revenue charts", draft="section: charts")
    await user.artifacts.store(LAYOUT, query="landing page for a coffee shop", draft="section: hero")
    await embedded(hybrid, user)
    found = await user.artifacts.search("anlytics dashbord")
    assert [(h.artifact_id, h.matched_by) for h in found.items] == [(dashboard.artifact_id, ["semantic"])]
    both = await user.artifacts.search("analytics dashboard")
    assert both.items[0].artifact_id == dashboard.artifact_id and both.items[0].matched_by == ["text", "semantic"]
    assert "<mark>analytics</mark>" in both.items[0].snippet
    assert (await user.artifacts.search("zebra migration")).items == []  # nothing alike: no hit at all


async def test_a_hit_both_halves_find_ranks_above_one_only_one_finds(hybrid: Chronicle, user: ChronicleClient) -> None:
    exact = await user.artifacts.store(LAYOUT, query="pricing table with three tiers", draft="table: tiers")
    near = await user.artifacts.store(LAYOUT, query="pricng tabel", draft="tabel: tiers")  # misspelt: meaning only
    await embedded(hybrid, user)
    found = await user.artifacts.search("pricing table")
    assert [h.artifact_id for h in found.items] == [exact.artifact_id, near.artifact_id]
    assert [h.matched_by for h in found.items] == [["text", "semantic"], ["semantic"]]
    assert [h.rank for h in found.items] == [1, 2]


async def test_conversation_messages_and_titles_are_found_by_meaning(hybrid: Chronicle, user: ChronicleClient) -> None:
    started = await user.conversations.start(title="Portal help")
    asked = await user.conversations.add_message(started.conversation_id, "user", "How do I reset my password on the portal?")
    await user.conversations.add_message(started.conversation_id, "agent", "The weather is nice today")
    await embedded(hybrid, user)
    found = await user.conversations.search("pasword reset")
    assert [(h.message_id, h.matched_by) for h in found.items] == [(asked.message_id, ["semantic"])]
    assert found.items[0].snippet.startswith("How do I")
    titles = await user.conversations.search("portl")  # a title, by meaning
    assert [(h.conversation_id, h.message_id) for h in titles.items][:1] == [(started.conversation_id, None)]


async def test_another_users_near_duplicate_is_never_found(hybrid: Chronicle, people: ClientFactory) -> None:
    alice, bob = await people(), await people()
    await alice.artifacts.store(LAYOUT, query="quarterly merger strategy memo", draft="secret")
    started = await alice.conversations.start(title="merger")
    await alice.conversations.add_message(started.conversation_id, "user", "quarterly merger strategy memo")
    mine = await bob.artifacts.store(LAYOUT, query="holiday photos")
    bob.observed(alice.last_position)
    await embedded(hybrid, bob)
    assert (await bob.artifacts.search("quarterly merger strategy memo")).items == []
    assert (await bob.artifacts.search("holiday fotos")).items[0].artifact_id == mine.artifact_id
    assert (await bob.conversations.search("quarterly merger strategy memo")).items == []


async def test_erasure_leaves_no_vector_of_the_user(hybrid: Chronicle, people: ClientFactory, vector_postgres: str) -> None:
    name = f"erased-{uuid.uuid4().hex[:8]}"
    client = await people(name)
    await client.artifacts.store(LAYOUT, query="canary artifact text")
    started = await client.conversations.start(title="canary title")
    await client.conversations.add_message(started.conversation_id, "user", "canary message")
    await embedded(hybrid, client)
    counts = await asyncio.to_thread(semantic_rows_of, vector_postgres, name)
    assert counts == {"artifacts": 1, "conversations": 1, "messages": 1}
    admin = await people("admin-1", roles=("admin",))
    erased = await admin.request("cmd.user.erase", {"user_id": name})
    await hybrid.positions.wait_for(["semantic"], erased["position"], 10)
    assert await asyncio.to_thread(semantic_rows_of, vector_postgres, name) == {
        "artifacts": 0, "conversations": 0, "messages": 0
    }


def semantic_rows_of(url: str, owner: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {
            table: scalar(conn.execute(f"SELECT count(*) FROM rm_semantic.{table} WHERE owner = %s", (owner,)))
            for table in ("artifacts", "conversations", "messages")
        }


async def test_a_rebuild_gives_the_live_read_model(hybrid: Chronicle, user: ChronicleClient) -> None:
    started = await user.conversations.start(title="to rebuild")
    for n in range(5):
        await user.conversations.add_message(started.conversation_id, "user", f"message number {n} about gardens")
    await user.conversations.update(started.conversation_id, title="gardening notes")
    await user.artifacts.store(LAYOUT, query="kept artifact")
    deleted = await user.conversations.start(title="soon deleted")
    await user.conversations.add_message(deleted.conversation_id, "user", "gone soon")
    await user.conversations.delete(deleted.conversation_id)
    await hybrid.positions.wait_for(["semantic"], user.last_position, 10)
    [semantic] = [p for p in hybrid.read_models.classes if p.name == "semantic"]
    result = await asyncio.to_thread(
        verify, hybrid.target, postgres_read_model(hybrid.settings, semantic), batch_size=3
    )
    assert result.ok, result


async def test_another_embedder_rebuilds_the_read_model_in_its_own_space(
    vector_postgres: str, servers: TestServers, authority: TokenAuthority, tmp_path: Path,
) -> None:
    url = await asyncio.to_thread(fresh_database_on, vector_postgres)
    first = make_settings(url, servers.nats_url, tmp_path)
    await (await bootstrap(first)).stop()
    before = await asyncio.to_thread(version_of, PostgresTarget(url))
    assert await asyncio.to_thread(column_type, url) == "vector(256)"
    smaller = await bootstrap(first.model_copy(update={"embedding_dimensions": 64}))  # a restart with another embedder
    try:
        assert await asyncio.to_thread(version_of, PostgresTarget(url)) != before
        assert await asyncio.to_thread(column_type, url) == "vector(64)"
        client = await ChronicleClient.connect(smaller.nats_url, authority.issue(f"u-{uuid.uuid4().hex[:8]}"),
                                               prefix=smaller.settings.subject_prefix)
        try:
            made = await client.artifacts.store(LAYOUT, query="orchard irrigation plan")
            await embedded(smaller, client)
            assert (await client.artifacts.search("orchrd irigation")).items[0].artifact_id == made.artifact_id
        finally:
            await client.close()
    finally:
        await smaller.stop()


def fresh_database_on(url: str) -> str:
    name = f"semantic_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return psycopg.conninfo.make_conninfo(url, dbname=name)


def log_head(instance: Chronicle) -> int:
    with instance.target.connect(autocommit=True) as conn:
        return head_position(conn)


def version_of(target: PostgresTarget) -> int | None:
    with target.connect(autocommit=True) as conn:
        return tracked_version(conn, "semantic")


def column_type(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'rm_semantic.artifacts'::regclass AND attname = 'embedding'"
        ).fetchone()
        assert row is not None
        return str(row[0])


async def test_get_history_with_a_query_is_hybrid_over_mcp(hybrid: Chronicle, authority: TokenAuthority) -> None:
    """Seed 000's get_history(query=...): semantic search within history."""
    token = authority.issue(f"mcp-{uuid.uuid4().hex[:8]}")
    app = streamable_http_app(hybrid.nats_url, hybrid.settings.subject_prefix)
    server = await HttpServer(app, "127.0.0.1", free_port()).start()
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
                made = await client.call_tool("generate_layout", {"query": "recipe card with ingredients list"})
                assert not made.is_error, made.content
                artifact_id = dict(made.structured_content)["artifact_id"]
                await hybrid.positions.wait_for(["semantic"], await asyncio.to_thread(log_head, hybrid), 10)
                found = await client.call_tool("get_history", {"query": "recipie ingredient"})
                assert not found.is_error, found.content
                hits: list[dict[str, Any]] = dict(found.structured_content)["artifacts"]
                assert [(h["artifact_id"], h["matched_by"]) for h in hits] == [(artifact_id, ["semantic"])]
    finally:
        await server.stop()


async def test_without_pgvector_or_an_embedder_search_is_full_text_and_status_says_why(
    hybrid: Chronicle, connect: ClientFactory, chronicle: Chronicle, settings: Any, tmp_path: Path,
) -> None:
    # The suite's shared database: semantic search is kept exactly when its server has pgvector.
    with chronicle.target.connect(autocommit=True) as conn:
        has_vector = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None
    shared = ReadModels(settings)
    await asyncio.to_thread(shared.choose, chronicle.target)
    assert (shared.semantic_off is None) == has_vector
    if not has_vector:
        assert "pgvector extension is not installed" in (shared.semantic_off or "")
        client = await connect()
        made = await client.artifacts.store(LAYOUT, query="analytics dashboard")
        found = await client.artifacts.search("analytics dashboard")
        assert [(h.artifact_id, h.matched_by) for h in found.items] == [(made.artifact_id, ["text"])]
        assert (await client.artifacts.search("anlytics dashbord")).items == []
    # No embedder: full text even where pgvector is, and `projections status` says so.
    env = {"CHRONICLE_DATABASE_URL": str(hybrid.settings.database_url), "CHRONICLE_DATA_DIR": str(tmp_path),
           "CHRONICLE_EMBEDDER": "none", "PATH": "/usr/bin:/bin"}
    printed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "entrypoints.cli", "projections", "status"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert "search: full text only: no embedder is configured (CHRONICLE_EMBEDDER=none)" in printed.stdout
    assert "semantic" not in printed.stdout.split("search:")[0]  # not among the read models kept


class EmbeddingsServer:
    """A real OpenAI-compatible `/v1/embeddings` endpoint on loopback, embedding with the
    hashed embedder (a stand-in for a model), that can be made to fail."""

    def __init__(self) -> None:
        embedder, server_of = HashedNgramEmbedder(), self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server_of.calls += 1
                reply: dict[str, Any]
                if server_of.failing:
                    status, reply = 503, {"error": {"message": "overloaded"}}
                else:
                    vectors = embedder.embed(body["input"])
                    status, reply = 200, {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}
                payload = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.failing, self.calls = False, 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_an_openai_compatible_endpoint_embeds_and_its_outage_leaves_full_text_and_the_other_read_models(
    vector_postgres: str, servers: TestServers, authority: TokenAuthority, tmp_path: Path,
) -> None:
    endpoint = EmbeddingsServer()
    url = await asyncio.to_thread(fresh_database_on, vector_postgres)
    instance = await bootstrap(make_settings(
        url, servers.nats_url, tmp_path, embedder="openai", openai_url=endpoint.url, embedding_model="local",
        embedding_dimensions=256,
    ))
    client = await ChronicleClient.connect(instance.nats_url, authority.issue(f"u-{uuid.uuid4().hex[:8]}"),
                                           prefix=instance.settings.subject_prefix)
    try:
        made = await client.artifacts.store(LAYOUT, query="analytics dashboard with revenue charts")
        await embedded(instance, client)
        found = await client.artifacts.search("anlytics dashbord")
        assert [(h.artifact_id, h.matched_by) for h in found.items] == [(made.artifact_id, ["semantic"])]
        assert endpoint.calls >= 2  # the projection's and the search's

        endpoint.failing = True
        later = await client.artifacts.store(LAYOUT, query="weather forecast widget")
        # The other read models keep up (the client's read waits for them), and search
        # answers by full text while the words cannot be embedded.
        found = await client.artifacts.search("weather forecast")
        assert [(h.artifact_id, h.matched_by) for h in found.items] == [(later.artifact_id, ["text"])]
        assert (await client.artifacts.get(later.artifact_id)).query == "weather forecast widget"

        endpoint.failing = False  # back: the semantic read model catches up by itself
        await embedded(instance, client)
        found = await client.artifacts.search("wether forcast")
        assert [(h.artifact_id, h.matched_by) for h in found.items] == [(later.artifact_id, ["semantic"])]
    finally:
        await client.close()
        await instance.stop()
        endpoint.close()


async def test_an_instance_configured_with_another_embedder_answers_by_full_text_meanwhile(
    hybrid: Chronicle, people: ClientFactory, authority: TokenAuthority, tmp_path: Path,
) -> None:
    """A rolling upgrade to another embedder: the new instance's words are vectors of another
    size than the read model's (until its rebuild), so it ranks by full text, without error."""
    name = f"u-{uuid.uuid4().hex[:8]}"
    writer = await people(name)
    made = await writer.artifacts.store(LAYOUT, query="analytics dashboard with revenue charts")
    await embedded(hybrid, writer)
    upgraded = await bootstrap(hybrid.settings.model_copy(update={
        "run_projections": False, "embedding_dimensions": 64, "data_dir": tmp_path, "subject_prefix": new_prefix(),
    }))
    reader = await ChronicleClient.connect(upgraded.nats_url, authority.issue(name), prefix=upgraded.settings.subject_prefix)
    try:
        found = await reader.artifacts.search("analytics dashboard")
        assert [(h.artifact_id, h.matched_by) for h in found.items] == [(made.artifact_id, ["text"])]
        assert (await writer.artifacts.search("analytics dashboard")).items[0].matched_by == ["text", "semantic"]
    finally:
        await reader.close()
        await upgraded.stop()
