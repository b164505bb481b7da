"""The audit digest: the root over stream heads, `chronicle audit digest --check`, what it catches
that the hash chains cannot, and the publisher that records one digest per change."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from chronicle_contract.audit import Digest, PublishDigest
from chronicle_contract.sessions import CreateSession
from eventsourcing.persistence import StoredEvent

from adapters.auth import TokenAuthority
from adapters.store.digest import compute_digest, leaf_hash, node_hash
from adapters.store.event_store import EventStore
from adapters.store.hash_chains import GENESIS, event_hash, verify_chains
from adapters.store.postgres import PostgresTarget
from domain.digest import DIGEST_ID
from entrypoints.bootstrap import Chronicle, bootstrap
from tests.conftest import JWT_SECRET, make_settings
from tests.rows import scalar
from tests.servers import TestServers
from tests.waiting import eventually

TOPIC = "tests:Happened"


def events(stream: uuid.UUID, versions: range) -> list[StoredEvent]:
    return [StoredEvent(stream, v, TOPIC, f'{{"n": {v}}}'.encode()) for v in versions]


def record(store: EventStore, stored: list[StoredEvent]) -> None:
    store.recorder.record(stored)


def head_of(stored: list[StoredEvent]) -> bytes:
    prev = GENESIS
    for e in stored:
        assert isinstance(e.originator_id, uuid.UUID)  # events() names streams by UUID
        prev = event_hash(prev, e.originator_id, e.originator_version, e.topic, e.state)
    return prev


def position(target: PostgresTarget) -> int:
    with target.connect() as conn:
        return scalar(conn.execute("SELECT max(notification_id) FROM chronicle.events"))


def tamper(target: PostgresTarget, statement: str, params: tuple[object, ...]) -> None:
    """A superuser with the append-only triggers off for this session."""
    with target.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        assert conn.execute(statement, params).rowcount >= 1


def digest_cli(url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHRONICLE_DATABASE_URL": url, "CHRONICLE_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", "audit", "digest", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )


def test_root_over_known_streams_is_the_tree_built_by_hand(target: PostgresTarget, store: EventStore) -> None:
    first, second, third = sorted(uuid.uuid4() for _ in range(3))
    streams = {first: events(first, range(1, 4)), second: events(second, range(1, 2)), third: events(third, range(1, 3))}
    record(store, streams[third] + streams[first] + streams[second])
    taken_at = position(target)
    leaves = [leaf_hash(s, len(stored), head_of(stored)) for s, stored in sorted(streams.items())]
    by_hand = node_hash(node_hash(leaves[0], leaves[1]), leaves[2])

    digest = compute_digest(target)
    assert (digest.position, digest.root, digest.streams, digest.events) == (taken_at, by_hand, 3, 6)

    # Later events, and events of the digest stream itself, leave the digest at P alone.
    record(store, events(second, range(2, 3)))
    record(store, [StoredEvent(DIGEST_ID, 1, TOPIC, b"{}")])
    assert compute_digest(target, taken_at) == digest
    moved = compute_digest(target)
    assert moved.position == taken_at + 1 and moved.events == 7 and moved.root != by_hand


def test_check_holds_and_catches_a_changed_head_hash(target: PostgresTarget, store: EventStore, tmp_path: Path) -> None:
    victim = uuid.uuid4()
    record(store, events(victim, range(1, 4)) + events(uuid.uuid4(), range(1, 3)))
    digest = compute_digest(target)
    held = digest_cli(target.url, tmp_path, "--check", str(digest.position), digest.root_hex)
    assert held.returncode == 0, held.stderr
    assert "match" in held.stdout and "streams 2  events 5" in held.stdout

    tamper(target, "UPDATE chronicle.events SET hash = sha256(hash) WHERE originator_id = %s"
           " AND originator_version = 3", (victim,))
    broken = digest_cli(target.url, tmp_path, "--check", str(digest.position), digest.root_hex)
    assert broken.returncode == 1 and "MISMATCH" in broken.stdout
    assert digest_cli(target.url, tmp_path, "--check", "not-a-position", digest.root_hex).returncode != 0
    assert digest_cli(target.url, tmp_path, "--check", str(10**9), digest.root_hex).returncode != 0


def test_check_catches_what_the_chains_cannot(target: PostgresTarget, store: EventStore, tmp_path: Path) -> None:
    rewritten, shortened = uuid.uuid4(), uuid.uuid4()
    record(store, events(rewritten, range(1, 4)) + events(shortened, range(1, 4)))
    digest = compute_digest(target)

    # One stream's second event changed and every later hash recomputed to match: its
    # chain verifies. The other stream's last event removed: no chain notices either.
    with target.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "UPDATE chronicle.events SET state = '{\"n\": 99}'::bytea WHERE originator_id = %s AND originator_version = 2",
            (rewritten,),
        )
        prev = GENESIS
        for version, topic, state in conn.execute(
            "SELECT originator_version, topic, state FROM chronicle.events WHERE originator_id = %s"
            " ORDER BY originator_version", (rewritten,)
        ).fetchall():
            prev = event_hash(prev, rewritten, version, topic, state)
            conn.execute(
                "UPDATE chronicle.events SET hash = %s WHERE originator_id = %s AND originator_version = %s",
                (prev, rewritten, version),
            )
        conn.execute("DELETE FROM chronicle.events WHERE originator_id = %s AND originator_version = 3", (shortened,))
    assert verify_chains(target).intact

    found = digest_cli(target.url, tmp_path, "--check", str(digest.position), digest.root_hex)
    assert found.returncode == 1 and "MISMATCH" in found.stdout
    assert "streams 2  events 5" in found.stdout



@pytest.fixture
async def instances(servers: TestServers, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[list[Chronicle]]:
    """Two instances on one fresh database, each publishing digests every `interval` seconds."""
    interval = request.param
    with servers.fresh_database() as url:
        started: list[Chronicle] = []
        try:
            for n in range(2):
                settings = make_settings(url, servers.nats_url, tmp_path / f"data{n}", digest_interval=interval)
                started.append(await bootstrap(settings))
            yield started
        finally:
            for instance in started:
                await instance.stop()


async def digests_of(instance: Chronicle) -> list[Digest]:
    client = await ChronicleClient.connect(
        instance.nats_url, TokenAuthority(secret=JWT_SECRET).issue(f"anyone-{uuid.uuid4().hex[:8]}"),
        prefix=instance.settings.subject_prefix,
    )
    try:
        return (await client.audit.digests(limit=100)).digests
    finally:
        await client.close()


@pytest.mark.parametrize("instances", [0.1], indirect=True)
async def test_publisher_records_one_digest_per_change(instances: list[Chronicle], tmp_path: Path) -> None:
    first, second = instances
    publishers = [p for p in (i.digest_publisher for i in instances) if p is not None]
    assert len(publishers) == len(instances)

    async def ticks_pass(count: int = 3) -> None:
        marks = [p.checks for p in publishers]
        await eventually(lambda: all(p.checks >= m + count for p, m in zip(publishers, marks, strict=True)),
                         "publisher ticks")

    await ticks_pass()
    assert await digests_of(first) == []  # nothing written yet: nothing published

    for expected in (1, 2):
        # One command a round: two could fall either side of a tick and make two digests.
        at = (await first.bus.execute(CreateSession(name=f"s{expected}"), "alice"))["position"]

        async def covered(at: int = at) -> bool:
            found = await digests_of(second)
            return bool(found) and found[0].position >= at

        await eventually(covered, "a digest covering the new events")
        await ticks_pass()  # both publishers looked again and found nothing new
        found = await digests_of(first)
        assert len(found) == expected
        assert [d.position for d in found] == sorted({d.position for d in found}, reverse=True)
    latest = found[0]
    assert (latest.streams, latest.events) == (2, 2) and len(latest.root) == 64 and len(latest.hash) == 64

    check = digest_cli(first.target.url, tmp_path, "--check", str(latest.position), latest.root)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("instances", [0], indirect=True)
async def test_concurrent_publications_record_one(instances: list[Chronicle]) -> None:
    first, second = instances
    assert first.digest_publisher is None and second.digest_publisher is None  # interval 0: off
    await first.bus.execute(CreateSession(name="s"), "alice")
    digest = await asyncio.to_thread(compute_digest, first.target)
    command = PublishDigest(position=digest.position, root=digest.root_hex, streams=digest.streams, events=digest.events)
    replies = await asyncio.gather(
        *(i.bus.execute(command, "chronicle") for i in (first, second, first, second))
    )
    assert sorted(r["published"] for r in replies) == [False, False, False, True]
    with psycopg.connect(first.target.url) as conn:
        count = conn.execute("SELECT count(*) FROM chronicle.events WHERE originator_id = %s", (DIGEST_ID,)).fetchone()
    assert count == (2,)  # opened, published once
