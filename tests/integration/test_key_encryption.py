"""Data keys kept wrapped by a key-encryption key outside Postgres, rotated after an erasure,
so that nothing Postgres writes (heap, WAL, and so replicas and backups) can open an erased
user's content once the erasure epoch has passed (issue 30)."""

from __future__ import annotations

import asyncio
import base64
import functools
import secrets
import stat
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import psycopg
import pytest
from chronicle_client import ChronicleClient
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from adapters.auth import TokenAuthority
from adapters.embedded import EmbeddedPostgres
from adapters.store.kek import KekDirectory
from adapters.store.kek_rotation import PostgresKeyRotation, attach, attached
from adapters.store.keys import INSERT_WRAPPED, KeyRing, data_key_context
from adapters.store.mapper import associated_data
from adapters.store.postgres import PostgresTarget, migrate
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.kek import attached_keks
from entrypoints.settings import Settings
from tests.conftest import make_settings
from tests.rows import erased_key_rotated
from tests.servers import TestServers
from tests.waiting import eventually

KEY_BYTES = 32
CANARY = f"CANARY-{uuid.uuid4().hex}"


@pytest.fixture
def own_postgres() -> Iterator[tuple[str, Path]]:
    """A Postgres of this test's own, whose WAL holds only what this test wrote: (URL, data directory).
    It keeps its WAL segments after a checkpoint, so the test reads them by name. (Its directory
    is not pytest's: pytest removes older runs' directories, another run's included.)"""
    with tempfile.TemporaryDirectory(prefix="chronicle-wal-") as scratch:
        yield from postgres_in(Path(scratch))


def postgres_in(scratch: Path) -> Iterator[tuple[str, Path]]:
    server = EmbeddedPostgres(scratch)
    url = server.start()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_keep_size = '1GB'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield url, server.data_dir
    finally:
        server.stop()


@pytest.fixture
async def short_epoch(own_postgres: tuple[str, Path], servers: TestServers) -> AsyncIterator[Chronicle]:
    url, data_dir = own_postgres
    chronicle = await bootstrap(make_settings(url, servers.nats_url, data_dir.parent / "data", erasure_epoch=1.0))
    yield chronicle
    await chronicle.stop()


