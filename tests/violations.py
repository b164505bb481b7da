"""A raw NATS connection as a user (or an attacker holding a user's token) has it, and the
permission violations the server reports to it asynchronously."""

from __future__ import annotations

import asyncio

import nats
from chronicle_contract.bus import inbox_prefix
from nats.aio.client import Client as NATS


class Violations:
    """A raw connection's asynchronous errors: the server's permission violations."""

    def __init__(self) -> None:
        self.errors: asyncio.Queue[str] = asyncio.Queue()

    async def record(self, error: Exception) -> None:
        await self.errors.put(str(error))

    async def next(self) -> str:
        return await asyncio.wait_for(self.errors.get(), timeout=10)


async def watched(nats_url: str, token: str, user: str, violations: Violations) -> NATS:
    """A connection with `user`'s token and inbox, its violations recorded in `violations`."""
    return await nats.connect(
        nats_url, token=token, inbox_prefix=inbox_prefix(user), error_cb=violations.record,
        allow_reconnect=False, max_reconnect_attempts=0,
    )
