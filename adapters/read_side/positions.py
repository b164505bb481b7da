"""Read-your-writes on the primary: a query waits until the read models include a given log position."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg
from chronicle_contract.errors import ChronicleError
from psycopg.sql import SQL, Identifier

from adapters.read_side.tracking import PROGRESS_CHANNEL
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import CONNECT_TIMEOUT, RECONNECT_WAIT_MAX, Reachability, answers_off_loop
from services.ports.background import Background
from services.ports.positions import Positions

log = logging.getLogger(__name__)


def read_positions(payload: str) -> list[tuple[str, int]]:
    """A PROGRESS_CHANNEL notification's "name:position[,name:position...]"."""
    return [(name, int(position)) for name, _, position in (item.rpartition(":") for item in payload.split(","))]


RECHECK_AWAY = 0.25  # seconds a waiter waits before asking again whether Postgres is back
LOG_HEAD = "SELECT coalesce(max(notification_id), 0) FROM chronicle.events"
QUIET_BEFORE_PROBE = 1.0  # seconds of a wait without the position before Postgres is probed (again)


class ProjectionPositions(Background, Positions):
    """Tracks each projection's committed position from NOTIFY, with a polling fallback,
    while some request waits for one, and for `linger` seconds after. With nobody waiting
    (a load of writes alone: trials recorded, HITL signals) it does not listen, since
    every projection batch would wake the service for nothing (measured at 600 trials/s:
    11% of the service's interpreter time, and a Postgres backend woken per batch)."""

    name = "projection-positions"

    def __init__(
        self, target: PostgresTarget, names: list[str], poll_interval: float = 1.0, linger: float = 10.0,
        reachability: Reachability | None = None, log: PostgresTarget | None = None,
    ):
        super().__init__()
        self.target = target
        # The primary whose event log bounds every position a reply ever gave: a wait for one
        # beyond its head is refused (conflict) instead of timing out (unavailable).
        self.log = log
        self.head = 0  # the log's highest notification id, as last read
        self.reachability = reachability  # asked when the listener lost Postgres: is it away for good?
        self.names = names
        self.poll_interval = poll_interval
        self.linger = linger
        self.positions: dict[str, int] = dict.fromkeys(names, 0)  # as last heard: never ahead of the truth
        self._changed = asyncio.Condition()
        self._wanted = asyncio.Event()  # someone waits, or did within `linger`
        self._waiting = 0
        self._last_wait = 0.0
        self.listening = False  # whether moves are being heard now (tests and operators look)
        self.connected = False  # whether its connection to Postgres works (as last seen)
        self.listens = 0  # how many times it started listening

    async def wait_for(self, names: list[str], position: int | None, timeout: float) -> None:
        if position is None or self._reached(names, position):
            return
        loop = asyncio.get_running_loop()
        self._waiting += 1
        self._wanted.set()
        deadline = loop.time() + timeout
        ask_after = loop.time() + QUIET_BEFORE_PROBE
        try:
            # One timeout at a time (no nested asyncio.timeout): each wait is bounded by what
            # is left of the caller's, and the deadline is checked on every turn.
            async with self._changed:
                while not self._reached(names, position):
                    left = deadline - loop.time()
                    if left <= 0:
                        raise TimeoutError
                    if (not self.connected or loop.time() >= ask_after) and not await answers_off_loop(self.reachability):
                        # The listener lost Postgres and Postgres refuses connections, or
                        # nothing moved for a while and Postgres answers no probe (a frozen
                        # server keeps the listener's connection looking alive): no position
                        # moves until it is back, so the caller hears so now.
                        raise ChronicleError("unavailable", "the database is unreachable; retry shortly")
                    ask_after = loop.time() + QUIET_BEFORE_PROBE
                    # (Lost but answering: the listener is about to reconnect; ask again soon.)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._changed.wait(), min(left, QUIET_BEFORE_PROBE if self.connected else RECHECK_AWAY)
                        )
        except TimeoutError:
            await self._check_committed(position)  # (out of the lock: a position never committed is a conflict)
            raise ChronicleError(
                "unavailable",
                f"read models have not reached position {position} yet; retry later",
                [{"field": "min_position", "rule": "reached", "message": "not reached in time"}],
            ) from None
        finally:
            self._waiting -= 1
            self._last_wait = loop.time()

    async def _check_committed(self, position: int) -> None:
        """Refuse a position the log never reached: no reply gave it, so no wait would end.
        Asked only of a wait that ran out, so a read-your-writes wait costs no query and a
        wait parked on a far position holds as long as before; the answer says which it was."""
        if self.log is None or position <= self.head:
            return
        try:
            async with await psycopg.AsyncConnection.connect(
                self.log.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            ) as conn:
                cur = await conn.execute(LOG_HEAD)
                row = await cur.fetchone()
        except psycopg.Error:
            return  # (unknown: the wait goes on, and times out as before)
        self.head = max(self.head, int(row[0]) if row else 0)
        if position > self.head:
            message = f"beyond the store's last committed position ({self.head})"
            # `conflict`, not `invalid`: the number is well formed (any bigint is), the store's
            # state is what it is ahead of; and not `unavailable`: no retry will reach it.
            raise ChronicleError("conflict", f"min_position is {message}",
                                 [{"field": "min_position", "rule": "committed", "message": message}])

    async def _connected(self, connected: bool) -> None:
        if connected != self.connected:
            self.connected = connected
            async with self._changed:
                self._changed.notify_all()  # waiters learn that Postgres went away (or came back)

    def _reached(self, names: list[str], position: int) -> bool:
        return all(self.positions.get(n, 0) >= position for n in names)

    async def _record(self, moved: list[tuple[str, int]]) -> None:
        changed = False
        for name, position in moved:
            if name in self.positions and position > self.positions[name]:
                self.positions[name], changed = position, True
        if changed:
            async with self._changed:
                self._changed.notify_all()

    async def _poll(self, conn: psycopg.AsyncConnection) -> None:
        cur = await conn.execute("SELECT name, position FROM chronicle.projections WHERE name = ANY(%s)", (self.names,))
        await self._record(await cur.fetchall())

    def _still_wanted(self) -> bool:
        if self._waiting or asyncio.get_running_loop().time() - self._last_wait < self.linger:
            return True
        self._wanted.clear()  # (no await since the check: a new waiter sets it again)
        return False

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.target.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
                ) as conn:
                    backoff = 0.1
                    await self._connected(True)
                    await self._follow(conn)
            except psycopg.Error as error:
                self.listening = False
                await self._connected(False)
                log.warning("positions listener lost; reconnecting", extra={"error_type": type(error).__name__})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_WAIT_MAX)  # back within moments of the server

    async def _follow(self, conn: psycopg.AsyncConnection) -> None:
        """Hears the positions move on `conn` while they are wanted, until it fails."""
        while True:
            await self._wanted.wait()
            # Listening first, then reading: no move is missed between the two.
            await conn.execute(SQL("LISTEN {}").format(Identifier(PROGRESS_CHANNEL)))
            self.listening, self.listens = True, self.listens + 1
            await self._poll(conn)
            while self._still_wanted():
                async for notify in conn.notifies(timeout=self.poll_interval):
                    await self._record(read_positions(notify.payload))
                await self._poll(conn)
            await conn.execute(SQL("UNLISTEN {}").format(Identifier(PROGRESS_CHANNEL)))
            self.listening = False
