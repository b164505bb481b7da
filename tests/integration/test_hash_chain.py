"""Every stream's hash chain: computed on append, backfilled by the migration, and any
changed or removed event found by `chronicle audit verify`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from eventsourcing.persistence import IntegrityError, PersistenceError, StoredEvent

from adapters.store.event_store import EventStore
from adapters.store.hash_chains import GENESIS, ChainBreak, event_hash, verify_chains
from adapters.store.postgres import PostgresTarget, migrate, pending_migrations
from entrypoints.bootstrap import Chronicle
from tests.servers import TestServers


def events(stream: uuid.UUID, versions: Sequence[int], topic: str = "tests:Happened") -> list[StoredEvent]:
    return [StoredEvent(stream, v, topic, f'{{"n": {v}, "stream": "{stream}"}}'.encode()) for v in versions]


def record(store: EventStore, stored: list[StoredEvent]) -> None:
    """One insert statement, one transaction: a batch as the command bus writes it."""
    store.recorder.record(stored)


def stored_hashes(target: PostgresTarget, stream: uuid.UUID) -> list[bytes]:
    with target.connect() as conn:
        rows = conn.execute(
            "SELECT hash FROM chronicle.events WHERE originator_id = %s ORDER BY originator_version", (stream,)
        ).fetchall()
    return [row[0] for row in rows]


def chain(stored: list[StoredEvent]) -> list[bytes]:
    """The hashes the documented layout gives one stream's events, computed here."""
    hashes, prev = [], GENESIS
    for e in stored:
        assert isinstance(e.originator_id, uuid.UUID)  # events() names streams by UUID
        prev = event_hash(prev, e.originator_id, e.originator_version, e.topic, e.state)
        hashes.append(prev)
    return hashes


def tamper(target: PostgresTarget, statement: str, params: tuple[object, ...]) -> None:
    """What a superuser with direct table access could do: the append-only triggers are off
    for this session only."""
    with target.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        assert conn.execute(statement, params).rowcount == 1


def test_chain_is_computed_on_append_within_one_batch(target: PostgresTarget, store: EventStore) -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    a, b = events(first, range(1, 6)), events(second, range(1, 4))
    # Two streams interleaved in one statement, several versions of each.
    record(store, [a[0], b[0], a[1], a[2], b[1], a[3], b[2], a[4]])
    assert stored_hashes(target, first) == chain(a)
    assert stored_hashes(target, second) == chain(b)
    # A later batch chains on from the stored head.
    more = events(first, range(6, 9))
    record(store, more)
    assert stored_hashes(target, first) == chain(a + more)
    report = verify_chains(target)
    assert (report.streams, report.events, report.breaks) == (2, 11, [])


def test_hash_supplied_by_a_writer_is_replaced(target: PostgresTarget) -> None:
    stream = uuid.uuid4()
    with target.connect() as conn:
        conn.execute(
            "INSERT INTO chronicle.events (originator_id, originator_version, topic, state, hash)"
            " VALUES (%s, 1, 'tests:Happened', 'x'::bytea, 'forged'::bytea)",
            (stream,),
        )
    assert stored_hashes(target, stream) == [event_hash(GENESIS, stream, 1, "tests:Happened", b"x")]


def test_database_and_python_agree_on_the_layout(target: PostgresTarget) -> None:
    stream, prev = uuid.uuid4(), bytes(range(32))
    cases = [("tests:Happened", b"{}"), ("tests:Ünïcode", b"\x00\xff"), (None, None), ("", b"")]
    with target.connect() as conn:
        for topic, state in cases:
            in_db = conn.execute(
                "SELECT chronicle.event_hash(%s, %s, %s, %s, %s)", (prev, stream, 2**40, topic, state)
            ).fetchone()
            assert in_db == (event_hash(prev, stream, 2**40, topic, state),)


def test_the_trigger_chains_the_layout_of_odd_events(target: PostgresTarget) -> None:
    """The trigger writes the layout out rather than calling chronicle.event_hash (migration
    0011): a NULL, empty or non-ASCII topic or state chains as the documented layout says."""
    stream = uuid.uuid4()
    cases = [("tests:Happened", b"{}"), ("tests:Ünïcode", b"\x00\xff"), (None, None), ("", b""), ("t", None)]
    with target.connect() as conn:
        for version, (topic, state) in enumerate(cases, start=1):
            conn.execute(
                "INSERT INTO chronicle.events (originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s)",
                (stream, version, topic, state),
            )
    expected, prev = [], GENESIS
    for version, (topic, state) in enumerate(cases, start=1):
        prev = event_hash(prev, stream, version, topic, state)
        expected.append(prev)
    assert stored_hashes(target, stream) == expected


