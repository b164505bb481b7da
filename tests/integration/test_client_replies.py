"""The client's own request/reply over a real NATS: one subscription per connection, a
future per request, one timer for their deadlines (clients/python/chronicle_client/transport.py
Replies)."""

from __future__ import annotations

import asyncio
import gc
import uuid
import weakref

import nats
import nats.errors
import pytest
from chronicle_client.transport import Transport, replies_of
from chronicle_contract.frames import header_line, header_section, publish_nowait
from nats.aio.msg import Msg

from tests.servers import TestServers


async def test_concurrent_requests_each_get_their_own_reply_and_leave_nothing_waiting(servers: TestServers) -> None:
    subject = f"replies-{uuid.uuid4().hex}"
    nc = await nats.connect(servers.nats_url)

    answering: set[asyncio.Task[None]] = set()

    async def later(msg: Msg) -> None:
        await asyncio.sleep(0.001 * (7 - int(msg.data) % 7))
        await msg.respond(msg.data)

    async def echo(msg: Msg) -> None:  # answered out of order: later ones first
        task = asyncio.create_task(later(msg))
        answering.add(task)
        task.add_done_callback(answering.discard)

    await nc.subscribe(subject, cb=echo)
    try:
        replies = replies_of(nc)
        answers = await asyncio.gather(*(
            replies.request(nc, subject, str(n).encode(), timeout=5, headers=header_section()) for n in range(200)
        ))
        assert [a.data for a in answers] == [str(n).encode() for n in range(200)]
        assert replies.waiting == {}
        assert replies_of(nc) is replies  # one subscription for the connection's requests
    finally:
        await nc.close()


async def test_nobody_serving_and_nobody_answering_fail_as_nats_says(servers: TestServers) -> None:
    nc = await nats.connect(servers.nats_url)
    silent = f"silent-{uuid.uuid4().hex}"
    async def ignore(msg: Msg) -> None:  # takes requests, answers none
        pass

    await nc.subscribe(silent, cb=ignore)
    try:
        replies = replies_of(nc)
        with pytest.raises(nats.errors.NoRespondersError):
            await replies.request(nc, f"nobody-{uuid.uuid4().hex}", b"{}", timeout=5, headers=header_section())
        with pytest.raises(nats.errors.TimeoutError):
            await replies.request(nc, silent, b"{}", timeout=0.2, headers=header_section())
        assert replies.waiting == {}
    finally:
        await nc.close()


async def test_a_short_timeout_fails_on_its_own_time_while_longer_ones_wait(servers: TestServers) -> None:
    nc = await nats.connect(servers.nats_url)
    silent = f"silent-{uuid.uuid4().hex}"

    async def ignore(msg: Msg) -> None:
        pass

    await nc.subscribe(silent, cb=ignore)
    try:
        replies = replies_of(nc)
        patient = asyncio.create_task(replies.request(nc, silent, b"1", timeout=60, headers=header_section()))
        await asyncio.sleep(0)  # (its deadline set first: the timer is for it)
        for _ in range(2):  # the shorter deadline moves the timer; the second comes after the first expired
            with pytest.raises(nats.errors.TimeoutError):
                await asyncio.wait_for(
                    replies.request(nc, silent, b"2", timeout=0.1, headers=header_section()), timeout=10
                )
        assert not patient.done()  # (still waiting for its own deadline)
        assert list(replies.waiting) == list(replies._deadlines)
        assert len(replies.waiting) == 1
        patient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await patient
        assert replies.waiting == {} and replies._deadlines == {}
    finally:
        await nc.close()


async def test_a_message_published_from_a_plain_callback_is_flushed_to_the_server(servers: TestServers) -> None:
    subject = f"nowait-{uuid.uuid4().hex}"
    nc = await nats.connect(servers.nats_url)
    try:
        sub = await nc.subscribe(subject)
        await nc.flush()
        done = asyncio.get_running_loop().create_future()
        section = header_section(header_line("Request-Id", "r-9"))
        # (from a callback, as the service answers a command: nothing awaits the publish)
        done.add_done_callback(lambda _: publish_nowait(nc, subject, b"answered", section))
        done.set_result(None)
        msg = await sub.next_msg(timeout=10)
        assert (msg.data, msg.headers) == (b"answered", {"Request-Id": "r-9"})
    finally:
        await nc.close()


async def test_a_transport_answers_through_its_connections_replies_which_go_with_the_connection(
    servers: TestServers,
) -> None:
    prefix = f"replies-{uuid.uuid4().hex}"
    nc = await nats.connect(servers.nats_url)
    asked_on: list[str] = []

    async def answer(msg: Msg) -> None:
        asked_on.append(msg.reply)
        await msg.respond(b'{"ok": true, "data": {"n": 1}}')

    await nc.subscribe(f"{prefix}.query.x", cb=answer)
    transport = Transport(nc, "a-token", prefix=prefix)
    assert await transport.request("query.x", {}) == {"n": 1}
    assert asked_on[0].startswith(replies_of(nc).base + ".")  # (the connection's own replies, not nats-py's)
    connection = weakref.ref(nc)
    await nc.close()
    del transport, nc
    gc.collect()
    assert connection() is None  # (its replies keep no hold on it: they are keyed weakly, by it)
