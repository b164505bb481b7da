"""Erasing a user by crypto-shredding: record the erasure, then destroy the user's key.

The order matters: the `DataSubject.Erased` event commits first (every read model drops
the user's rows when it applies it), then the key is destroyed, so a crash in between
leaves a retry that finishes the job rather than unreadable content the read models
still show. What is stored for the user beside the events (services/ports/user_data.py:
command replies, preview blobs) is deleted too (the read models are vacuumed by the
projection engine once it applied the erasure); the events stay, with ids, timestamps,
types and hash chains intact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from chronicle_contract.errors import ChronicleError
from chronicle_contract.users import EraseUser, UserErasure

from services.ports.keys import KeyRing
from services.ports.user_data import UserData
from services.runtime.command_bus import CommandBus
from services.runtime.replies import Wire

log = logging.getLogger(__name__)
ADMIN = "admin"


# What else holds a user's content for a while and must let it go: (user id) -> done.
Forget = Callable[[str], Awaitable[None]]


class Erasure:
    """`user.erase` over NATS: only a caller with the admin role may erase a user."""

    def __init__(self, bus: CommandBus, keys: KeyRing, user_data: UserData, forget: Sequence[Forget] = ()) -> None:
        self.bus = bus
        self.keys = keys
        self.user_data = user_data
        self.forget = forget

    async def erase(self, caller: str, request: EraseUser, _: str | None) -> Wire[UserErasure]:
        if ADMIN not in getattr(caller, "roles", ()):
            raise ChronicleError("unauthorized", "erasing a user needs the admin role")
        reply = await erase_user(self.bus, self.keys, self.user_data, request.user_id, str(caller))
        for forget in self.forget:  # e.g. preview parts uploaded and never claimed
            await forget(request.user_id)
        return reply


async def erase_user(
    bus: CommandBus, keys: KeyRing, user_data: UserData, user_id: str, requested_by: str
) -> Wire[UserErasure]:
    reply = await bus.execute(EraseUser(user_id=user_id), requested_by)
    await asyncio.to_thread(keys.destroy, user_id)
    await asyncio.to_thread(user_data.forget, user_id)
    log.info("user erased", extra={"newly": reply["erased"]})  # no user id: it may be personal data
    return reply
