"""The event feed: every committed event once, in log order, on JetStream, followed by
`client.events.follow` from any position, by filter, and resumed by a durable name."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient
from chronicle_contract import frames
from chronicle_contract.events import POSITION_HEADER, FeedEvent, events_stream

from adapters.auth import TokenAuthority
from adapters.read_side.event_feed import EventFeed
from entrypoints.bootstrap import Chronicle
from tests.conftest import JWT_SECRET, fresh_chronicle
from tests.servers import TestServers

DURABLE = f"loader-{uuid.uuid4().hex[:8]}"  # the durable the follower's token names


async def log_positions(chronicle: Chronicle) -> list[int]:
    def read() -> list[int]:
        with chronicle.target.connect() as conn:
            return [row[0] for row in conn.execute("SELECT notification_id FROM chronicle.events ORDER BY 1")]

    return await asyncio.to_thread(read)


async def take(events: AsyncIterator[FeedEvent], count: int, timeout: float = 20) -> list[FeedEvent]:
    async def taken() -> list[FeedEvent]:
        return [await anext(events) for _ in range(count)]

    return await asyncio.wait_for(taken(), timeout)


@pytest.fixture
async def own(instance: tuple[Chronicle, str]) -> AsyncIterator[tuple[Chronicle, ChronicleClient, ChronicleClient]]:
    """A Chronicle on a fresh database (its feed in a child process), a user's client and a
    feed follower's."""
    async with clients_of(instance[0]) as own:
        yield own


@pytest.fixture
async def own_in_loop(
    servers: TestServers, tmp_path: Path,
) -> AsyncIterator[tuple[Chronicle, ChronicleClient, ChronicleClient]]:
    """The same with the feed on the service's own event loop (CHRONICLE_FEED_PROCESS=false),
    where a test can reach into it."""
    async with fresh_chronicle(servers, tmp_path, servers.nats_url, feed_process=False) as (chronicle, _):
        async with clients_of(chronicle) as own:
            yield own


@contextlib.asynccontextmanager
async def clients_of(chronicle: Chronicle) -> AsyncIterator[tuple[Chronicle, ChronicleClient, ChronicleClient]]:
    """A user's client and a feed follower's, on `chronicle`."""
    authority = TokenAuthority(secret=JWT_SECRET)
    prefix = chronicle.settings.subject_prefix
    user = await ChronicleClient.connect(chronicle.nats_url, authority.issue(f"u-{uuid.uuid4().hex[:8]}"), prefix=prefix)
    feed_token = authority.issue("warehouse-loader", claims={"roles": ["feed"], "durables": [DURABLE]})
    follower = await ChronicleClient.connect(chronicle.nats_url, feed_token, prefix=prefix)
    try:
        yield chronicle, user, follower
    finally:
        await user.close()
        await follower.close()


