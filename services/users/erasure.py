"""Erasing a user by crypto-shredding: record the erasure, then destroy the user's key.

The order matters: the `DataSubject.Erased` event commits first (every read model drops
the user's rows when it applies it), then the key is destroyed, so a crash in between
leaves a retry that finishes the job rather than unreadable content the read models
still show. The user's stored command replies (which may quote titles) and preview blobs
are deleted too, and the tables they and the key leave dead row versions in are vacuumed
(the read models are vacuumed by the projection engine once it applied the erasure); the
events stay, with ids, timestamps, types and hash chains intact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import psycopg
from chronicle_contract.errors import ChronicleError
from chronicle_contract.users import EraseUser, UserErasure

from adapters.store.keys import KeyRing
from services.runtime.command_bus import CommandBus
from services.runtime.replies import Wire

log = logging.getLogger(__name__)
ADMIN = "admin"
KEY_TABLE_LOCK_WAIT = 2.0  # seconds an erasure waits to rewrite the key table


# What else holds a user's content for a while and must let it go: (user id) -> done.
Forget = Callable[[str], Awaitable[None]]


class Erasure:
    """`user.erase` over NATS: only a caller with the admin role may erase a user."""

    def __init__(self, bus: CommandBus, keys: KeyRing, forget: Sequence[Forget] = ()):
        self.bus = bus
        self.keys = keys
        self.forget = forget

    async def erase(self, caller: str, request: EraseUser, _: str | None) -> Wire[UserErasure]:
        if ADMIN not in getattr(caller, "roles", ()):
            raise ChronicleError("unauthorized", "erasing a user needs the admin role")
        reply = await erase_user(self.bus, self.keys, request.user_id, str(caller))
        for forget in self.forget:  # e.g. preview parts uploaded and never claimed
            await forget(request.user_id)
        return reply


async def erase_user(bus: CommandBus, keys: KeyRing, user_id: str, requested_by: str) -> Wire[UserErasure]:
    reply = await bus.execute(EraseUser(user_id=user_id), requested_by)
    await asyncio.to_thread(keys.destroy, user_id)
    await asyncio.to_thread(forget_derived_data, keys, user_id)
    log.info("user erased", extra={"newly": reply["erased"]})  # no user id: it may be personal data
    return reply


def forget_derived_data(keys: KeyRing, user_id: str) -> None:
    """What is kept beside the events for the user: replies to their commands, previews;
    then the dead row versions they and the destroyed key leave in the tables' pages.

    The key table is rewritten whole (VACUUM FULL): its old row version held the key itself,
    and a plain vacuum frees the row but may leave its bytes in the page's free space. The
    table is small (a row per user) and the rewrite takes moments, during which appends
    wait; if it cannot have its lock within KEY_TABLE_LOCK_WAIT, a plain vacuum does.
    """
    with keys.target.connect(autocommit=True) as conn:
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
