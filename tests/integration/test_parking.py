"""No poison message: an event a read model cannot apply, or a relay cannot publish, is
parked (recorded, skipped) after a few tries, and everything after it goes on (#20)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import uuid
from abc import abstractmethod
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from chronicle_contract.bus import signals_prefix
from chronicle_contract.hitl import run_signals

from adapters.auth import TokenAuthority
from adapters.read_side.engine import ProjectionEngine
from adapters.read_side.parking import parked
from adapters.read_side.rebuild import rebuild
from adapters.read_side.relay import EventRelay
from adapters.read_side.view import PostgresView, ReadModel
from adapters.read_side.views.history import PostgresHistoryView
from adapters.store.postgres import PostgresTarget
from domain.conversation import Conversation
from entrypoints.bootstrap import Chronicle, bootstrap
from projections.history import HistoryProjection
from projections.view import Projection, View, handles
from services.ports.relays import Relay
from tests.conftest import make_settings
from tests.servers import TestServers
from tests.waiting import eventually, wait_until

POISON = "poison pill"


class MessagesView(View):
    @abstractmethod
    def add_message(self, message_id: UUID, content: str) -> None: ...


class PostgresMessagesView(PostgresView, MessagesView):
    tables = "CREATE TABLE {schema}.messages (id uuid PRIMARY KEY, content text NOT NULL)"

    def add_message(self, message_id: UUID, content: str) -> None:
        self.batch.execute(self.sql("INSERT INTO {schema}.messages (id, content) VALUES (%s, %s)"), (message_id, content))


class Fixed(Projection[MessagesView]):
    """Picky once its bug is fixed."""

    name = "picky"
    version = 1
    erases = False

    @handles(Conversation.MessageAdded)
    def message_added(self, e: Conversation.MessageAdded) -> None:
        self.view.add_message(e.message_id, e.content)


class Picky(Fixed):
    """A read model that cannot apply a message saying POISON (as a bug or a limit might)."""

    @handles(Conversation.MessageAdded)
    def message_added(self, e: Conversation.MessageAdded) -> None:
        if POISON in e.content:
            raise ValueError("cannot take this one")
        super().message_added(e)


class PickyRelay(Relay):
    """A relay that cannot publish a message saying POISON; keeps what it published."""

    name = "picky_relay"
    relayed = (Conversation.MessageAdded,)

    def __init__(self) -> None:
        self.published: list[str] = []

    async def publish(self, position: int, event: Any, owner: str) -> None:
        if POISON in event.content:
            raise ValueError("cannot publish this one")
        self.published.append(event.content)


@pytest.fixture
async def writer(servers: TestServers, tmp_path: Path, authority: TokenAuthority) -> AsyncIterator[tuple[Chronicle, str, ChronicleClient]]:
    """A Chronicle of its own database without read models (the test runs its own), and a client."""
    with servers.fresh_database() as url:
        instance = await bootstrap(make_settings(url, servers.nats_url, tmp_path, run_projections=False))
        client = await ChronicleClient.connect(
            instance.nats_url, authority.issue(f"u-{uuid.uuid4().hex[:8]}"), prefix=instance.settings.subject_prefix
        )
        yield instance, url, client
        await client.close()
        await instance.stop()


async def write_messages(client: ChronicleClient, *contents: str) -> int:
    started = await client.conversations.start(title="t")
    for content in contents:
        await client.conversations.add_message(started.conversation_id, "user", content)
    assert client.last_position is not None
    return client.last_position


def tracked(url: str, name: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT position FROM chronicle.projections WHERE name = %s", (name,)).fetchone()
        return int(row[0]) if row else 0


def rows(url: str, statement: str) -> list[Any]:
    with psycopg.connect(url) as conn:
        return conn.execute(statement).fetchall()


async def test_an_event_a_read_model_cannot_apply_is_parked_and_the_rest_goes_on(
    writer: tuple[Chronicle, str, ChronicleClient],
) -> None:
    _, url, client = writer
    head = await write_messages(client, "first", f"a {POISON}", "last")
    target = PostgresTarget(url)
    engine = ProjectionEngine(
        target, [ReadModel(HistoryProjection, PostgresHistoryView), ReadModel(Picky, PostgresMessagesView)], batch_size=50
    )
    engine.start()
    try:
        await asyncio.to_thread(wait_until, lambda: tracked(url, "picky") >= head, "the picky read model to pass the poison")
        await asyncio.to_thread(wait_until, lambda: tracked(url, "history") >= head, "history")
    finally:
        await asyncio.to_thread(engine.stop)
    assert sorted(c for (c,) in rows(url, "SELECT content FROM rm_picky.messages")) == ["first", "last"]
    assert len(rows(url, "SELECT 1 FROM rm_history.messages")) == 3  # the other read model had every one
    [row] = rows(url, "SELECT consumer, topic, error FROM chronicle.parked")
    assert row == ("picky", "domain.conversation:Conversation.MessageAdded", "ValueError")
    assert [(p.consumer, p.count, p.last_error) for p in parked(target)] == [("picky", 1, "ValueError")]

    # A rebuild meets it again, parks it again (once), and ends; once the read model can
    # take it, a rebuild applies it and its record goes.
    await asyncio.to_thread(rebuild, target, ReadModel(Picky, PostgresMessagesView))
    assert sorted(c for (c,) in rows(url, "SELECT content FROM rm_picky.messages")) == ["first", "last"]
    assert len(rows(url, "SELECT 1 FROM chronicle.parked")) == 1
    await asyncio.to_thread(rebuild, target, ReadModel(Fixed, PostgresMessagesView))
    assert len(rows(url, "SELECT content FROM rm_picky.messages")) == 3
    assert rows(url, "SELECT 1 FROM chronicle.parked") == []


async def test_an_event_a_relay_cannot_publish_is_parked_after_a_few_tries_and_the_rest_is_published(
    writer: tuple[Chronicle, str, ChronicleClient],
) -> None:
    instance, url, client = writer
    head = await write_messages(client, "first", f"a {POISON}", "last")
    picky = PickyRelay()
    relay = EventRelay(url, picky, instance.keys)
    relay.backstop_delay = 0.0
    await relay.start()
    try:
        await eventually(lambda: tracked(url, "picky_relay") >= head, "the relay to pass the poison")
    finally:
        await relay.stop()
    # Each failed try publishes the batch's earlier events again (JetStream drops them by
    # their message id); the poison never, everything after it once it is parked.
    assert list(dict.fromkeys(picky.published)) == ["first", "last"]
    assert picky.published.count("first") == 3  # the tries: parked on the third
    [row] = rows(url, "SELECT consumer, error FROM chronicle.parked")
    assert row == ("picky_relay", "ValueError")


def test_projections_status_shows_what_was_parked(servers: TestServers, tmp_path: Path) -> None:
    with servers.fresh_database() as url:
        target = PostgresTarget(url)
        from adapters.store.postgres import migrate

        migrate(target)
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO chronicle.parked (consumer, position, topic, error) VALUES"
                " ('search', 7, 'x:Y', 'DataException (SQLSTATE 22000)'), ('search', 9, 'x:Y', 'ValueError')"
            )
        env = {"CHRONICLE_DATABASE_URL": url, "CHRONICLE_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
        printed = subprocess.run(
            [sys.executable, "-m", "entrypoints.cli", "projections", "status"],
            env=env, capture_output=True, text=True, timeout=60,
        )
    assert printed.returncode == 0, printed.stderr
    assert "parked: search 2 (latest at position 9: ValueError)" in printed.stdout


def widest(length: int, seed: int = 0) -> str:
    """`length` characters of four UTF-8 bytes each, varied (nothing compresses them)."""
    rng = random.Random(seed)
    return "".join(chr(0x1D400 + rng.randrange(1000)) for _ in range(length))


def json_of_bytes(limit: int) -> dict[str, str]:
    """A JSON object just under `limit` bytes as compact JSON."""
    return {"k": "x" * (limit - 20)}


async def test_the_largest_allowed_payloads_everywhere_keep_every_read_model_and_signal_moving(
    chronicle: Chronicle, connect: Any,
) -> None:
    client: ChronicleClient = await connect()
    json_limit = chronicle.settings.max_json_bytes
    session = await client.sessions.create(widest(500, 1), description=widest(10_000, 2), tags=[widest(50, n) for n in range(10)])
    started = await client.conversations.start(
        title=widest(500, 3), tags=[widest(50, 10 + n) for n in range(10)], session_id=session.session_id,
        document_context=json_of_bytes(json_limit),
    )
    for n in range(3):
        await client.conversations.add_message(started.conversation_id, "user", widest(10_000, 20 + n),
                                               metadata=json_of_bytes(json_limit))
    await client.conversations.update(started.conversation_id, title=widest(500, 4))
    run = await client.hitl.pause(started.conversation_id, step=widest(200, 5), prompt=widest(10_000, 6),
                                  data=json_of_bytes(json_limit))
    signals = await client.nc.subscribe(f"{run_signals(signals_prefix(client.prefix, client.user or ''), run.run_id)}.*")
    await client.hitl.resume(run.run_id, approved=True, feedback=widest(10_000, 7), edits=json_of_bytes(json_limit))
    seen = [(await signals.next_msg(timeout=10)).subject.rpartition(".")[2]]
    while seen[-1] != "resumed":  # (the pause's own signal may come first)
        seen.append((await signals.next_msg(timeout=10)).subject.rpartition(".")[2])
    assert seen in (["resumed"], ["paused", "resumed"])
    await signals.unsubscribe()
    await client.artifacts.store(
        {"type": "page", "label": widest(200, 8)}, query=widest(10_000, 9), draft=widest(200_000, 10),
        tags=[widest(50, 30 + n) for n in range(10)],
    )
    state = client.optimization(name=widest(200, 11), optimizer="grid")
    round = await state.start_round()
    await state.record_trial(round, candidate=json_of_bytes(json_limit), score=1.0, extra=json_of_bytes(json_limit))

    assert client.last_position is not None
    await chronicle.positions.wait_for([p.name for p in chronicle.projections], client.last_position, 30)
    assert rows(chronicle.settings.database_url or "", "SELECT consumer, position, error FROM chronicle.parked") == []
