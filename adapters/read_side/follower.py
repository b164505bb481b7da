"""LogFollower: follows the event log after a tracked position, waking on NOTIFY (the base of the relays and the event feed)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from uuid import UUID

import psycopg
from psycopg.sql import SQL, Identifier

from adapters.read_side.tracking import ADD_TRACKING
from adapters.store.keys import KeyRing
from adapters.store.mapper import OWNER_FIELD, PydanticMapper
from adapters.store.reachability import RECONNECT_WAIT_MAX
from services.ports.background import Background

log = logging.getLogger(__name__)

BATCH = 100
OWNERS_KEPT = 10_000  # aggregates whose owner a relay remembers
# The relay is the backstop: it lets the fast path publish a commit's events first, and
# then takes what gathered meanwhile in one batch.
BACKSTOP_DELAY = 0.25  # seconds


def next_turn_delay(now: float, last_turn: float, backstop_delay: float, batch_interval: float) -> float:
    """Seconds a follower woken at `now` waits before its next turn: `backstop_delay`, so a
    moment's commits come together, and no less than it takes to put `batch_interval`
    between the start of its last turn (`last_turn`) and the next."""
    return max(backstop_delay, last_turn + batch_interval - now)


class LogFollower(Background):
    """Follows the event log after its tracked position (the row named `name`), waking on
    NOTIFY on `channel`: each turn `relay_batch` takes the next batch, until it comes back
    short. Subclasses implement `relay_batch`, and `resume` when a (re)connection has
    something to learn first."""

    backstop_delay = BACKSTOP_DELAY
    batch_interval = 0.0  # seconds from one turn's start to the next, at least (see next_turn_delay)
    batch_size = BATCH

    def __init__(self, url: str | Callable[[], str], name: str, channel: str, keys: KeyRing | None = None):
        """`url`: the database's, or what tells it once the server is up (asked as it connects)."""
        super().__init__()
        self._url = url
        self.name = name
        self.channel = channel
        self.mapper = PydanticMapper(keys=keys)
        self._owners: OrderedDict[UUID, str] = OrderedDict()  # aggregate id -> owner (owner_of)

    @property
    def url(self) -> str:
        return self._url if isinstance(self._url, str) else self._url()

    async def owner_of(self, conn: psycopg.AsyncConnection, aggregate_id: UUID) -> str:
        """Whose the aggregate is: its first event says (in the clear, kept after erasure)."""
        owner = self._owners.get(aggregate_id)
        if owner is None:
            cur = await conn.execute(
                "SELECT state FROM chronicle.events WHERE originator_id = %s AND originator_version = 1",
                (aggregate_id,),
                prepare=True,
            )
            row = await cur.fetchone()
            if row is None:
                raise LookupError(f"{aggregate_id} has no first event")
            stored = self.mapper.stored_json(bytes(row[0]))
            owner = str(stored.get(OWNER_FIELD) or stored["owner"])
            self._owners[aggregate_id] = owner
            while len(self._owners) > OWNERS_KEPT:
                self._owners.popitem(last=False)
        return owner

    async def start(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute(ADD_TRACKING, (self.name, 1))
        await super().start()

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                async with (
                    await psycopg.AsyncConnection.connect(self.url, autocommit=True) as listener,
                    await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn,
                ):
                    await listener.execute(SQL("LISTEN {}").format(Identifier(self.channel)))
                    await self.resume(conn)
                    loop = asyncio.get_running_loop()
                    while True:
                        turn = loop.time()
                        while await self.relay_batch(conn) == self.batch_size:
                            pass
                        backoff = 0.1
                        async for _ in listener.notifies(timeout=1.0, stop_after=1):
                            pass
                        await asyncio.sleep(next_turn_delay(loop.time(), turn, self.backstop_delay, self.batch_interval))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # Postgres or NATS away: retry, the position was not moved
                log.warning("relay interrupted; retrying", extra={"relay": self.name, "error_type": type(error).__name__})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_WAIT_MAX)  # back within moments of the server

    async def resume(self, conn: psycopg.AsyncConnection) -> None:
        """Before relaying again after a (re)connection (default: nothing to learn first)."""

    async def relay_batch(self, conn: psycopg.AsyncConnection) -> int:
        """Relay the next batch and move the tracked position past it; the events taken."""
        raise NotImplementedError