async def test_a_follower_from_zero_sees_the_whole_history_once_and_in_order(
    own: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    chronicle, user, follower = own
    started = await user.conversations.start(title="feed", tags=["f"])
    for n in range(5):
        await user.conversations.add_message(started.conversation_id, "user", f"message {n}")
    logged = await log_positions(chronicle)

    events = follower.events.follow(0)
    seen = await take(events, len(logged))
    assert [e.position for e in seen] == logged  # every event, once, in the log's order
    mine = [e for e in seen if e.aggregate_id == started.conversation_id]
    assert [(e.aggregate, e.event, e.version) for e in mine] == [("conversation", "started", 1)] + [
        ("conversation", "message_added", v) for v in range(2, 7)
    ]
    assert {e.owner for e in mine} == {user.user} and all(e.type.startswith("Conversation.") for e in mine)
    assert all(e.sealed and "message " not in str(e.data) for e in mine[1:])  # the content stays sealed
    assert set(mine[1].data) == {"message_id"}

    # Then each new event as it commits.
    await user.conversations.add_message(started.conversation_id, "agent", "and one more")
    (new,) = await take(events, 1)
    assert (new.event, new.version, new.position) == ("message_added", 7, (await log_positions(chronicle))[-1])
    await events.aclose()


async def test_a_follower_starts_after_a_position_and_filters_by_subject(
    own: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    chronicle, user, follower = own
    started = await user.conversations.start(title="filters")
    middle = (await user.conversations.add_message(started.conversation_id, "user", "first")).position
    assert middle is not None
    await user.sessions.create("a session between")
    await user.conversations.add_message(started.conversation_id, "user", "second")
    await user.conversations.add_message(started.conversation_id, "user", "third")

    after = follower.events.follow(middle, filter="conversation.message_added")
    seen = await take(after, 2)
    assert [e.version for e in seen] == [3, 4] and all(e.position > middle for e in seen)
    await after.aclose()


async def test_events_a_mixin_records_are_fed_under_their_aggregate(
    own: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    # HITL's and optimizations' events are classes beside their aggregates, not nested in
    # them: they are still the conversation's and the session's events on the feed.
    _, user, follower = own
    started = await user.conversations.start(title="paused on the feed")
    await user.hitl.pause(started.conversation_id, step="review", prompt="approve?", run_id="feed-run")
    await user.hitl.resume("feed-run", approved=True)
    begun_reply = await user.optimizations.start(name="feed", optimizer="evo")

    hitl = follower.events.follow(0, filter="conversation.*")
    seen = await take(hitl, 4)
    await hitl.aclose()
    assert [(e.aggregate, e.event, e.type) for e in seen[2:]] == [
        ("conversation", "hitl_paused", "Conversation.HitlPaused"),
        ("conversation", "hitl_resumed", "Conversation.HitlResumed"),
    ]
    assert all(e.aggregate_id == started.conversation_id and e.owner == user.user for e in seen[2:])
    begun = follower.events.follow(0, filter="session.optimization_started")
    (event,) = await take(begun, 1)
    await begun.aclose()
    assert (event.aggregate_id, event.type) == (begun_reply.optimization_id, "Session.OptimizationStarted")


async def test_a_durable_follower_goes_on_where_it_stopped(own: tuple[Chronicle, ChronicleClient, ChronicleClient]) -> None:
    chronicle, user, follower = own
    started = await user.conversations.start(title="durable")
    for n in range(4):
        await user.conversations.add_message(started.conversation_id, "user", f"m{n}")
    logged = await log_positions(chronicle)
    name = DURABLE

    first = follower.events.follow(0, durable=name)
    taken = await take(first, 3)
    await first.aclose()  # stopped after taking three: the third counts as taken only once asked past it
    again = follower.events.follow(0, durable=name)
    rest = await take(again, len(logged) - 2)
    await again.aclose()
    assert [e.position for e in taken[:2] + rest] == logged
    assert rest[0].position == taken[2].position, "the one it was handling when it stopped comes again"


async def test_events_another_instance_published_before_it_died_are_held_once(
    own_in_loop: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    """Another instance published the first of the next events and died before it moved the
    tracked position: this one's next batch starts at the same event, on a stream further on
    than it knows. The stream still holds each event once, in the log's order."""
    chronicle, user, follower = own_in_loop
    feed = next(piece for wiring in chronicle.capabilities for piece in wiring.running if isinstance(piece, EventFeed))
    started = await user.conversations.start(title="the other instance died")
    stream = events_stream(chronicle.settings.subject_prefix)

    async def idle() -> int:  # everything published, and the feed knows the stream's last sequence
        while True:
            last = (await chronicle.core.js.stream_info(stream)).state.last_seq
            if feed.stream_sequence == last and feed.published_up_to == (await log_positions(chronicle))[-1]:
                return last
            await asyncio.sleep(0.02)

    last = await asyncio.wait_for(idle(), 20)
    await feed.stop()  # (driven by hand below)
    for n in range(3):
        await user.conversations.add_message(started.conversation_id, "user", f"m{n}")
    logged = await log_positions(chronicle)
    other = EventFeed(feed.url, feed.nc, feed.js, chronicle.settings.subject_prefix)
    async with await psycopg.AsyncConnection.connect(feed.url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM chronicle.events WHERE notification_id = %s",
            (logged[-3],),
        )
        originator_id, version, topic, state = await cur.fetchone()  # type: ignore[misc]
        subject, message = await other.message(conn, logged[-3], originator_id, version, topic, bytes(state))
        await chronicle.core.js.publish(subject, message, headers=frames.headers_of(other.headers(logged[-3], last)))
        assert feed.stream_sequence == last  # (what this instance still believes)
        await feed.relay_batch(conn)

    events = follower.events.follow(0)
    seen = await take(events, len(logged))
    await events.aclose()
    assert [e.position for e in seen] == logged  # every event, once, in the log's order
    assert (await chronicle.core.js.stream_info(stream)).state.messages == len(logged)


async def test_a_batch_after_another_instance_took_its_turn_leaves_no_hole(
    own_in_loop: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    """Another instance published a batch and moved the tracked position: the stream is
    further on than this instance knows, so it asks the stream before it numbers its next
    batch (counted from what it knew, the batch's second message would fit the stream's
    end, and the first would be lost)."""
    chronicle, user, follower = own_in_loop
    feed = next(piece for wiring in chronicle.capabilities for piece in wiring.running if isinstance(piece, EventFeed))
    started = await user.conversations.start(title="turns")
    await feed.stop()  # (driven by hand below)
    other = EventFeed(feed.url, feed.nc, feed.js, chronicle.settings.subject_prefix)
    async with await psycopg.AsyncConnection.connect(feed.url, autocommit=True) as conn:
        await feed.relay_batch(conn)  # (the conversation's start: the stream's end as it knows it)
        await user.conversations.add_message(started.conversation_id, "user", "the other's")
        await other.relay_batch(conn)
        for n in range(3):
            await user.conversations.add_message(started.conversation_id, "user", f"m{n}")
        await feed.relay_batch(conn)
    logged = await log_positions(chronicle)

    events = follower.events.follow(0)
    seen = await take(events, len(logged))
    await events.aclose()
    assert [e.position for e in seen] == logged  # every event, once, in the log's order


async def test_a_message_the_stream_did_not_take_leaves_no_hole(
    own_in_loop: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    """A message of a batch the stream never took (here: lost on its way, as one can be to a
    node's failure): the stream takes none after it either, so the feed sends it and the
    rest again, and a follower still sees every event once, in the log's order. (Before,
    the stream took the rest, and the one sent again came after them: followers, which
    go by rising positions, never saw it.)"""
    chronicle, user, follower = own_in_loop
    feed = next(piece for wiring in chronicle.capabilities for piece in wiring.running if isinstance(piece, EventFeed))
    started = await user.conversations.start(title="a hole")
    await feed.stop()  # (driven by hand below: one batch holds the three messages)
    for n in range(3):
        await user.conversations.add_message(started.conversation_id, "user", f"m{n}")
    logged = await log_positions(chronicle)
    lost_once: list[int] = []
    send = feed.send

    async def lost_on_its_way(subject: str, message: bytes, headers: bytes) -> None:
        position = int(frames.headers_of(headers).get(POSITION_HEADER, 0))
        if position == logged[-2] and not lost_once:
            lost_once.append(position)
            return
        await send(subject, message, headers)

    feed.send = lost_on_its_way  # type: ignore[method-assign]
    try:
        async with await psycopg.AsyncConnection.connect(feed.url, autocommit=True) as conn:
            await feed.relay_batch(conn)
    finally:
        feed.send = send  # type: ignore[method-assign]

    events = follower.events.follow(0)
    seen = await take(events, len(logged))
    await events.aclose()
    assert lost_once and feed.resent == 1
    assert [e.position for e in seen] == logged  # every event, once, in the log's order
    stream = events_stream(chronicle.settings.subject_prefix)
    assert (await chronicle.core.js.stream_info(stream)).state.messages == len(logged)


async def test_a_killed_feed_process_is_replaced_and_the_follower_sees_each_event_once(
    own: tuple[Chronicle, ChronicleClient, ChronicleClient],
) -> None:
    """The feed's child process killed while events are written: its supervisor starts
    another, which goes on from the tracked position (and the stream's last message), so a
    follower from zero sees the log once, in order."""
    chronicle, user, follower = own
    feed = chronicle.feed
    assert feed is not None and await asyncio.to_thread(feed.process.wait_prepared, 60)
    assert feed.process.process is not None and feed.process.process.pid is not None
    first = feed.process.process.pid
    started = await user.conversations.start(title="the feed's process killed")
    writing = [user.conversations.add_message(started.conversation_id, "user", f"message {n}") for n in range(40)]
    os.kill(first, signal.SIGKILL)
    await asyncio.gather(*writing)
    for n in range(5):  # and after it is gone
        await user.conversations.add_message(started.conversation_id, "user", f"after {n}")
    logged = await log_positions(chronicle)
    events = follower.events.follow(0)
    seen = await take(events, len(logged), timeout=60)
    await events.aclose()
    assert [e.position for e in seen] == logged  # every event once, in the log's order
    assert feed.process.restarts >= 1 and feed.process.process.pid != first
