"""Snapshots on a real Postgres: taken at the threshold, loaded with their tail, used by audits,
passed over when unreadable, and dead with their owner's key."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from eventsourcing.domain import CanMutateAggregate

from adapters.auth import TokenAuthority
from adapters.store.audit_decoder import Decoder
from adapters.store.event_store import EventStore
from adapters.store.keys import KeyRing
from domain.conversation import Conversation
from entrypoints.bootstrap import Chronicle
from services.audit.queries import Audit
from tests.conftest import ClientFactory, fresh_chronicle
from tests.servers import TestServers
from tests.waiting import eventually

EVERY = 5
KEEP = 3


@pytest.fixture(scope="module")
async def snapping(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    async with fresh_chronicle(
        servers, tmp_path_factory.mktemp("snapshots"), servers.nats_url, snapshot_every=EVERY, snapshot_keep=KEEP,
    ) as (instance, _):
        yield instance


@pytest.fixture
async def connect_to(snapping: Chronicle, authority: TokenAuthority) -> AsyncIterator[ClientFactory]:
    clients: list[ChronicleClient] = []

    async def make(user_id: str | None = None, roles: tuple[str, ...] = ()) -> ChronicleClient:
        claims = {"roles": list(roles)} if roles else None
        client = await ChronicleClient.connect(
            snapping.nats_url, authority.issue(user_id or f"u-{uuid.uuid4().hex[:12]}", claims=claims),
            prefix=snapping.settings.subject_prefix,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def chat(client: ChronicleClient, messages: int, title: str = "snapshotted") -> uuid.UUID:
    """A conversation at version 1 + `messages` (a titled one gets no derived-title events)."""
    started = await client.conversations.start(title=title)
    for n in range(messages):
        await client.conversations.add_message(started.conversation_id, "user", f"message {n}")
    return started.conversation_id


def snapshot_rows(url: str, aggregate_id: uuid.UUID) -> list[tuple[int, bytes]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT originator_version, state FROM chronicle.snapshots WHERE originator_id = %s ORDER BY 1",
            (aggregate_id,),
        ).fetchall()
    return [(v, bytes(s)) for v, s in rows]


async def snapshots_when(
    url: str, aggregate_id: uuid.UUID, ready: Callable[[list[tuple[int, bytes]]], bool], what: str
) -> list[tuple[int, bytes]]:
    """The aggregate's snapshot rows once `ready` says they are what the test waits for."""

    async def rows_if_ready() -> list[tuple[int, bytes]] | None:
        rows = await asyncio.to_thread(snapshot_rows, url, aggregate_id)
        return rows if ready(rows) else None

    return await eventually(rows_if_ready, what, timeout=10)


async def wait_for_snapshots(url: str, aggregate_id: uuid.UUID, versions: list[int]) -> list[tuple[int, bytes]]:
    return await snapshots_when(url, aggregate_id, lambda rows: [v for v, _ in rows] == versions, f"snapshots {versions}")


def url_of(instance: Chronicle) -> str:
    return instance.settings.database_url or ""


def full_fold(store: EventStore, aggregate_id: uuid.UUID, version: int | None = None) -> Any:
    aggregate = None
    for event in store.events_of(aggregate_id):
        if version is not None and event.originator_version > version:
            break
        assert isinstance(event, CanMutateAggregate)
        aggregate = event.mutate(aggregate)
    return aggregate


async def test_snapshots_are_taken_at_the_threshold_sealed_and_pruned(snapping: Chronicle, connect_to: ClientFactory) -> None:
    client = await connect_to()
    conversation_id = await chat(client, 11, title="a private title")  # versions 1..12
    rows = await wait_for_snapshots(url_of(snapping), conversation_id, [5, 10])
    assert not any(b"private" in state or b"message" in state for _, state in rows), "content is sealed"

    # Commands decided together cross the threshold once, at the batch's last version.
    await asyncio.gather(*(client.conversations.add_message(conversation_id, "user", f"m{n}") for n in range(6)))
    rows = await snapshots_when(
        url_of(snapping), conversation_id, lambda rows: [v for v, _ in rows][-1:] != [10], "a snapshot past version 10"
    )
    versions = [v for v, _ in rows]
    assert len(versions) == 3 and versions[:2] == [5, 10] and 15 <= versions[2] <= 18  # versions 13..18

    # Only the latest KEEP are kept.
    for n in range(5):
        await client.conversations.add_message(conversation_id, "user", f"more {n}")  # to version 23
    rows = await snapshots_when(
        url_of(snapping), conversation_id, lambda rows: len(rows) == KEEP and rows[-1][0] >= 20, "pruned to the latest"
    )
    assert [v for v, _ in rows] == [10, versions[2], 20]


async def test_a_load_from_snapshot_and_tail_equals_the_whole_fold(snapping: Chronicle, connect_to: ClientFactory) -> None:
    client = await connect_to()
    conversation_id = await chat(client, 12)  # version 13: snapshots at 5 and 10, tail 11..13
    await wait_for_snapshots(url_of(snapping), conversation_id, [5, 10])
    store = snapping.postgres_store
    loaded = (await asyncio.to_thread(store.load_many, [conversation_id]))[conversation_id]
    folded = full_fold(store, conversation_id)
    assert loaded.version == 13 and vars(loaded) == vars(folded)
    plain = (await asyncio.to_thread(store.load_many, [conversation_id], use_snapshots=False))[conversation_id]
    assert vars(plain) == vars(folded)

    # The load really starts from the snapshot: one sealed with another title shows it.
    at_ten = full_fold(store, conversation_id, 10)
    at_ten.title = "from the snapshot"
    forged = store.snapshot_codec.encode(at_ten)
    with psycopg.connect(url_of(snapping)) as conn:
        conn.execute("UPDATE chronicle.snapshots SET state = %s WHERE originator_id = %s AND originator_version = 10",
                     (forged.state, conversation_id))
    reloaded = (await asyncio.to_thread(store.load_many, [conversation_id]))[conversation_id]
    assert isinstance(reloaded, Conversation)
    assert reloaded.title == "from the snapshot" and reloaded.message_count == 12


