"""Read-your-writes on a streaming replica: a query waits until the replica has replayed its position."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg

from adapters.read_side.positions import ProjectionPositions
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import Reachability

# The event log itself, as a position a wait can name: the highest notification id the
# replica has replayed. (Not a projection's name: those never hold a dot.)
EVENT_LOG = "chronicle.events"
FIRST_LOOK = 0.002  # seconds before the replica is read again while someone waits
LOOK_AT_MOST_EVERY = 0.010  # seconds: the slowest it is read while someone still waits

POSITIONS_AND_LOG = (
    "SELECT name, position FROM chronicle.projections WHERE name = ANY(%s)"
    " UNION ALL SELECT %s, coalesce(max(notification_id), 0) FROM chronicle.events"
)


class ReplayedPositions(ProjectionPositions):
    """Positions as a replica has replayed them, read on the replica itself.

    A projection commits its rows and its tracking row together on the primary; the
    replica shows both once it has replayed that commit, so a tracking row read there says
    what the replica's read models include. The primary's notifications say nothing about
    that (and a standby cannot LISTEN), so while a request waits the replica's tracking rows
    are read again and again: at once, then after 2 ms, doubling up to every 10 ms, and not
    at all while nobody waits. A query that reads no read model (the audit stream, digests:
    the event log itself) waits for the replica's highest notification id instead.
    """

    name = "replayed-positions"

    def __init__(
        self, replica: PostgresTarget, names: list[str], reachability: Reachability | None = None,
        log: PostgresTarget | None = None,
    ):
        super().__init__(replica, names, reachability=reachability, log=log)  # (log: the primary's)
        self.positions[EVENT_LOG] = 0

    async def wait_for(self, names: list[str], position: int | None, timeout: float) -> None:
        # On the primary a committed event is there to read; here only once it is replayed.
        # (A read model at a position implies the events up to it: replayed before it.)
        await super().wait_for(names or [EVENT_LOG], position, timeout)

    async def _poll(self, conn: psycopg.AsyncConnection) -> None:
        cur = await conn.execute(POSITIONS_AND_LOG, (self.names, EVENT_LOG))
        await self._record(await cur.fetchall())

    async def _follow(self, conn: psycopg.AsyncConnection) -> None:
        # What another connection saw may have been another server's (a name that moved to
        # a replica further behind): known positions are learnt again on this one.
        self.positions = dict.fromkeys(self.positions, 0)
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            self.listening, self.listens = True, self.listens + 1
            await self._poll(conn)
            wait = FIRST_LOOK
            while self._waiting:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wanted.wait(), wait)
                if self._wanted.is_set():  # a new waiter, likely for a newer position: look now
                    self._wanted.clear()
                    wait = FIRST_LOOK
                else:
                    wait = min(wait * 2, LOOK_AT_MOST_EVERY)
                await self._poll(conn)
            self.listening = False
