"""Per-user data keys for crypto-shredding: AES-256-GCM keys in `chronicle.data_keys`; and
the service's own keys (`chronicle.service_keys`), shared by its instances.

A user's key is made on their first write. Erasing the user destroys the key (the row
keeps only the time of erasure), which makes the content of every event they ever wrote
unreadable while the events, their ids, timestamps and hash chains stay. Keys never
leave this module except into the cipher; they are never logged.

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

from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import CONNECT_TIMEOUT
from domain.erasure import UserErased
from services.ports import keys as port

T = TypeVar("T")
KEY_CACHE_SECONDS = 30.0
KEY_BYTES = 32


class KeyRing(port.KeyRing):
    """The data keys of one database. The composition root makes one per process and hands
    it to everything that seals or opens content, so an erasure evicts the one cache."""

    def __init__(self, target: PostgresTarget):
        self.target = target
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
                "INSERT INTO chronicle.data_keys (owner, key, erased_at) VALUES (%s, NULL, now())"
                " ON CONFLICT (owner) DO UPDATE SET key = NULL, erased_at = coalesce(data_keys.erased_at, now())",
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
            row = conn.execute("SELECT key FROM chronicle.data_keys WHERE owner = %s", (owner,)).fetchone()
            # No row yet is not cached: the owner's first write is about to make one.
            if row is None:
                return None
            key = bytes(row[0]) if row[0] is not None else None
            self._cache[owner] = (key, time.monotonic() + KEY_CACHE_SECONDS)
            return key

        return self._on_connection(fetch)

    def _load_or_create(self, owner: str) -> bytes | None:
        def load_or_create(conn: psycopg.Connection) -> bytes | None:
            conn.execute(
                "INSERT INTO chronicle.data_keys (owner, key) VALUES (%s, %s) ON CONFLICT (owner) DO NOTHING",
                (owner, secrets.token_bytes(KEY_BYTES)),
            )
            row = conn.execute("SELECT key FROM chronicle.data_keys WHERE owner = %s", (owner,)).fetchone()
            key = bytes(row[0]) if row and row[0] is not None else None
            self._cache[owner] = (key, time.monotonic() + KEY_CACHE_SECONDS)
            return key

        return self._on_connection(load_or_create)

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


def service_key(target: PostgresTarget, name: str) -> bytes:
    """The service's own key `name` (chronicle.service_keys), made by whichever instance
    asks first: every instance on this database reads the same one."""
    with target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        conn.execute(
            "INSERT INTO chronicle.service_keys (name, key) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
            (name, secrets.token_bytes(KEY_BYTES)),
        )
        row = conn.execute("SELECT key FROM chronicle.service_keys WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise RuntimeError(f"service key {name!r} is neither stored nor made")
    return bytes(row[0])