async def test_audit_state_between_two_snapshots(snapping: Chronicle, connect_to: ClientFactory) -> None:
    client = await connect_to()
    conversation_id = await chat(client, 15)  # version 16: snapshots at 5, 10, 15
    await wait_for_snapshots(url_of(snapping), conversation_id, [5, 10, 15])
    store = snapping.postgres_store
    audit = Audit(snapping.queries, record_read=None, decoder=Decoder(store.mapper.keys))  # type: ignore[arg-type]
    for version in (3, 5, 7, 10, 12, 15, 16):
        state, at = await audit.state_at(conversation_id, version, None)
        assert at == version and vars(state) == vars(full_fold(store, conversation_id, version))

    events = await client.audit.events(conversation_id)
    between = events[11].timestamp  # version 12's time: from the snapshot at 10
    state, at = await audit.state_at(conversation_id, None, between)
    expected = max(e.version for e in events if e.timestamp <= between)
    assert at == expected and vars(state) == vars(full_fold(store, conversation_id, expected))

    page = await client.audit.stream(conversation_id, at_version=12, limit=1)
    assert page.state_version == 12 and page.state is not None and page.state["message_count"] == 11 and page.state["version"] == 12

    # The audit really starts from the snapshot: one sealed with another title shows it.
    at_ten = full_fold(store, conversation_id, 10)
    at_ten.title = "from the snapshot"
    with psycopg.connect(url_of(snapping)) as conn:
        conn.execute("UPDATE chronicle.snapshots SET state = %s WHERE originator_id = %s AND originator_version = 10",
                     (store.snapshot_codec.encode(at_ten).state, conversation_id))
    state, _ = await audit.state_at(conversation_id, 12, None)
    assert state.title == "from the snapshot" and state.message_count == 11
    state, _ = await audit.state_at(conversation_id, 9, None)
    assert state.title == "snapshotted"


async def test_an_unreadable_snapshot_is_passed_over(snapping: Chronicle, connect_to: ClientFactory) -> None:
    client = await connect_to()
    conversation_id = await chat(client, 11)  # version 12
    await wait_for_snapshots(url_of(snapping), conversation_id, [5, 10])
    with psycopg.connect(url_of(snapping)) as conn:
        conn.execute(  # one changed byte in the sealed content of the latest; the one before from another model
            "UPDATE chronicle.snapshots SET state = set_byte(state, length(state) - 10,"
            " CASE get_byte(state, length(state) - 10) WHEN 65 THEN 66 ELSE 65 END)"
            " WHERE originator_id = %s AND originator_version = 10",
            (conversation_id,),
        )
        conn.execute(
            "UPDATE chronicle.snapshots SET state = convert_to(replace(convert_from(state, 'UTF8'),"
            " '\"schema\":\"', '\"schema\":\"0'), 'UTF8') WHERE originator_id = %s AND originator_version = 5",
            (conversation_id,),
        )
    store = snapping.postgres_store
    loaded = (await asyncio.to_thread(store.load_many, [conversation_id]))[conversation_id]
    assert vars(loaded) == vars(full_fold(store, conversation_id))
    audit = Audit(snapping.queries, record_read=None, decoder=Decoder(store.mapper.keys))  # type: ignore[arg-type]
    for version in (7, 12):
        state, at = await audit.state_at(conversation_id, version, None)
        assert at == version and vars(state) == vars(full_fold(store, conversation_id, version))

    # And the service goes on from the whole stream.
    snapping.bus.cache.evict([conversation_id])
    await client.conversations.add_message(conversation_id, "user", "after the corruption")
    assert (await client.conversations.get(conversation_id)).message_count == 12


async def test_after_erasure_a_snapshot_resurrects_nothing(snapping: Chronicle, connect_to: ClientFactory) -> None:
    user = f"erase-{uuid.uuid4().hex[:8]}"
    alice = await connect_to(user)
    conversation_id = await chat(alice, 11, title="tulip allergy")
    await wait_for_snapshots(url_of(snapping), conversation_id, [5, 10])
    admin = await connect_to("admin-s", roles=("admin",))
    assert (await admin.request("cmd.user.erase", {"user_id": user}))["erased"] is True

    with pytest.raises(ChronicleError) as gone:
        await alice.conversations.add_message(conversation_id, "user", "hello again")
    assert gone.value.code == "not_found"
    assert await asyncio.to_thread(snapping.store.load_many, [conversation_id]) == {}
    # A process that never saw the key (no cache) finds nothing either.
    fresh = EventStore(snapping.target, pool_size=1, keys=KeyRing(snapping.target))
    try:
        assert await asyncio.to_thread(fresh.load_many, [conversation_id]) == {}
    finally:
        fresh.close()
    audit = Audit(snapping.queries, record_read=None, decoder=Decoder(snapping.postgres_store.mapper.keys))  # type: ignore[arg-type]
    assert await audit.state_at(conversation_id, 11, None) == (None, None)
    assert await audit.state_at(conversation_id, None, None) == (None, None)
