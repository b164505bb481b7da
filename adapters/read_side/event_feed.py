"""EventFeed: every committed event published once, in log order, to the event feed's stream
(clients/python/chronicle_contract/events.py).

It is a log follower like the relays (adapters/read_side/relay.py), without a fast path:
each batch is read after the tracked position with the tracking row locked (so one instance
of the fleet publishes at a time, in order), published in that order, and the position moves
in the same transaction. Each message names the stream sequence it must follow, so the
stream holds the log's events without a hole and none twice (a message after one it did not
take is refused too); after a (re)connection, or a batch it took only part of, the feed asks
the stream which position it holds last and goes on after it. The stored envelope is
published as it is (content still sealed): nothing is unsealed, so an erased owner's events
need nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

import orjson
import psycopg
from chronicle_contract import frames
from chronicle_contract.events import POSITION_HEADER, event_subject, events_stream, feed_names
from eventsourcing.utils import resolve_topic
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from adapters.messaging.jetstream import ensure_stream
from adapters.read_side.follower import LogFollower
from adapters.read_side.tracking import NEXT_EVENTS
from adapters.store.event_store import EVENTS_CHANNEL
from adapters.store.mapper import OWNER_FIELD, SEALED_FIELD
from domain.base import event_type_name

log = logging.getLogger(__name__)

Outgoing = tuple[str, bytes, int]  # (subject, message, the event's position)

FEED_BATCH = 500
SET_TRACKING = "UPDATE chronicle.projections SET position = %(position)s, updated_at = now() WHERE name = %(name)s"
ACK_TIMEOUT = 10.0  # seconds for a batch's acknowledgement; past it the feed reconnects, then reads the stream's end
EXPECTED_STREAM = "Nats-Expected-Stream"  # a message the stream would not capture is refused, not stored elsewhere
EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"  # a message is stored only right after the one before it
ENVELOPE_ROOM = 4096  # bytes kept free below max_payload for the headers and the message's own framing


async def ensure_feed_stream(js: JetStreamContext, prefix: str, max_age: float, replicas: int = 1) -> None:
    await ensure_stream(js, events_stream(prefix), [f"{prefix}.events.>"], max_age=max_age, replicas=replicas)


class FeedRefused(Exception):
    """The stream would not take a batch's events: the feed retries, its position unmoved."""


def feed_position(prefix: str) -> str:
    """The name of the feed's tracked position for a subject prefix."""
    return f"{EventFeed.name}:{prefix}"


