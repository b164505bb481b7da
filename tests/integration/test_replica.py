"""Queries served by a streaming replica: commands to the primary, every write read back from the replica.

A private primary and a `pg_basebackup` hot standby on loopback (bench/replica.py, set up
with infra/postgres's files), Chronicle with CHRONICLE_DATABASE_URL at the primary and
CHRONICLE_READ_DATABASE_URL at the replica, clients over NATS.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from adapters.auth import TokenAuthority
from bench.replica import ReplicatedPostgres
from entrypoints.bootstrap import Chronicle, bootstrap
from tests.conftest import make_settings
from tests.rows import scalar
from tests.servers import TestServers

pytestmark = pytest.mark.slow  # two servers made and a service started: ~15 s for the module

WAIT_TIMEOUT = 2.0  # the service's query_wait_timeout: how long a query waits for the replica
CLIENT_TIMEOUT = 5.0  # longer than the wait: an `unavailable` arrives as an answer, not a timeout
WRITERS, WRITES = 4, 50


@dataclass
class Replicated:
    postgres: ReplicatedPostgres
    chronicle: Chronicle
    primary_url: str
    replica_url: str
    authority: TokenAuthority

    async def client(self, user: str | None = None) -> ChronicleClient:
        return await ChronicleClient.connect(
            self.chronicle.nats_url, self.authority.issue(user or f"u-{uuid.uuid4().hex[:12]}"),
            prefix=self.chronicle.settings.subject_prefix, timeout=CLIENT_TIMEOUT,
        )


@pytest.fixture(scope="module")
async def replicated(
    servers: TestServers, authority: TokenAuthority, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replicated]:
    postgres = ReplicatedPostgres()
    try:
        await asyncio.to_thread(postgres.start)
        primary_url, replica_url = await asyncio.to_thread(postgres.create_database, "chronicle")
        settings = make_settings(
            primary_url, servers.nats_url, tmp_path_factory.mktemp("data"),
            read_database_url=replica_url, query_wait_timeout=WAIT_TIMEOUT,
        )
        chronicle = await bootstrap(settings)
        try:
            yield Replicated(postgres, chronicle, primary_url, replica_url, authority)
        finally:
            await chronicle.stop()
    finally:
        await asyncio.to_thread(postgres.stop)


def counts(url: str, conversation_ids: list[uuid.UUID]) -> tuple[int, int]:
    """The conversations' events in the log and messages in the history read model."""
    with psycopg.connect(url, autocommit=True) as conn:
        events = conn.execute("SELECT count(*) FROM chronicle.events WHERE originator_id = ANY(%s)", (conversation_ids,))
        messages = conn.execute(
            "SELECT count(*) FROM rm_history.messages WHERE conversation_id = ANY(%s)", (conversation_ids,)
        )
        return scalar(events), scalar(messages)


async def test_every_write_is_read_back_from_the_replica_with_its_position(replicated: Replicated) -> None:
    async def writer(n: int) -> uuid.UUID:
        client = await replicated.client()
        try:
            started = await client.conversations.start(title=f"writer {n}")
            for k in range(1, WRITES + 1):
                written = await client.conversations.add_message(started.conversation_id, "user", f"{n}:{k}")
                # The client sends its last write's position: the replica must have replayed it.
                newest = await client.conversations.get_page(started.conversation_id, limit=1, order="newest")
                assert [m.content for m in newest.messages] == [f"{n}:{k}"], f"write {k} of writer {n} not read back"
                if k % 10 == 0:  # the event log as the replica holds it, with the primary's positions
                    events = (await client.audit.stream(started.conversation_id, after_version=k)).events
                    assert [(e.version, e.position) for e in events] == [(k + 1, written.position)]
            whole = await client.conversations.get(started.conversation_id)
            assert [m.content for m in whole.messages] == [f"{n}:{k}" for k in range(1, WRITES + 1)]  # none lost, none twice
            return started.conversation_id
        finally:
            await client.close()

    conversation_ids = await asyncio.gather(*(writer(n) for n in range(WRITERS)))
    await asyncio.to_thread(replicated.postgres.wait_replayed)
    expected = (WRITERS * (WRITES + 1), WRITERS * WRITES)  # (+ each conversation's start)
    assert await asyncio.to_thread(counts, replicated.primary_url, conversation_ids) == expected
    assert await asyncio.to_thread(counts, replicated.replica_url, conversation_ids) == expected

    # The queries were the replica's: its connections carry the query pool's name.
    with psycopg.connect(replicated.replica_url, autocommit=True) as conn:
        named = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"{replicated.chronicle.settings.service_name}-queries",),
        ).fetchone()
    assert named is not None and named[0] >= 1


