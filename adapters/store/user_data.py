"""What an erasure removes from Postgres beside destroying the key: the user's stored command
replies (which may quote titles) and preview blobs, then the dead row versions they and the
destroyed key leave in the tables' pages."""

from __future__ import annotations

import logging

import psycopg

from adapters.store.postgres import PostgresTarget
from services.ports.user_data import UserData

log = logging.getLogger(__name__)
KEY_TABLE_LOCK_WAIT = 2.0  # seconds an erasure waits to rewrite the key table


class PostgresUserData(UserData):
    def __init__(self, target: PostgresTarget) -> None:
        self.target = target

    def forget(self, user_id: str) -> None:
        """The key table is rewritten whole (VACUUM FULL): its old row version held the key itself,
        and a plain vacuum frees the row but may leave its bytes in the page's free space. The
        table is small (a row per user) and the rewrite takes moments, during which appends
        wait; if it cannot have its lock within KEY_TABLE_LOCK_WAIT, a plain vacuum does.
        """
        with self.target.connect(autocommit=True) as conn:
            conn.execute("DELETE FROM chronicle.idempotency WHERE owner = %s", (user_id,))
            conn.execute("DELETE FROM chronicle.blob_chunks WHERE owner = %s", (user_id,))
            try:  # (the erasure itself is done: a vacuum that fails is reported, not the erasure)
                conn.execute("VACUUM chronicle.idempotency")
                conn.execute("VACUUM chronicle.blob_chunks")
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{KEY_TABLE_LOCK_WAIT * 1000:.0f}ms",))
                try:
                    conn.execute("VACUUM (FULL) chronicle.data_keys")
                except psycopg.errors.LockNotAvailable:
                    log.warning("the key table was busy; vacuumed in place instead of rewritten")
                    conn.execute("SELECT set_config('lock_timeout', '0', false)")
                    conn.execute("VACUUM chronicle.data_keys")
            except psycopg.Error as error:
                log.error("vacuum after an erasure failed: dead row versions remain until the next one",
                          extra={"error_type": type(error).__name__})