class EventFeed(LogFollower):
    name = "event_feed"
    backstop_delay = 0.01  # followers wait on it: gather a moment's commits, no more
    batch_size = FEED_BATCH

    def __init__(
        self, url: str | Callable[[], str], nc: NATS, js: JetStreamContext, prefix: str, batch_interval: float = 0.0
    ):
        """`batch_interval`: seconds from one batch's start to the next under a steady load
        (settings.feed_batch_interval): each batch's fixed cost (a transaction, its
        statements, an acknowledgement) is then shared by more events."""
        # Woken by every commit (EVENTS_CHANNEL); a stream per prefix, so a position per prefix.
        super().__init__(url, feed_position(prefix), EVENTS_CHANNEL)
        self.batch_interval = batch_interval
        self.nc = nc
        self.js = js
        self.prefix = prefix
        self.stream = events_stream(prefix)
        self._expected_stream = frames.header_line(EXPECTED_STREAM, self.stream)
        self.published_up_to = 0  # the last position the stream is known to hold
        self.stream_sequence: int | None = None  # the stream's last sequence, when known (publish)
        self.tracked: int | None = None  # the position this instance last tracked
        self.resent = 0  # batches the stream took only part of (the rest sent again after its end)
        self._names: dict[str, tuple[str, str, str, str]] = {}  # names_of, by topic (a few dozen topics)

    async def resume(self, conn: psycopg.AsyncConnection) -> None:
        if not await self.learn_stream_end():  # a new stream (or one an operator removed): it gets the whole log again
            await conn.execute(SET_TRACKING, {"position": 0, "name": self.name})
            self.published_up_to = 0

    async def learn_stream_end(self) -> int:
        """Read the stream's last sequence and the position its last message holds (the
        stream holds every event up to it: it never takes one after a hole); that sequence."""
        last = self.stream_sequence = (await self.js.stream_info(self.stream)).state.last_seq
        if last:
            try:
                message = await self.js.get_msg(self.stream, seq=last)
            except NotFoundError:  # its last message expired: the tracked position says enough
                return last
            self.published_up_to = max(self.published_up_to, int((message.headers or {}).get(POSITION_HEADER, 0)))
        return last

    async def relay_batch(self, conn: psycopg.AsyncConnection) -> int:
        async with conn.transaction():
            cur = await conn.execute(
                NEXT_EVENTS, {"name": self.name, "up_to": None, "topics": None, "limit": FEED_BATCH}, prepare=True,
                binary=True,
            )
            found = await cur.fetchall()
            position, head = found[0][0], found[0][1]
            if position != self.tracked:  # (another instance published since, or none is known yet)
                self.stream_sequence = None
            if head <= position:
                return 0
            events = [row[2:] for row in found if row[2] is not None]
            outgoing: list[Outgoing] = []
            for notification_id, originator_id, version, topic, state in events:
                if notification_id <= self.published_up_to:
                    continue  # published before a crash, its position not yet tracked
                subject, message = await self.message(conn, notification_id, originator_id, version, topic, bytes(state))
                outgoing.append((subject, message, notification_id))
            if outgoing and not await self.publish(outgoing):
                # The stream holds a part of the batch (none after a hole): the rest goes again.
                await self.learn_stream_end()
                rest = [item for item in outgoing if item[2] > self.published_up_to]
                if rest and not await self.publish(rest):
                    raise FeedRefused(f"the stream took only part of a batch twice (after position {self.published_up_to})")
            if events:
                self.published_up_to = max(self.published_up_to, events[-1][0])
            new_position = events[-1][0] if len(events) == FEED_BATCH else head
            # (no NOTIFY: read-your-writes waits on read models, never on the feed)
            await conn.execute(SET_TRACKING, {"position": new_position, "name": self.name}, prepare=True)
            self.tracked = new_position
            return len(events)

    async def publish(self, outgoing: list[Outgoing]) -> bool:
        """Publish a batch in order; whether the stream now holds each of its messages, once.

        Each message names the sequence the stream must have reached before it
        (Nats-Expected-Last-Sequence), counted from the stream's last sequence as this
        instance knows it, so the stream stores it only right after the one before it:
        never a message twice, never one after a hole. (A sequence this instance knew
        before another one published could fit a later message by chance: relay_batch asks
        the stream again whenever the tracked position is not the one it left.)

        An acknowledgement per message would cost the service a future, a reply to parse
        and the server a reply to send, for each event; instead every message but the last
        goes out without asking for one, and the last one's acknowledgement says the whole
        batch is held. Anything else (a message refused or lost across a reconnection,
        another instance published meanwhile) leaves the stream holding the messages before
        the first one it did not take: False."""
        if self.stream_sequence is None:
            await self.learn_stream_end()
        before = self.stream_sequence or 0
        self.stream_sequence = None  # (unknown until this batch is known stored)
        *first, last = outgoing
        for offset, (subject, message, position) in enumerate(first):
            await self.send(subject, message, self.headers(position, before + offset))
        subject, message, position = last
        try:
            ack = await self.js.publish(
                subject, message, timeout=ACK_TIMEOUT, headers=frames.headers_of(self.headers(position, before + len(first)))
            )
        except APIError:  # (wrong last sequence: a message before it was not stored)
            ack = None
        if ack is None or ack.seq != before + len(outgoing):
            self.resent += 1
            return False
        self.stream_sequence = ack.seq
        return True

    async def send(self, subject: str, message: bytes, headers: bytes) -> None:
        """One message of a batch, without asking for an acknowledgement."""
        await frames.publish(self.nc, subject, message, headers)

    def headers(self, position: int, after_sequence: int) -> bytes:
        """A feed message's header section (chronicle_contract.frames: the stream's line
        framed once). No Nats-Msg-Id: a message the stream holds is refused again by its sequence."""
        return frames.header_section(
            frames.header_line(POSITION_HEADER, str(position)),
            self._expected_stream,
            frames.header_line(EXPECTED_LAST_SEQUENCE, str(after_sequence)),
        )

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
