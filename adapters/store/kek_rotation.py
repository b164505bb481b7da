"""Attaching a store to its key-encryption keys (and wrapping the clear keys of an older
store), and rotating them after an erasure.

A rotation, run by one instance at a time (a Postgres advisory lock), in an order that a
crash anywhere leaves safe and the next attempt finishes:
1. the next KEK generation is made and written durably (KeyEncryptionKeys.next_generation:
   a crash after it leaves it made, and the next attempt takes the same one);
2. `chronicle.kek_state.generation` moves to it: keys made from then on are wrapped under it
   (a key being made under the old one is waited for: its INSERT reads the row FOR SHARE);
3. every live key wrapped under an older generation is unwrapped and wrapped again under
   the new one, a batch per transaction, until none is left (each row is updated only if
   still what was read, so an erasure meanwhile wins);
4. only then are the older generations destroyed (file overwritten, flushed, removed),
5. and the erased rows whose key they wrapped are marked covered (`kek_generation` NULL).
From 4 on, no copy of the database made before (WAL, replica, backup) can unwrap any key
erased before 3 read it: what wrapped it exists nowhere. Other instances meet the new
generation when they next read or make a key, and read it from the shared KEK store.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import psycopg
from cryptography.exceptions import InvalidTag

from adapters.store.kek import keks_at
from adapters.store.keys import current_generation, data_key_context, service_key, service_key_context
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import CONNECT_TIMEOUT
from services.ports.keys import KeyEncryptionKeys, KeyRotation, RotationUnavailable

log = logging.getLogger(__name__)
ROTATION_LOCK = 0x43485232  # "CHR2": one rotation at a time across the fleet
REWRAP_BATCH = 1000
NO_GENERATION_LEFT = 2**31 - 1  # destroy_before it: every generation
CHECK_KEY = "kek-check"  # a service key no one uses: opening it proves the KEKs are the store's
Context = Callable[[str], bytes]  # whose key: what a wrapping is bound to
# (table, key name column, context of a key's wrapping)
KEY_TABLES: tuple[tuple[str, str, Context], ...] = (("data_keys", "owner", data_key_context), ("service_keys", "name", service_key_context))


def attach(
    target: PostgresTarget, keks: KeyEncryptionKeys, *, provisional: bool = False, or_recorded: bool = False
) -> KeyEncryptionKeys:
    """Record where this store's KEKs are (on first start) and wrap any key still kept in
    clear (a store made before keys were wrapped): then the clear column is emptied and the
    tables rewritten (VACUUM FULL), so the clear bytes leave the live heap. Idempotent.

    Every process on a store must be given the same KEKs: one given others is refused (it
    would wrap keys the others cannot open), as is one whose KEKs do not open the store's
    check key (the same path, but not a shared directory). Only a store attached
    `provisional`ly (by a tool seeding it before any service ran) has its keys moved to the
    KEKs of the first process that attaches it for good. `or_recorded`: `keks` are only a
    default (no setting named them): a store that records others keeps those. Returns the
    KEKs attached."""
    with target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (ROTATION_LOCK,))
        try:
            recorded = conn.execute("SELECT location, provisional FROM chronicle.kek_state").fetchone()
            if or_recorded and recorded is not None and not recorded[1]:
                keks = keks_at(str(recorded[0]))
            if recorded is not None and recorded[0] != keks.location and not recorded[1]:
                raise LookupError(
                    f"this store's keys are wrapped by the key-encryption keys at {recorded[0]}, and this process"
                    f" is given {keks.location}: give every process of the deployment the same ones"
                )
            generation = keks.generations()[-1]
            if recorded is None or recorded[0] != keks.location:
                if recorded is not None:
                    previous = keks_at(str(recorded[0]))
                    for table, name, context in KEY_TABLES:
                        rewrap(conn, table, name, context, previous, keks, generation, every=True)
                    with contextlib.suppress(RotationUnavailable):  # (the seeding tool's keys serve no one now)
                        previous.destroy_before(NO_GENERATION_LEFT)
                conn.execute(
                    "INSERT INTO chronicle.kek_state (location, generation, provisional) VALUES (%s, %s, %s)"
                    " ON CONFLICT (one_row) DO UPDATE"
                    " SET location = excluded.location, generation = excluded.generation, provisional = excluded.provisional",
                    (keks.location, generation, provisional),
                )
                log.info("key-encryption keys attached", extra={"moved": recorded is not None})
            elif recorded[1] and not provisional:
                conn.execute("UPDATE chronicle.kek_state SET provisional = false")
            generation = current_generation(conn)
            if generation not in keks.generations():
                raise LookupError(
                    f"this store's keys are wrapped under key-encryption key generation {generation},"
                    f" which {keks.location} does not hold: give the deployment's KEKs (CHRONICLE_KEK_DIR, ...)"
                )
            if sum(wrap_clear(conn, table, name, context, keks, generation) for table, name, context in KEY_TABLES):
                for table, _, _ in KEY_TABLES:
                    conn.execute(f"VACUUM (FULL) chronicle.{table}")
                log.info("clear keys wrapped under the key-encryption key; key tables rewritten")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (ROTATION_LOCK,))
    try:
        service_key(target, CHECK_KEY, keks)  # made by the first process, opened by every other
    except InvalidTag:
        raise LookupError(
            f"the key-encryption keys at {keks.location} do not open this store's keys: every process must"
            " read the same KEK directory (one volume they all mount), not a copy of its own"
        ) from None
    return keks


def wrap_clear(
    conn: psycopg.Connection, table: str, name: str, context: Context, keks: KeyEncryptionKeys, generation: int
) -> int:
    done = 0
    while rows := conn.execute(
        f"SELECT {name}, key FROM chronicle.{table} WHERE key IS NOT NULL LIMIT %s", (REWRAP_BATCH,)
    ).fetchall():
        conn.execute(
            f"UPDATE chronicle.{table} t SET key = NULL, wrapped = v.wrapped, kek_generation = %s"
            f" FROM unnest(%s::text[], %s::bytea[]) AS v(n, wrapped) WHERE t.{name} = v.n",
            (generation, [row[0] for row in rows], [keks.wrap(generation, bytes(row[1]), context(row[0])) for row in rows]),
        )
        done += len(rows)
    return done


def rewrap(
    conn: psycopg.Connection,
    table: str,
    name: str,
    context: Context,
    source: KeyEncryptionKeys,
    keks: KeyEncryptionKeys,
    new: int,
    *,
    every: bool = False,
) -> int:
    """Every live key of `table` wrapped under an older generation than `new` (`every`: under
    any generation of `source`) wrapped again under `new`, a batch per transaction; a row is
    updated only if still what was read, so an erasure meanwhile wins."""
    done = 0
    after = ""
    while rows := conn.execute(
        f"SELECT {name}, wrapped, kek_generation FROM chronicle.{table}"
        f" WHERE wrapped IS NOT NULL AND (%s OR kek_generation < %s) AND {name} > %s ORDER BY {name} LIMIT %s",
        (every, new, after, REWRAP_BATCH),
    ).fetchall():
        names = [row[0] for row in rows]
        olds = [bytes(row[1]) for row in rows]
        news = [keks.wrap(new, source.unwrap(row[2], bytes(row[1]), context(row[0])), context(row[0])) for row in rows]
        conn.execute(
            f"UPDATE chronicle.{table} t SET wrapped = v.new, kek_generation = %s"
            f" FROM unnest(%s::text[], %s::bytea[], %s::bytea[]) AS v(n, old, new)"
            f" WHERE t.{name} = v.n AND t.wrapped = v.old",
            (new, names, olds, news),
        )
        done += len(rows)
        after = names[-1]
    return done


class PostgresKeyRotation(KeyRotation):
    def __init__(self, target: PostgresTarget, keks: KeyEncryptionKeys) -> None:
        self.target = target
        self.keks = keks

    def due_in(self, epoch: float) -> float | None:
        """A rotation is due half an epoch after the first erasure it would cover (so the
        erasures of that half share one), and at once when one was left unfinished."""
        with self.target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            generation = current_generation(conn)
            unfinished = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM chronicle.data_keys WHERE wrapped IS NOT NULL AND kek_generation < %(g)s)"
                " OR EXISTS (SELECT 1 FROM chronicle.service_keys WHERE wrapped IS NOT NULL AND kek_generation < %(g)s)",
                {"g": generation},
            ).fetchone()
            first = conn.execute(
                "SELECT extract(epoch FROM now() - min(erased_at)) FROM chronicle.data_keys"
                " WHERE erased_at IS NOT NULL AND kek_generation IS NOT NULL"
            ).fetchone()
        if (unfinished and unfinished[0]) or len(self.keks.generations()) > 1:
            return 0.0
        if first is None or first[0] is None:
            return None
        return max(0.0, epoch / 2 - float(first[0]))

    def rotate(self) -> bool:
        with self.target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            [locked] = conn.execute("SELECT pg_try_advisory_lock(%s)", (ROTATION_LOCK,)).fetchone()  # type: ignore[misc]
            if not locked:
                return False
            try:
                self._rotate(conn)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (ROTATION_LOCK,))
        return True

    def _rotate(self, conn: psycopg.Connection) -> None:
        started = time.monotonic()
        new = self.keks.next_generation()  # 1. durable before anything is wrapped under it
        conn.execute("UPDATE chronicle.kek_state SET generation = %s WHERE generation < %s", (new, new))  # 2.
        rewrapped = sum(rewrap(conn, table, name, context, self.keks, self.keks, new) for table, name, context in KEY_TABLES)  # 3.
        self.keks.destroy_before(new)  # 4.
        conn.execute(  # 5.
            "UPDATE chronicle.data_keys SET kek_generation = NULL WHERE wrapped IS NULL AND kek_generation < %s", (new,)
        )
        log.info(
            "key-encryption key rotated",
            extra={"generation": new, "keys": rewrapped, "seconds": round(time.monotonic() - started, 3)},
        )


def attached(target: PostgresTarget, otherwise: KeyEncryptionKeys) -> KeyEncryptionKeys:
    """The KEKs the store records; a store that records none is attached to `otherwise` (a
    tool seeding a fresh store: a service started on it later moves the keys to its own)."""
    with target.connect(autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        recorded = conn.execute("SELECT location FROM chronicle.kek_state").fetchone()
    if recorded is not None:
        return keks_at(str(recorded[0]))
    attach(target, otherwise, provisional=True)
    return otherwise
