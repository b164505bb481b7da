"""EventFeed: every committed event published once, in log order, to the event feed's stream
(clients/python/chronicle_contract/events.py).

It is a log follower like the relays (adapters/read_side/relay.py), without a fast path: each batch is read after the tracked position with the
tracking row locked (so one instance of the fleet publishes at a time, in order), published
in that order, and the position moves in the same transaction. Each message's id is its
position, which JetStream de-duplicates; and after a (re)connection the feed first asks the
stream which position it holds last, so even a republish after a crash longer ago than the
de-duplication window adds no second copy. The stored envelope is published as it is
(content still sealed): nothing is unsealed, so an erased owner's events need nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from uuid import UUID

import orjson
import psycopg
from chronicle_contract.events import POSITION_HEADER, event_subject, events_stream, feed_names
from eventsourcing.utils import resolve_topic
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from adapters.messaging.jetstream import ensure_stream
from adapters.read_side.follower import LogFollower
from adapters.read_side.tracking import NEXT_EVENTS
from adapters.store.event_store import EVENTS_CHANNEL
from adapters.store.mapper import OWNER_FIELD, SEALED_FIELD
from domain.base import event_type_name

log = logging.getLogger(__name__)

Outgoing = tuple[str, bytes, str]  # (subject, message, its de-duplication id: the event's position)

FEED_BATCH = 500
DUPLICATE_WINDOW = 600.0  # seconds JetStream remembers a message id
SET_TRACKING = "UPDATE chronicle.projections SET position = %(position)s, updated_at = now() WHERE name = %(name)s"
ACK_TIMEOUT = 10.0  # seconds for a batch's acknowledgements; past it the batch is published again
EXPECTED_STREAM = "Nats-Expected-Stream"  # a message the stream would not capture is refused, not stored elsewhere
ENVELOPE_ROOM = 4096  # bytes kept free below max_payload for the headers and the message's own framing


async def ensure_feed_stream(js: JetStreamContext, prefix: str, max_age: float, replicas: int = 1) -> None:
    await ensure_stream(
        js, events_stream(prefix), [f"{prefix}.events.>"], max_age=max_age, replicas=replicas,
        duplicate_window=DUPLICATE_WINDOW,
    )


def feed_position(prefix: str) -> str:
    """The name of the feed's tracked position for a subject prefix."""
    return f"{EventFeed.name}:{prefix}"


