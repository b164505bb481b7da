"""Per-user data keys for crypto-shredding: AES-256-GCM keys in `chronicle.data_keys`, kept
wrapped by a key-encryption key held outside Postgres (adapters/store/kek.py); and the
service's own keys (`chronicle.service_keys`), wrapped the same way, shared by its instances.

A user's key is made on their first write. Erasing the user destroys the wrapped key (the
row keeps the time of erasure and the KEK generation that wrapped it, until a rotation
destroys that generation: adapters/store/kek_rotation.py), which makes the content of every
event they ever wrote unreadable while the events, their ids, timestamps and hash chains
stay. Keys never leave this module except into the cipher; they are never logged.

Keys are cached per process for a short time; erasure evicts its own process's cache at
once, and other processes' caches within KEY_CACHE_SECONDS.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

from adapters.store.kek import keks_at
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import CONNECT_TIMEOUT
from domain.erasure import UserErased
from services.ports import keys as port

T = TypeVar("T")
KEY_CACHE_SECONDS = 30.0
KEY_BYTES = 32
MAKE_ATTEMPTS = 3  # a rotation moving the generation on under a key being made, at most twice

# A key is made only under the store's current KEK generation, read FOR SHARE: a rotation
# moving it on waits for this statement, and a statement after it inserts nothing.
INSERT_WRAPPED = (
    "INSERT INTO chronicle.{table} ({name}, wrapped, kek_generation)"
    " SELECT %s, %s, s.generation FROM (SELECT generation FROM chronicle.kek_state FOR SHARE) s"
    " WHERE s.generation = %s ON CONFLICT ({name}) DO NOTHING"
)


def data_key_context(owner: str) -> bytes:
    return b"chronicle data key\x00" + owner.encode()


def service_key_context(name: str) -> bytes:
    return b"chronicle service key\x00" + name.encode()


def recorded_keks(conn: psycopg.Connection) -> port.KeyEncryptionKeys:
    """The key-encryption keys this store records it is wrapped by."""
    row = conn.execute("SELECT location FROM chronicle.kek_state").fetchone()
    if row is None:
        raise LookupError("this store records no key-encryption key yet: start the service once (it attaches one)")
    return keks_at(str(row[0]))


def current_generation(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT generation FROM chronicle.kek_state").fetchone()
    if row is None:
        raise LookupError("this store records no key-encryption key yet: start the service once (it attaches one)")
    return int(row[0])


def unwrapped(keks: port.KeyEncryptionKeys, row: tuple[bytes | None, int | None] | None, context: bytes) -> bytes | None:
    if row is None or row[0] is None or row[1] is None:
        return None
    return keks.unwrap(row[1], bytes(row[0]), context)


class KeyRing(port.KeyRing):
    """The data keys of one database. The composition root makes one per process and hands
    it to everything that seals or opens content, so an erasure evicts the one cache."""

    def __init__(self, target: PostgresTarget, keks: port.KeyEncryptionKeys | None = None):
        """`keks`: the key-encryption keys that wrap the data keys; without them, the ones the
        store records (chronicle.kek_state), read on first use."""
        self.target = target
        self._keks = keks
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._cache: dict[str, tuple[bytes | None, float]] = {}
        # Set by the event store that uses the ring (its Reachability): the ring's connection
        # watched while in use, and whether a dropped one is worth opening again now.
        self.watch: Callable[[psycopg.Connection], contextlib.AbstractContextManager[None]] = (
            lambda conn: contextlib.nullcontext()
        )
        self.answers: Callable[[], bool] = lambda: True

    def key_for_writing(self, owner: str) -> bytes:
        """The owner's key, made on first use; UserErased once the owner was erased."""
        key = self._cached(owner)
        if key is None:
            key = self._load_or_create(owner)
        if key is None:
            raise UserErased(f"user {owner} was erased; nothing more is recorded for them", field="owner", rule="not_erased")
        return key

    def key_for_reading(self, owner: str) -> bytes | None:
        """The owner's key, or None when it was destroyed (or never made)."""
        cached = self._cache.get(owner)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        return self._fetch(owner)

    def destroy(self, owner: str) -> None:
        """Destroy the owner's key for good (idempotent); the row remembers when."""
        def destroy(conn: psycopg.Connection) -> None:
            conn.execute(
                "INSERT INTO chronicle.data_keys (owner, erased_at) VALUES (%s, now())"
                " ON CONFLICT (owner) DO UPDATE"
                " SET key = NULL, wrapped = NULL, erased_at = coalesce(data_keys.erased_at, now())",
                (owner,),
            )
            self._cache[owner] = (None, time.monotonic() + KEY_CACHE_SECONDS)  # (under the lock, with the write)

        self._on_connection(destroy)

    def is_erased(self, owner: str) -> bool:
        row = self._on_connection(
            lambda conn: conn.execute(
                "SELECT erased_at IS NOT NULL FROM chronicle.data_keys WHERE owner = %s", (owner,)
            ).fetchone()
        )
        return bool(row and row[0])

    def _cached(self, owner: str) -> bytes | None:
        cached = self._cache.get(owner)
        return cached[0] if cached is not None and cached[1] > time.monotonic() else None

    def _fetch(self, owner: str) -> bytes | None:
        def fetch(conn: psycopg.Connection) -> bytes | None:
            key = self._read(conn, owner)
            if key is not None or self._exists(conn, owner):  # (no row yet is not cached: a first write is about to make one)
                self._cache[owner] = (key, time.monotonic() + KEY_CACHE_SECONDS)
            return key

        return self._on_connection(fetch)

    def _load_or_create(self, owner: str) -> bytes | None:
        def load_or_create(conn: psycopg.Connection) -> bytes | None:
            keks = self._keks_on(conn)
            for _ in range(MAKE_ATTEMPTS):
                if self._exists(conn, owner):
                    break
                generation = current_generation(conn)
                wrapped = keks.wrap(generation, secrets.token_bytes(KEY_BYTES), data_key_context(owner))
                conn.execute(INSERT_WRAPPED.format(table="data_keys", name="owner"), (owner, wrapped, generation))
            key = self._read(conn, owner)
            self._cache[owner] = (key, time.monotonic() + KEY_CACHE_SECONDS)
            return key

        return self._on_connection(load_or_create)

    def _read(self, conn: psycopg.Connection, owner: str) -> bytes | None:
        """The owner's key unwrapped; a rotation that destroyed the row's generation between
        the read and the unwrapping has wrapped it again under the next: read once more."""
        select = "SELECT wrapped, kek_generation FROM chronicle.data_keys WHERE owner = %s"
        try:
            return unwrapped(self._keks_on(conn), conn.execute(select, (owner,)).fetchone(), data_key_context(owner))
        except KeyError:
            return unwrapped(self._keks_on(conn), conn.execute(select, (owner,)).fetchone(), data_key_context(owner))

    @staticmethod
    def _exists(conn: psycopg.Connection, owner: str) -> bool:
        return conn.execute("SELECT 1 FROM chronicle.data_keys WHERE owner = %s", (owner,)).fetchone() is not None

    def _keks_on(self, conn: psycopg.Connection) -> port.KeyEncryptionKeys:
        if self._keks is None:
            self._keks = recorded_keks(conn)
        return self._keks

    def _on_connection(self, work: Callable[[psycopg.Connection], T]) -> T:
        """`work` on the ring's connection, under its lock. A connection the server dropped
        (a restart, an outage now over) is opened afresh and the work tried once more."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    with self.watch(conn):
                        return work(conn)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == 2 or not (conn.broken or conn.closed) or not self.answers():
                        raise
                    conn.close()
        raise AssertionError("unreachable")

    def evict(self, owner: str) -> None:
        self._cache.pop(owner, None)

    def _connection(self) -> psycopg.Connection:
        # One autocommit connection per ring, used under the lock; re-opened when it drops.
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self.target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


def service_key(target: PostgresTarget, name: str, keks: port.KeyEncryptionKeys | None = None) -> bytes:
    """The service's own key `name` (chronicle.service_keys), made by whichever instance
    asks first: every instance on this database reads the same one."""
    select = "SELECT wrapped, kek_generation FROM chronicle.service_keys WHERE name = %s"
    with target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        keks = keks or recorded_keks(conn)
        for _ in range(MAKE_ATTEMPTS):
            if conn.execute(select, (name,)).fetchone() is not None:
                break
            generation = current_generation(conn)
            wrapped = keks.wrap(generation, secrets.token_bytes(KEY_BYTES), service_key_context(name))
            conn.execute(INSERT_WRAPPED.format(table="service_keys", name="name"), (name, wrapped, generation))
        try:
            key = unwrapped(keks, conn.execute(select, (name,)).fetchone(), service_key_context(name))
        except KeyError:  # (a rotation between the read and the unwrapping)
            key = unwrapped(keks, conn.execute(select, (name,)).fetchone(), service_key_context(name))
    if key is None:
        raise RuntimeError(f"service key {name!r} is neither stored nor made")
    return key
