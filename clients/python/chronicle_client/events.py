"""The client's event feed side: `client.events.follow`, every committed event in log order."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors
from chronicle_contract.bus import DURABLE_NAME, DURABLES_CLAIM, LIVE_CONSUMERS, feed_consumer
from chronicle_contract.errors import ChronicleError
from chronicle_contract.events import POSITION_HEADER, FeedEvent, events_stream, feed_filter
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from chronicle_client.transport import token_claims

if TYPE_CHECKING:
    from chronicle_client.transport import Transport

log = logging.getLogger(__name__)

# Deliveries of one feed message to a consumer: a follower that fails on an event again and
# again (and hands it back each time) gets past it in the end, with a log line, never loops.
MAX_DELIVER = 100


def feed_event_of(message: Msg) -> FeedEvent | None:
    """The event a feed message carries, or None: not one the service published (its
    position header and its body's position agree on every message the feed sends)."""
    try:
        event = FeedEvent.model_validate_json(message.data)
    except ValidationError:
        return None
    header = (message.headers or {}).get(POSITION_HEADER)
    return event if header == str(event.position) else None


class Events:
    """`client.events`; the token needs the `feed` role (clients/python/chronicle_contract/bus.py)."""

    def __init__(self, client: Transport):
        self._client = client
        self.refused = 0  # messages terminated as not the feed's

    async def follow(
        self,
        from_position: int = 0,
        *,
        filter: str | None = None,
        durable: str | None = None,
        batch: int = 100,
        idle: float = 5.0,
    ) -> AsyncGenerator[FeedEvent, None]:
        """The events after `from_position` (0: the whole history), oldest first, then each
        new one as it commits; `filter` narrows them by "<aggregate>.<event>", wildcards
        allowed ("conversation.*", "job.completed"). With `durable`, the feed remembers
        where this follower got to under that name: a later follow with the same name goes
        on after the last event it took (`from_position` and `filter` then come from the
        first). A durable's name must be one the token lists in its `durables` claim (a feed
        token reaches its own consumers only); a token follows at most LIVE_CONSUMERS (4)
        times at once without one. An event counts as taken when the loop asks for the next
        one, so a follower that dies while handling one is given it again, never one after it."""
        js = self._client.nc.jetstream()
        stream = events_stream(self._client.prefix)
        subject = feed_filter(self._client.prefix, filter)
        user = self._client.user or ""
        if durable is not None:
            self._check_durable(durable)
        start = await self._sequence_after(from_position)
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.EXPLICIT,
            max_ack_pending=max(batch, 1000),
            max_deliver=MAX_DELIVER,
            inactive_threshold=None if durable else 60.0,
        )
        if durable is not None:
            name = feed_consumer(user, durable)
            subscription = await js.pull_subscribe(subject, durable=name, stream=stream, config=config)
        else:
            name = await self._live_consumer(js, stream, user, subject, config)
            subscription = await js.pull_subscribe_bind(stream=stream, name=name)
        last = from_position
        untaken: list[Msg] = []  # fetched, not yet taken: handed back at once when the follower stops
        try:
            while True:
                try:
                    untaken = await subscription.fetch(batch, timeout=idle)
                except TimeoutError:  # (nats-py raises its own, and at times asyncio's: both are this)
                    continue
                while untaken:
                    event = feed_event_of(untaken[0])
                    if event is None:  # whoever put it there, no retry makes it the feed's
                        self.refused += 1
                        log.warning("feed message refused: not the service's", extra={"stream": stream})
                        await untaken.pop(0).term()
                        continue
                    if event.position > last:  # (a message given again after a lost ack)
                        yield event
                        last = event.position
                    await untaken.pop(0).ack()
        finally:
            with contextlib.suppress(nats.errors.Error):  # (the connection may be closed already)
                for message in untaken:
                    await message.nak()
                await subscription.unsubscribe()
                if durable is None:  # (its slot is free at once, not after the inactivity threshold)
                    await js.delete_consumer(stream, name)

    def _check_durable(self, durable: str) -> None:
        named = token_claims(self._client.token).get(DURABLES_CLAIM) or []
        if not DURABLE_NAME.fullmatch(durable) or durable not in named:
            message = f"durable {durable!r} is not one the token names in its {DURABLES_CLAIM!r} claim"
            raise ChronicleError("invalid", message, [{"field": "durable", "rule": "named_by_token", "message": message}])

    async def _live_consumer(
        self, js: JetStreamContext, stream: str, user: str, subject: str, config: ConsumerConfig
    ) -> str:
        """A consumer for a follow without a durable, in the first free one of the user's
        slots. Each is made with a description of its own, so a slot in use is refused as
        taken rather than shared (the server hands back an existing consumer made alike)."""
        for live in range(LIVE_CONSUMERS):
            name = feed_consumer(user, None, live)
            wanted = config.evolve(name=name, filter_subject=subject, description=uuid.uuid4().hex)
            try:
                await js.add_consumer(stream, config=wanted)
            except nats.js.errors.BadRequestError:  # (the slot is taken)
                continue
            return name
        message = f"at most {LIVE_CONSUMERS} follows without a durable run at once"
        raise ChronicleError("conflict", message)

    async def _sequence_after(self, position: int) -> int:
        """The stream sequence of the first event after `position` (when there is none yet,
        the sequence the next one published gets). Sequences and positions rise together,
        so a binary search over the stream finds it."""
        js = self._client.nc.jetstream()
        stream = events_stream(self._client.prefix)
        state = (await js.stream_info(stream)).state
        low, high = max(state.first_seq, 1), state.last_seq
        found = high + 1
        while low <= high:
            middle = (low + high) // 2
            try:  # the first message at or after `middle` (one may have been removed)
                message = await js.get_msg(stream, seq=middle, subject=feed_filter(self._client.prefix, None), next=True)
            except NotFoundError:
                high = middle - 1
                continue
            at, sequence = int((message.headers or {}).get(POSITION_HEADER, 0)), message.seq or middle
            if at > position:
                found, high = sequence, middle - 1
            else:
                low = sequence + 1
        return found
