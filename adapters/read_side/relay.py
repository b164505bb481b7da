"""EventRelay: publishes what a capability makes of its committed events (services/ports/relays.py), at least once.

Two paths publish the same messages under the same `Nats-Msg-Id`, which JetStream
de-duplicates:
- the fast path: the command bus hands each commit's events to `committed` right after
  the commit, and they are published at once, before the commands' replies go out;
- the relay: it reads the event log after its tracked position (only the topics it
  relays), waits for NOTIFY on its own channel when it has caught up, publishes each
  event's messages that the fast path has not, and then stores the new position. A crash
  in between publishes again rather than losing a message. An event that fails to publish
  ATTEMPTS times for a reason of its own (too large a message, say), not the servers', is
  parked (chronicle.parked, shown by `projections status`) and the relay goes on.
Nothing is ever published before its event committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import nats.errors
import nats.js.errors
import psycopg
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from adapters.read_side.follower import BATCH, LogFollower
from adapters.read_side.parking import ATTEMPTS, PARK, failure_kind
from adapters.read_side.tracking import NEXT_EVENTS, PROGRESS_CHANNEL, SET_TRACKING_AND_NOTIFY
from adapters.store.keys import KeyRing
from adapters.store.mapper import ErasedContent
from services.ports.relays import Committed, Relay

log = logging.getLogger(__name__)

# Failures of the servers, not of an event: never a reason to park one.
TRANSIENT: tuple[type[BaseException], ...] = (
    TimeoutError, psycopg.OperationalError, psycopg.InterfaceError,
    nats.errors.ConnectionClosedError, nats.errors.NoServersError, nats.errors.TimeoutError,
    nats.errors.StaleConnectionError, nats.errors.OutboundBufferLimitError, nats.errors.ConnectionReconnectingError,
    nats.errors.FlushTimeoutError, nats.errors.ConnectionDrainingError,
    nats.js.errors.ServiceUnavailableError, nats.js.errors.NoStreamResponseError,
)
def relay_channel(relay: type[Relay]) -> str:
    """What a statement saving one of the relay's events notifies (EventStore's relay_channels)."""
    return f"chronicle_{relay.name}"


def relay_channels(relays: Sequence[type[Relay]]) -> dict[str, list[str]]:
    return {relay_channel(relay): [get_topic(event_class) for event_class in relay.relayed] for relay in relays}


class EventRelay(LogFollower):
    """Publishes what a capability's Relay makes of its committed events: on the fast path
    and as the backstop."""

    def __init__(self, url: str | Callable[[], str], relay: Relay, keys: KeyRing | None = None):
        super().__init__(url, relay.name, relay_channel(type(relay)), keys)
        self.relay = relay
        self.relayed = relay.relayed
        # Whether each event class met so far is relayed: asked per event of every commit on
        # the writer thread, where isinstance against pydantic classes runs their metaclass's
        # Python check (~0.3–0.6 µs an event), a dictionary look-up not.
        self._relays_type: dict[type, bool] = {}
        self.topics = relay_channels([type(relay)])[self.channel]
        self.loop: asyncio.AbstractEventLoop | None = None
        self._published: set[int] = set()  # positions the fast path has published
        self._publishing: dict[int, asyncio.Task[None]] = {}  # positions it is publishing
        self._fast_conn: psycopg.AsyncConnection | None = None
        self._connecting = asyncio.Lock()
        self._fast_tasks: set[asyncio.Task[None]] = set()
        self._failures: dict[int, int] = {}  # position -> failed tries of an event (see _parked)

    async def _publish(self, conn: psycopg.AsyncConnection, position: int, event: Any) -> None:
        await self.relay.publish(position, event, await self.owner_of(conn, event.originator_id))

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        await super().start()

    async def stop(self) -> None:
        self.loop = None
        for task in list(self._fast_tasks):
            task.cancel()
        await asyncio.gather(*self._fast_tasks, return_exceptions=True)
        await super().stop()
        if self._fast_conn is not None:
            await self._fast_conn.close()

    # --- the fast path --------------------------------------------------------------------

    def committed(self, events: Committed) -> None:
        """The command bus's writer thread, right after a commit: (position, event, owner)."""
        loop = self.loop
        wanted = [committed for committed in events if self._is_relayed(type(committed[1]))]
        if loop is not None and wanted:
            loop.call_soon_threadsafe(self._spawn, wanted)

    def _is_relayed(self, event_class: type) -> bool:
        relayed = self._relays_type.get(event_class)
        if relayed is None:
            relayed = self._relays_type[event_class] = issubclass(event_class, self.relayed)
        return relayed

    def _spawn(self, events: Committed) -> None:
        if self.loop is None:
            return  # stopping: the relay publishes them on the next start
        task = asyncio.create_task(self._publish_committed(events))
        self._fast_tasks.add(task)
        for position, _, _ in events:
            self._publishing[position] = task

        def done(task: asyncio.Task[None]) -> None:
            self._fast_tasks.discard(task)
            for position, _, _ in events:
                self._publishing.pop(position, None)

        task.add_done_callback(done)

    async def _publish_committed(self, events: Committed) -> None:
        try:
            for position, event, owner in events:
                if owner is None:  # (the system's aggregate; a user's owner comes from the bus, not a query)
                    owner = await self.owner_of(await self._connection(), event.originator_id)
                await self.relay.publish(position, event, owner)
                self._published.add(position)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # NATS or Postgres away: the relay publishes them later
            log.info("fast publish failed; the relay will", extra={"relay": self.name, "error_type": type(error).__name__})

    async def _connection(self) -> psycopg.AsyncConnection:
        """The fast path's own connection (psycopg queues concurrent use of it)."""
        async with self._connecting:
            if self._fast_conn is None or self._fast_conn.closed:
                self._fast_conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            return self._fast_conn

    # --- the relay ------------------------------------------------------------------------

    async def relay_batch(self, conn: psycopg.AsyncConnection) -> int:
        # The projection engine's two statements: batch input (tracking row locked, no
        # fsync wait: losing this commit only means publishing again, de-duplicated) and
        # the tracking update.
        async with conn.transaction():
            cur = await conn.execute(
                NEXT_EVENTS, {"name": self.name, "up_to": None, "topics": self.topics, "limit": BATCH}, prepare=True,
                binary=True,
            )
            found = await cur.fetchall()
            position, head = found[0][0], found[0][1]
            if head <= position:
                return 0
            events = [row[2:] for row in found if row[2] is not None]
            for notification_id, originator_id, version, topic, state in events:
                publishing = self._publishing.get(notification_id)
                if publishing is not None:  # let the fast path finish: then publish only what it could not
                    await asyncio.wait([publishing])
                if notification_id in self._published:
                    continue
                try:
                    event = self.mapper.to_domain_event(StoredEvent(originator_id, version, topic, bytes(state)))
                    await self._publish(conn, notification_id, event)
                except ErasedContent:
                    continue  # its owner was erased: it signals nothing more
                except TRANSIENT:
                    raise  # the servers, not the event: the batch is tried again
                except Exception as error:  # this event: after ATTEMPTS tries, set aside
                    if not await self._parked(conn, notification_id, topic, error):
                        raise
            new_position = events[-1][0] if len(events) == BATCH else head
            await conn.execute(
                SET_TRACKING_AND_NOTIFY,
                {"position": new_position, "version": 1, "name": self.name, "channel": PROGRESS_CHANNEL},
                prepare=True,
            )
            # Positions at or below the tracked one are never read again (here, or by
            # another instance's relay that moved the position past them).
            self._published = {p for p in self._published if p > new_position}
            self._failures = {p: n for p, n in self._failures.items() if p > new_position}
            return len(events)

    async def _parked(self, conn: psycopg.AsyncConnection, position: int, topic: str, error: Exception) -> bool:
        """Count a failure of this event; at ATTEMPTS, park it (in the batch's transaction)
        and say so: the relay goes on without it rather than stop every later signal."""
        failures = self._failures.pop(position, 0) + 1
        if failures < ATTEMPTS:
            self._failures[position] = failures
            return False
        await conn.execute(PARK, (self.name, position, topic, failure_kind(error)))
        log.error("event parked: the relay cannot publish it",
                  extra={"relay": self.name, "position": position, "topic": topic, "error_type": failure_kind(error)})
        return True