def test_a_gap_is_refused_and_a_conflict_stays_a_conflict(target: PostgresTarget, store: EventStore) -> None:
    stream = uuid.uuid4()
    record(store, events(stream, [1, 2]))
    with pytest.raises(PersistenceError, match="gap"):
        record(store, events(stream, [4]))
    # Optimistic concurrency is untouched: a version taken twice is still an integrity error.
    with pytest.raises(IntegrityError):
        record(store, events(stream, [2]))
    with pytest.raises(IntegrityError):
        record(store, events(stream, [1]))
    assert len(stored_hashes(target, stream)) == 2


async def test_service_history_verifies(chronicle: Chronicle, client: ChronicleClient) -> None:
    started = await client.conversations.start(title="kept")
    # Sent together, so group commit saves several versions of one stream in one batch.
    await asyncio.gather(
        *(client.conversations.add_message(started.conversation_id, "user", f"message {n}") for n in range(5))
    )
    one = verify_chains(chronicle.target, started.conversation_id)
    assert (one.streams, one.events, one.breaks) == (1, 6, [])
    everything = verify_chains(chronicle.target, batch_size=7)
    assert everything.intact and everything.events >= 6


def test_flipped_byte_is_found_at_its_version(target: PostgresTarget, store: EventStore) -> None:
    victim, bystander = uuid.uuid4(), uuid.uuid4()
    record(store, events(victim, range(1, 6)) + events(bystander, range(1, 6)))
    tamper(
        target,
        "UPDATE chronicle.events SET state = set_byte(state, 6, get_byte(state, 6) # 1)"
        " WHERE originator_id = %s AND originator_version = 3",
        (victim,),
    )
    report = verify_chains(target, batch_size=4)
    assert report.breaks == [ChainBreak(victim, 3, "hash mismatch")]
    assert (report.streams, report.events) == (2, 10)
    assert verify_chains(target, bystander).intact


def test_deleted_event_is_found(target: PostgresTarget, store: EventStore) -> None:
    stream = uuid.uuid4()
    record(store, events(stream, range(1, 6)))
    tamper(target, "DELETE FROM chronicle.events WHERE originator_id = %s AND originator_version = 3", (stream,))
    # The gap itself, and the next event, whose hash covered the one removed.
    assert verify_chains(target).breaks == [ChainBreak(stream, 3, "missing"), ChainBreak(stream, 4, "hash mismatch")]


def test_deleted_first_event_is_found(target: PostgresTarget, store: EventStore) -> None:
    stream = uuid.uuid4()
    record(store, events(stream, range(1, 4)))
    tamper(target, "DELETE FROM chronicle.events WHERE originator_id = %s AND originator_version = 1", (stream,))
    assert verify_chains(target).breaks == [ChainBreak(stream, 2, "hash mismatch")]


def test_migration_backfills_existing_events(servers: TestServers) -> None:
    with servers.fresh_database() as url:
        target = PostgresTarget(url)
        with target.connect() as conn:
            # The store as it was before the hash chain: only the first migration applied.
            (version, name, text), *_ = pending_migrations(set())
            conn.execute("CREATE SCHEMA chronicle")
            conn.execute(
                "CREATE TABLE chronicle.schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute(text)
            conn.execute("INSERT INTO chronicle.schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        streams = [uuid.uuid4() for _ in range(3)]
        before = [events(s, range(1, 5)) for s in streams]
        with target.connect() as conn, conn.cursor() as curs:  # (today's recorder needs later migrations)
            curs.executemany(
                "INSERT INTO chronicle.events (originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s)",
                [(e.originator_id, e.originator_version, e.topic, e.state) for stream in before for e in stream],
            )

        assert "0002_hash_chain.sql" in migrate(target)
        for stream, stored in zip(streams, before, strict=True):
            assert stored_hashes(target, stream) == chain(stored)
        # New appends chain on from the backfilled heads; the table is append-only again.
        new = EventStore(target, pool_size=1)
        after = events(streams[0], [5, 6])
        record(new, after)
        new.close()
        assert stored_hashes(target, streams[0]) == chain(before[0] + after)
        with target.connect() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE chronicle.events SET hash = NULL")
        assert verify_chains(target).intact


def audit_cli(url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHRONICLE_DATABASE_URL": url, "CHRONICLE_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", "audit", "verify", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )


def test_cli_exit_code(target: PostgresTarget, store: EventStore, tmp_path: Path) -> None:
    stream = uuid.uuid4()
    record(store, events(stream, range(1, 4)) + events(uuid.uuid4(), range(1, 3)))
    clean = audit_cli(target.url, tmp_path, "--all")
    assert clean.returncode == 0, clean.stderr
    assert "2 streams, 5 events checked, 0 breaks" in clean.stdout

    tamper(target, "UPDATE chronicle.events SET topic = 'tests:Other' WHERE originator_id = %s"
           " AND originator_version = 2", (stream,))
    broken = audit_cli(target.url, tmp_path, "--stream", str(stream))
    assert broken.returncode == 1
    assert f"break: stream {stream} version 2: hash mismatch" in broken.stdout
    assert "1 streams, 3 events checked, 1 breaks" in broken.stdout
    assert audit_cli(target.url, tmp_path, "--stream", "not-a-uuid").returncode != 0