def current_lsn(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        [lsn] = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()  # type: ignore[misc]
    return int(lsn)


def wal_written(url: str, data_dir: Path, start: int, end: int) -> bytes:
    """The WAL bytes from LSN `start` to `end`, read from the segment files on disk."""
    with psycopg.connect(url, autocommit=True) as conn:
        [[timeline]] = conn.execute("SELECT left(pg_walfile_name(pg_current_wal_lsn()), 8)").fetchall()
        [[size]] = conn.execute("SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'").fetchall()
    per_xlogid = 0x1_0000_0000 // size
    chunks = []
    position = start
    while position < end:
        segment, offset = divmod(position, size)
        name = f"{timeline}{segment // per_xlogid:08X}{segment % per_xlogid:08X}"
        length = min(end - position, size - offset)
        with open(data_dir / "pg_wal" / name, "rb") as f:
            f.seek(offset)
            chunks.append(f.read(length))
        position += length
    return b"".join(chunks)


def sealed_event(url: str, owner: str) -> tuple[bytes, bytes, bytes]:
    """(nonce, ciphertext, associated data) of one of the owner's stored events."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT originator_id, originator_version, state FROM chronicle.events ORDER BY notification_id"
        ).fetchall()
    for originator_id, version, state in rows:
        stored = orjson.loads(bytes(state))
        if stored.get("_owner") == owner and "_sealed" in stored:
            raw = base64.b64decode(stored["_sealed"])
            return raw[:12], raw[12:], associated_data(originator_id, version)
    raise AssertionError(f"no sealed event of {owner}")


def keys_opening(data: bytes, event: tuple[bytes, bytes, bytes]) -> list[bytes]:
    """Every 32-byte window of `data` that, taken as an AES-256-GCM key, opens `event`."""
    nonce, ciphertext, aad = event
    found = []
    for i in range(len(data) - KEY_BYTES + 1):
        candidate = data[i : i + KEY_BYTES]
        try:
            AESGCM(candidate).decrypt(nonce, ciphertext, aad)
        except InvalidTag:
            continue
        found.append(candidate)
    return found


async def write_as(client: ChronicleClient, words: str) -> None:
    started = await client.conversations.start(title=f"{words} title", tags=["canary"])
    await client.conversations.add_message(started.conversation_id, "user", f"message 0 {words} secret words")
    await client.conversations.get(started.conversation_id)


async def test_after_an_erasure_and_its_epoch_no_window_of_the_wal_opens_the_erased_users_events(
    own_postgres: tuple[str, Path], short_epoch: Chronicle, authority: TokenAuthority
) -> None:
    url, data_dir = own_postgres
    chronicle = short_epoch
    prefix = chronicle.settings.subject_prefix
    erased_user, live_user = f"erased-{uuid.uuid4().hex[:8]}", f"live-{uuid.uuid4().hex[:8]}"
    start = current_lsn(url)
    erased, live, admin = [
        await ChronicleClient.connect(chronicle.nats_url, authority.issue(user, claims=claims), prefix=prefix)
        for user, claims in ((erased_user, None), (live_user, None), ("admin-1", {"roles": ["admin"]}))
    ]
    try:
        await write_as(erased, CANARY)
        await write_as(live, "still here")
        erased_key, live_key = chronicle.keys.key_for_reading(erased_user), chronicle.keys.key_for_reading(live_user)
        assert erased_key is not None and live_key is not None
        with psycopg.connect(url) as conn:
            [[wrapped, generation]] = conn.execute(
                "SELECT wrapped, kek_generation FROM chronicle.data_keys WHERE owner = %s", (erased_user,)
            ).fetchall()
        await admin.request("cmd.user.erase", {"user_id": erased_user})
    finally:
        for client in (erased, live, admin):
            await client.close()

    await eventually(functools.partial(erased_key_rotated, url, erased_user), "the key-encryption key rotated after the erasure", timeout=10)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    end = current_lsn(url)
    wal = await asyncio.to_thread(wal_written, url, data_dir, start, end)
    erased_event, live_event = sealed_event(url, erased_user), sealed_event(url, live_user)

    assert erased_user.encode() in wal and len(wal) > 100_000  # (the range holds the test's writes)
    print(f"scanned {len(wal)} bytes of WAL")
    # The erased user's key, wrapped, is in the WAL: but what wrapped it is gone, and no
    # 32 bytes of the WAL open their events. No key is in it in clear, a live one neither.
    assert bytes(wrapped) in wal
    keks = KekDirectory(chronicle.settings.data_dir / "kek")
    assert generation not in keks.generations()
    with pytest.raises(KeyError):
        keks.unwrap(generation, bytes(wrapped), data_key_context(erased_user))
    assert await asyncio.to_thread(keys_opening, wal, erased_event) == []
    assert await asyncio.to_thread(keys_opening, wal, live_event) == []
    # (Nor is either key in clear in any file of the server: heap, indexes, every WAL segment.)
    assert not [f for f in data_dir.rglob("*") if f.is_file() and (erased_key in f.read_bytes() or live_key in f.read_bytes())]

    # The scan is not hollow: a key kept in clear, as keys were before they were wrapped, is
    # found in the WAL and opens its owner's events.
    planted_from = current_lsn(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE planted (key bytea)")
        conn.execute("INSERT INTO planted VALUES (%s)", (live_key,))
        conn.execute("CHECKPOINT")
    planted = await asyncio.to_thread(wal_written, url, data_dir, planted_from, current_lsn(url))
    assert await asyncio.to_thread(keys_opening, planted, live_event) == [live_key]
    assert erased_key not in wal


async def test_the_kek_is_a_private_file_and_keys_are_stored_wrapped_only(instance: tuple[Chronicle, str]) -> None:
    chronicle, url = instance
    kek_dir = chronicle.settings.data_dir / "kek"
    files = list(kek_dir.iterdir())
    assert [f.name for f in files] == ["kek-1"]
    assert stat.S_IMODE(kek_dir.stat().st_mode) == 0o700 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT location FROM chronicle.kek_state").fetchone() == (f"dir:{kek_dir.absolute()}",)
        assert conn.execute("SELECT count(*) FROM chronicle.service_keys WHERE key IS NOT NULL OR wrapped IS NULL").fetchone() == (0,)


def test_a_store_with_clear_keys_is_converted_by_the_usual_start(own_postgres: tuple[str, Path], tmp_path: Path) -> None:
    """A store made before keys were wrapped holds them in clear: `attach`, which every start
    runs, wraps them in place and rewrites the tables so the clear bytes leave the heap. (On a
    server of its own: a rewrite keeps row versions a transaction open elsewhere may still see.)"""
    target = PostgresTarget(own_postgres[0])
    migrate(target)
    old_keys = {f"old-{i}": secrets.token_bytes(KEY_BYTES) for i in range(3)}
    cursors = secrets.token_bytes(KEY_BYTES)
    with psycopg.connect(target.url, autocommit=True) as conn:  # the rows as the earlier version wrote them
        for owner, key in old_keys.items():
            conn.execute("INSERT INTO chronicle.data_keys (owner, key) VALUES (%s, %s)", (owner, key))
        conn.execute("INSERT INTO chronicle.data_keys (owner, key, erased_at) VALUES ('gone', NULL, now())")
        conn.execute("INSERT INTO chronicle.service_keys (name, key) VALUES ('cursors', %s)", (cursors,))
        conn.execute("CHECKPOINT")
        assert heap_holding(conn, "chronicle.data_keys", old_keys["old-0"])

    keks = KekDirectory(tmp_path / "kek")
    attach(target, keks)
    attach(target, keks)  # (a second start finds nothing to do)

    ring = KeyRing(target, keks)
    try:
        assert {owner: ring.key_for_reading(owner) for owner in old_keys} == old_keys
        assert ring.is_erased("gone") and ring.key_for_reading("gone") is None
    finally:
        ring.close()
    with psycopg.connect(target.url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM chronicle.data_keys WHERE key IS NOT NULL").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM chronicle.service_keys WHERE key IS NOT NULL").fetchone() == (0,)
        conn.execute("CHECKPOINT")
        assert not any(heap_holding(conn, "chronicle.data_keys", key) for key in old_keys.values())
        assert not heap_holding(conn, "chronicle.service_keys", cursors)


def heap_holding(conn: psycopg.Connection, relation: str, needle: bytes) -> bool:
    [[path]] = conn.execute("SELECT pg_relation_filepath(%s::regclass)", (relation,)).fetchall()
    [[size]] = conn.execute("SELECT pg_relation_size(%s::regclass)", (relation,)).fetchall()
    if not size:
        return False
    [[data]] = conn.execute("SELECT pg_read_binary_file(%s, 0, %s)", (path, size)).fetchall()
    return needle in bytes(data)


def test_a_rotation_left_unfinished_is_finished_and_then_destroys_the_old_kek(target: PostgresTarget, tmp_path: Path) -> None:
    """A crash after the new KEK was written and before the old one was destroyed: the next
    rotation takes the same new generation, wraps what is left and destroys the old one."""
    keks = KekDirectory(tmp_path / "kek")
    attach(target, keks)
    ring = KeyRing(target, keks)
    try:
        keys = {f"user-{i}": ring.key_for_writing(f"user-{i}") for i in range(5)}
        ring.destroy("user-0")
    finally:
        ring.close()
    rotation = PostgresKeyRotation(target, keks)
    assert rotation.due_in(epoch=3600) == pytest.approx(1800, abs=60)  # half an epoch after the erasure

    new = keks.next_generation()  # ... and the process died here
    assert keks.generations() == [1, 2] and rotation.due_in(epoch=3600) == 0
    assert rotation.rotate()
    assert keks.generations() == [new] and not (tmp_path / "kek" / "kek-1").exists()
    assert rotation.due_in(epoch=3600) is None

    reread = KeyRing(target, KekDirectory(tmp_path / "kek"))  # (another process: reads the files afresh)
    try:
        assert {owner: reread.key_for_reading(owner) for owner in keys if owner != "user-0"} == {
            owner: key for owner, key in keys.items() if owner != "user-0"
        }
        assert reread.key_for_writing("user-new") is not None
    finally:
        reread.close()
    with psycopg.connect(target.url) as conn:
        assert conn.execute("SELECT DISTINCT kek_generation FROM chronicle.data_keys WHERE wrapped IS NOT NULL").fetchall() == [(new,)]


def test_two_instances_rotating_at_once_rotate_once(target: PostgresTarget, tmp_path: Path) -> None:
    keks = KekDirectory(tmp_path / "kek")
    attach(target, keks)
    with psycopg.connect(target.url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (0x43485232,))  # another instance is rotating
        assert not PostgresKeyRotation(target, keks).rotate()
    assert keks.generations() == [1]


def test_a_seeded_stores_keys_move_to_the_first_services_kek_store(target: PostgresTarget, tmp_path: Path) -> None:
    """A tool seeding a fresh store attaches it provisionally (bench/seed.py); the first
    start given other KEKs unwraps the keys with the recorded ones and wraps them under its own."""
    seeding = attached(target, KekDirectory(tmp_path / "seeding"))
    ring = KeyRing(target, seeding)
    try:
        key = ring.key_for_writing("mover")
    finally:
        ring.close()
    service = KekDirectory(tmp_path / "service")
    attach(target, service)
    moved = KeyRing(target)  # (what the store records now)
    try:
        assert moved.key_for_reading("mover") == key
    finally:
        moved.close()
    with psycopg.connect(target.url) as conn:
        assert conn.execute("SELECT location, provisional FROM chronicle.kek_state").fetchone() == (service.location, False)
    assert list((tmp_path / "seeding").iterdir()) == []  # (the seeding tool's KEKs are destroyed)


def test_a_process_given_other_keks_than_the_stores_is_refused(target: PostgresTarget, tmp_path: Path) -> None:
    """Another directory (a setting that differs), or the same path holding other keys (a
    directory each container keeps for itself, not one shared volume), would wrap keys the
    other processes cannot open: the start stops instead."""
    attach(target, KekDirectory(tmp_path / "shared"))
    with pytest.raises(LookupError, match="same ones"):
        attach(target, KekDirectory(tmp_path / "elsewhere"))
    (tmp_path / "shared" / "kek-1").unlink()  # another container's own directory at that path
    with pytest.raises(LookupError, match="do not open"):
        attach(target, KekDirectory(tmp_path / "shared"))


def test_a_start_without_the_stores_kek_generation_refuses_to_go_on(target: PostgresTarget, tmp_path: Path) -> None:
    keks = KekDirectory(tmp_path / "kek")
    attach(target, keks)
    PostgresKeyRotation(target, keks).rotate()  # generation 2
    (tmp_path / "kek" / "kek-2").unlink()  # the KEK directory lost (an empty one makes generation 1)
    with pytest.raises(LookupError, match="generation 2"):
        attach(target, KekDirectory(tmp_path / "kek"))


def test_another_instance_goes_on_with_the_new_generation_after_a_rotation(target: PostgresTarget, tmp_path: Path) -> None:
    """Instances share the KEK directory: one rotates, the other meets the new generation
    when it next reads or makes a key, and reads it from the directory."""
    mine, theirs = KekDirectory(tmp_path / "kek"), KekDirectory(tmp_path / "kek")
    attach(target, mine)
    ring = KeyRing(target, mine)
    try:
        before = ring.key_for_writing("early")
        assert PostgresKeyRotation(target, theirs).rotate()
        ring.evict("early")
        assert ring.key_for_reading("early") == before  # wrapped again under generation 2, opened
        ring.key_for_writing("late")
    finally:
        ring.close()
    with psycopg.connect(target.url) as conn:
        assert conn.execute("SELECT DISTINCT kek_generation FROM chronicle.data_keys").fetchall() == [(2,)]


def test_no_key_is_made_under_a_generation_a_rotation_moved_on_from(target: PostgresTarget, tmp_path: Path) -> None:
    """A key wrapped under the old generation by an instance that did not yet see the rotation
    is not inserted (its maker tries again under the new one): none is left for the old KEK's
    destruction to lose."""
    keks = KekDirectory(tmp_path / "kek")
    attach(target, keks)
    stale = keks.wrap(1, secrets.token_bytes(KEY_BYTES), data_key_context("racer"))
    assert PostgresKeyRotation(target, keks).rotate()
    with psycopg.connect(target.url, autocommit=True) as conn:
        inserted = conn.execute(INSERT_WRAPPED.format(table="data_keys", name="owner"), ("racer", stale, 1))
        assert inserted.rowcount == 0


def test_with_no_kek_setting_a_process_opens_the_stores_recorded_keks(target: PostgresTarget, tmp_path: Path) -> None:
    """An operator command run with another data directory opens the service's KEKs; a
    setting that names others is refused at attach (above)."""
    service = KekDirectory(tmp_path / "service" / "kek")
    attach(target, service)
    chosen = attached_keks(Settings(database_url=target.url, data_dir=tmp_path / "operator"), target)
    assert chosen.location == service.location
    assert not (tmp_path / "operator").exists()
    with pytest.raises(LookupError, match="same ones"):
        attached_keks(Settings(database_url=target.url, kek_dir=tmp_path / "operator" / "kek"), target)