class EventFeed(LogFollower):
    name = "event_feed"
    backstop_delay = 0.01  # followers wait on it: gather a moment's commits, no more
    batch_size = FEED_BATCH

    def __init__(self, url: str | Callable[[], str], nc: NATS, js: JetStreamContext, prefix: str):
        # Woken by every commit (EVENTS_CHANNEL); a stream per prefix, so a position per prefix.
        super().__init__(url, feed_position(prefix), EVENTS_CHANNEL)
        self.nc = nc
        self.js = js
        self.prefix = prefix
        self.stream = events_stream(prefix)
        self.published_up_to = 0  # the last position the stream is known to hold
        self.stream_sequence: int | None = None  # the stream's last sequence, when known (publish)
        self.resent = 0  # batches sent again with an acknowledgement per message
        self._names: dict[str, tuple[str, str, str, str]] = {}  # names_of, by topic (a few dozen topics)

    async def resume(self, conn: psycopg.AsyncConnection) -> None:
        info = await self.js.stream_info(self.stream)
        last = self.stream_sequence = info.state.last_seq
        if not last:  # a new stream (or one an operator removed): it gets the whole log again
            await conn.execute(SET_TRACKING, {"position": 0, "name": self.name})
            self.published_up_to = 0
            return
        try:
            message = await self.js.get_msg(self.stream, seq=last)
        except NotFoundError:  # its last message expired: the tracked position says enough
            return
        self.published_up_to = max(self.published_up_to, int((message.headers or {}).get(POSITION_HEADER, 0)))

    async def relay_batch(self, conn: psycopg.AsyncConnection) -> int:
        async with conn.transaction():
            cur = await conn.execute(
                NEXT_EVENTS, {"name": self.name, "up_to": None, "topics": None, "limit": FEED_BATCH}, prepare=True
            )
            found = await cur.fetchall()
            position, head = found[0][0], found[0][1]
            if head <= position:
                return 0
            events = [row[2:] for row in found if row[2] is not None]
            outgoing: list[Outgoing] = []
            for notification_id, originator_id, version, topic, state in events:
                if notification_id <= self.published_up_to:
                    continue  # published before a crash, its position not yet tracked
                subject, message = await self.message(conn, notification_id, originator_id, version, topic, bytes(state))
                outgoing.append((subject, message, str(notification_id)))
            if outgoing:
                await self.publish(outgoing)
            if events:
                self.published_up_to = max(self.published_up_to, events[-1][0])
            new_position = events[-1][0] if len(events) == FEED_BATCH else head
            # (no NOTIFY: read-your-writes waits on read models, never on the feed)
            await conn.execute(SET_TRACKING, {"position": new_position, "name": self.name}, prepare=True)
            return len(events)

    async def publish(self, outgoing: list[Outgoing]) -> None:
        """Publish a batch in order; return once the stream holds each of its messages once.

        An acknowledgement per message costs the service a future, a reply to parse and
        the server a reply to send, for each event. Instead every message but the last goes
        out without asking for one, and the last one's acknowledgement says the stream's
        sequence: the stream numbers its messages one by one, and on one connection they
        arrive in order, so a sequence that moved by exactly the batch's length since the
        previous batch means each was stored, once. Anything else (another instance
        published meanwhile, a message already held, one lost across a reconnect) sends the
        batch again with an acknowledgement each, which the de-duplication id makes safe."""
        if self.stream_sequence is None:
            self.stream_sequence = (await self.js.stream_info(self.stream)).state.last_seq
        expected = self.stream_sequence + len(outgoing)
        self.stream_sequence = None  # (unknown until this batch is known stored)
        *first, last = outgoing
        for subject, message, message_id in first:
            await self.nc.publish(subject, message, headers=self.headers(message_id))
        subject, message, message_id = last
        ack = await self.js.publish(subject, message, timeout=ACK_TIMEOUT, headers=self.headers(message_id))
        if ack.seq == expected and not ack.duplicate:
            self.stream_sequence = ack.seq
            return
        self.resent += 1
        acks = [await self.js.publish_async(subject, message, headers=self.headers(message_id))
                for subject, message, message_id in outgoing]
        # The position moves only once every one of them is acknowledged.
        await asyncio.wait_for(asyncio.gather(*acks), ACK_TIMEOUT)

    def headers(self, message_id: str) -> dict[str, str]:
        return {"Nats-Msg-Id": message_id, POSITION_HEADER: message_id, EXPECTED_STREAM: self.stream}

    async def message(
        self, conn: psycopg.AsyncConnection, position: int, originator_id: UUID, version: int, topic: str, state: bytes
    ) -> tuple[str, bytes]:
        """The subject and feed event (clients/python/chronicle_contract/events.py FeedEvent) of one stored event."""
        stored = self.mapper.stored_json(state)
        sealed = stored.pop(SEALED_FIELD, None)
        owner = stored.pop(OWNER_FIELD, None) or stored.get("owner") or await self.owner_of(conn, originator_id)
        event_type, aggregate, event, subject = self.names_of(topic)
        feed_event = {
            "position": position, "aggregate_id": originator_id, "aggregate": aggregate, "event": event,
            "type": event_type, "version": version, "timestamp": stored.pop("timestamp"), "owner": owner,
            "data": stored, "sealed": sealed,
        }
        message = orjson.dumps(feed_event)
        if len(message) > self.nc.max_payload - ENVELOPE_ROOM:  # one large event must not wedge the feed
            feed_event.update(sealed=None, truncated=True, data={k: v for k, v in stored.items() if k.endswith("_id")})
            message = orjson.dumps(feed_event)
            log.info("feed event too large for one message; sent without content", extra={"position": position})
        return subject, message

    def names_of(self, topic: str) -> tuple[str, str, str, str]:
        """(event type, aggregate, event, subject) of a stored topic, worked out once per topic."""
        names = self._names.get(topic)
        if names is None:
            event_type = event_type_name(resolve_topic(topic), topic.partition(":")[2])
            names = self._names[topic] = (event_type, *feed_names(event_type), event_subject(self.prefix, event_type))
        return names
