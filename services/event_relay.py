"""EventRelay: publishes messages derived from committed events to JetStream, at least once.

A relay reads the event log after its tracked position (only the topics it relays), waits
for NOTIFY on the signals channel when it has caught up, publishes each event's messages
with a `Nats-Msg-Id` that JetStream de-duplicates, and then stores the new position. A
crash in between publishes again rather than losing a message; nothing is ever published
before its event committed.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from nats.js import JetStreamContext

from adapters.event_store import SIGNALS_CHANNEL
from projections.engine import NEXT_EVENTS, PROGRESS_CHANNEL, SET_TRACKING_AND_NOTIFY
from services.background import Background

log = logging.getLogger(__name__)

BATCH = 100


class EventRelay(Background):
    """Subclasses set `name` (the tracking row) and `topics`, and implement `relay`."""

    topics: list[str]

    def __init__(self, url: str, js: JetStreamContext, prefix: str):
        super().__init__()
        self.url = url
        self.js = js
        self.prefix = prefix

    async def relay(
        self, conn: psycopg.AsyncConnection, position: int, originator_id: object, version: int, topic: str, state: bytes
    ) -> None:
        """Publish what the event at this log position becomes."""
        raise NotImplementedError

    async def start(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO chronicle.projections (name, position, version) VALUES (%s, 0, 1)"
                " ON CONFLICT (name) DO NOTHING",
                (self.name,),
            )
        await super().start()

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                async with (
                    await psycopg.AsyncConnection.connect(self.url, autocommit=True) as listener,
                    await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn,
                ):
                    await listener.execute(f"LISTEN {SIGNALS_CHANNEL}")
                    while True:
                        while await self.relay_batch(conn) == BATCH:
                            pass
                        backoff = 0.1
                        async for _ in listener.notifies(timeout=1.0, stop_after=1):
                            pass
            except asyncio.CancelledError:
                raise
            except Exception as error:  # Postgres or NATS away: retry, the position was not moved
                log.warning("relay interrupted; retrying", extra={"relay": self.name, "error_type": type(error).__name__})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def relay_batch(self, conn: psycopg.AsyncConnection) -> int:
        # The projection engine's two statements: batch input (tracking row locked, no
        # fsync wait: losing this commit only means publishing again, de-duplicated) and
        # the tracking update.
        async with conn.transaction():
            cur = await conn.execute(
                NEXT_EVENTS, {"name": self.name, "up_to": None, "topics": self.topics, "limit": BATCH}, prepare=True
            )
            found = await cur.fetchall()
            position, head = found[0][0], found[0][1]
            if head <= position:
                return 0
            events = [row[2:] for row in found if row[2] is not None]
            for notification_id, originator_id, version, topic, state in events:
                await self.relay(conn, notification_id, originator_id, version, topic, bytes(state))
            new_position = events[-1][0] if len(events) == BATCH else head
            await conn.execute(
                SET_TRACKING_AND_NOTIFY,
                {"position": new_position, "version": 1, "name": self.name, "channel": PROGRESS_CHANNEL},
                prepare=True,
            )
            return len(events)