def set_replay(replica_url: str, *, paused: bool) -> None:
    with psycopg.connect(replica_url, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")


async def test_a_query_never_reads_the_replica_before_it_has_replayed_the_position_asked_for(
    replicated: Replicated,
) -> None:
    user = f"u-{uuid.uuid4().hex[:12]}"
    writer, reader = await replicated.client(user), await replicated.client(user)  # (the reader sends no position)
    try:
        started = await writer.conversations.start(title="replay")
        await writer.conversations.add_message(started.conversation_id, "user", "replayed")
        await writer.conversations.get(started.conversation_id)
        await asyncio.to_thread(set_replay, replicated.replica_url, paused=True)
        try:
            written = await writer.conversations.add_message(started.conversation_id, "user", "not yet replayed")
            assert written.position is not None
            # On the primary the read models have it; the replica replays nothing meanwhile.
            await replicated.chronicle.positions.wait_for(["history"], written.position, 10)

            # With the write's position: a read model, and the event log (no read model).
            for query in (
                writer.conversations.get(started.conversation_id),
                writer.audit.stream(started.conversation_id, after_version=2),
            ):
                with pytest.raises(ChronicleError) as raised:
                    await query
                assert raised.value.code == "unavailable" and raised.value.fields == ["min_position"]
            # Without a position a query answers at once, from the replica as it stands.
            seen = await reader.conversations.get(started.conversation_id)
            assert [m.content for m in seen.messages] == ["replayed"]
            assert (await reader.audit.stream(started.conversation_id, after_version=2)).events == []
        finally:
            await asyncio.to_thread(set_replay, replicated.replica_url, paused=False)
        conversation = await writer.conversations.get(started.conversation_id)
        assert [m.content for m in conversation.messages] == ["replayed", "not yet replayed"]
        events = (await writer.audit.stream(started.conversation_id, after_version=2)).events
        assert [e.position for e in events] == [written.position]
    finally:
        await writer.close()
        await reader.close()


async def test_while_the_replica_is_down_queries_are_unavailable_and_commands_go_on(
    replicated: Replicated,
) -> None:
    client = await replicated.client()
    try:
        started = await client.conversations.start(title="replica outage")
        await client.conversations.add_message(started.conversation_id, "user", "before")
        await client.conversations.get(started.conversation_id)
        await asyncio.to_thread(replicated.postgres.replica.stop)
        try:
            for n in range(3):
                await client.conversations.add_message(started.conversation_id, "user", f"during {n}")
                for query in (client.conversations.list(), client.conversations.get_page(started.conversation_id)):
                    with pytest.raises(ChronicleError) as raised:  # (within CLIENT_TIMEOUT, or a TimeoutError)
                        await query
                    assert raised.value.code == "unavailable"
        finally:
            await asyncio.to_thread(replicated.postgres.replica.start)
        # Back without a restart, and nothing written meanwhile is missing.
        conversation = await client.conversations.get(started.conversation_id)
        assert [m.content for m in conversation.messages] == ["before", "during 0", "during 1", "during 2"]
    finally:
        await client.close()


async def test_the_replica_streams_as_infra_postgres_sets_it_up(replicated: Replicated) -> None:
    """The deployed files are what these servers run with: a change there that breaks
    streaming, the slot or the replicator's password login fails here."""
    postgres = replicated.postgres
    with psycopg.connect(postgres.primary.url(), autocommit=True) as conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        slot = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = 'chronicle_replica'").fetchone()
        sender = conn.execute("SELECT usename FROM pg_stat_replication WHERE state = 'streaming'").fetchone()
    with psycopg.connect(postgres.replica.url(), autocommit=True) as conn:
        standby = conn.execute("SELECT pg_is_in_recovery(), current_setting('hot_standby_feedback')").fetchone()
    assert (wal_level, slot, sender) == (("replica",), (True,), ("replicator",))
    assert standby == (True, "on")
