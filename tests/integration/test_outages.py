"""Postgres or NATS going away: clear errors or reconnection, never a half-write, no restart."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import nats.errors
import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from adapters.auth import TokenAuthority
from adapters.embedded import EmbeddedNats, EmbeddedPostgres
from bench.faults import until_ok
from bench.outage import Silenced
from entrypoints.bootstrap import bootstrap
from tests.conftest import make_settings
from tests.servers import TestServers
from tests.waiting import eventually


def terminate_connections(admin_url: str, database_url: str) -> int:
    dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        return len(
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchall()
        )


async def test_service_survives_postgres_dropping_every_connection(
    servers: TestServers, authority: TokenAuthority, tmp_path: Path
) -> None:
    with servers.fresh_database() as url:
        instance = await bootstrap(make_settings(url, servers.nats_url, tmp_path))
        client = await ChronicleClient.connect(
            instance.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=instance.settings.subject_prefix
        )
        try:
            started = await client.conversations.start(title="before")
            await client.conversations.add_message(started.conversation_id, "user", "first")
            assert terminate_connections(servers.admin_url, url) > 0

            outcomes = []
            for n in range(5):
                try:
                    await client.conversations.add_message(started.conversation_id, "user", f"after {n}")
                    outcomes.append("ok")
                except ChronicleError as error:
                    assert error.code == "unavailable"
                    outcomes.append(error.code)
            assert outcomes[-1] == "ok", "the service works again without a restart"

            # Read models catch up too: the projections and the positions listener reconnected.
            conversation = await client.conversations.get(started.conversation_id)
            expected = ["first"] + [f"after {n}" for n, o in enumerate(outcomes) if o == "ok"]
            assert [m.content for m in conversation.messages] == expected
            assert len(instance.postgres_store.events_of(started.conversation_id)) == len(expected) + 1  # + Started
        finally:
            await client.close()
            await instance.stop()


async def test_service_and_client_reconnect_when_nats_restarts(
    database_url: str, authority: TokenAuthority, tmp_path: Path
) -> None:
    nats_server = EmbeddedNats(tmp_path / "nats")
    nats_url = nats_server.start()
    instance = await bootstrap(make_settings(database_url, nats_url, tmp_path))
    client = await ChronicleClient.connect(
        nats_url,
        authority.issue(f"u-{uuid.uuid4().hex}"),
        prefix=instance.settings.subject_prefix,
        nats_options={"reconnect_time_wait": 0.1, "max_reconnect_attempts": -1},
        timeout=2.0,
    )
    try:
        started = await client.conversations.start(title="nats outage")
        nats_server.stop()
        with pytest.raises((nats.errors.Error, TimeoutError)):
            await client.conversations.add_message(started.conversation_id, "user", "lost in the void")
        nats_server.start()

        async def works_again() -> bool:
            try:
                await client.conversations.add_message(started.conversation_id, "user", "back")
            except Exception:  # unavailable, or a timeout while the service reconnects
                return False
            return True

        await eventually(works_again, "a command to succeed once Postgres is back")
        conversation = await client.conversations.get(started.conversation_id)
        assert [m.content for m in conversation.messages][-1] == "back"
        assert "lost in the void" not in [m.content for m in conversation.messages]
    finally:
        await client.close()
        await instance.stop()
        nats_server.stop()


UNAVAILABLE_AFTER = 2.0  # the service's setting (its default)
# The client's own timeout: an answer later than this fails the test as a TimeoutError, so
# every `unavailable` below came within it, and so did the first success afterwards.
CLIENT_TIMEOUT = 3.0


@pytest.mark.parametrize("outage", [5, pytest.param(30, marks=pytest.mark.slow), pytest.param(90, marks=pytest.mark.slow)])
async def test_while_postgres_is_stopped_requests_fail_fast_and_work_again_once_it_is_back(
    outage: float, servers: TestServers, authority: TokenAuthority, tmp_path: Path
) -> None:
    postgres = EmbeddedPostgres(tmp_path / "private")  # a Postgres of this test's own, to stop
    url = postgres.start()
    instance = await bootstrap(make_settings(url, servers.nats_url, tmp_path, database_unavailable_after=UNAVAILABLE_AFTER))
    client = await ChronicleClient.connect(
        instance.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=instance.settings.subject_prefix,
        timeout=CLIENT_TIMEOUT,
    )
    try:
        started = await client.conversations.start(title="before the outage")
        await client.conversations.add_message(started.conversation_id, "user", "kept")
        postgres.stop()
        ends = time.monotonic() + outage
        while time.monotonic() < ends:
            # A burst of commands and queries at once (the later ones queue behind the first).
            attempts: list[Awaitable[object]] = [client.conversations.add_message(started.conversation_id, "user", f"lost {n}") for n in range(8)]
            attempts += [client.conversations.list(), client.sessions.create("during the outage")]
            outcomes = await asyncio.gather(*attempts, return_exceptions=True)
            assert [getattr(o, "code", o) for o in outcomes] == ["unavailable"] * len(attempts)
            await asyncio.sleep(1.0)  # (paces the bursts over the outage)
        postgres.start()
        after = await client.conversations.add_message(started.conversation_id, "user", "after")  # the first try
        assert after.position
        conversation = await client.conversations.get(started.conversation_id)
        assert [m.content for m in conversation.messages] == ["kept", "after"], "nothing of the outage was written"
        assert (await client.sessions.list()).total == 0
    finally:
        await client.close()
        await instance.stop()
        postgres.stop()


async def test_while_postgres_answers_nothing_requests_fail_fast_and_keyed_retries_write_each_once(
    servers: TestServers, authority: TokenAuthority, tmp_path: Path
) -> None:
    """A frozen Postgres (SIGSTOP: its kernel takes connections and statements, nothing
    answers), as a host that hangs or a route that drops packets: requests are answered
    `unavailable` within the client's timeout, not held until it wakes; afterwards, each
    command sent again with its Idempotency-Key is written exactly once (a statement the
    server had taken before it froze may commit when it wakes: only the key tells)."""
    postgres = EmbeddedPostgres(tmp_path / "private")
    url = postgres.start()
    instance = await bootstrap(make_settings(url, servers.nats_url, tmp_path, database_unavailable_after=UNAVAILABLE_AFTER))
    client = await ChronicleClient.connect(
        instance.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=instance.settings.subject_prefix,
        timeout=CLIENT_TIMEOUT,
    )
    frozen = Silenced(postgres)
    try:
        started = await client.conversations.start(title="before the freeze")
        await client.conversations.add_message(started.conversation_id, "user", "kept")
        frozen.stop()
        for burst in range(2):
            attempts: list[Awaitable[object]] = [
                client.conversations.add_message(started.conversation_id, "user", f"sent {burst}.{n}",
                                                 idempotency_key=f"k{burst}.{n}")
                for n in range(4)
            ]
            attempts.append(client.conversations.list())
            outcomes = await asyncio.gather(*attempts, return_exceptions=True)
            assert [getattr(o, "code", o) for o in outcomes] == ["unavailable"] * len(attempts)
        frozen.start()
        for burst in range(2):  # each sent again (for as long as it is `unavailable`) with its key
            for n in range(4):
                await until_ok(lambda b=burst, m=n: client.conversations.add_message(  # type: ignore[misc]
                    started.conversation_id, "user", f"sent {b}.{m}", idempotency_key=f"k{b}.{m}"))
        contents = [m.content for m in (await client.conversations.get(started.conversation_id)).messages]
        assert contents[0] == "kept"
        assert sorted(contents[1:]) == sorted(f"sent {b}.{n}" for b in range(2) for n in range(4))  # each once
    finally:
        frozen.start()
        await client.close()
        await instance.stop()
        postgres.stop()
