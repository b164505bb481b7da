"""Red team, the smaller holes at the edges: what a second connection, a forged or bent
token, or a cursor read and edited by its holder could do, tried as an attacker would on a
bus that requires credentials (the embedded default) and on the service's request path."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator

import nats
import nats.errors
import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_contract.bus import inbox_prefix
from chronicle_contract.conversations import ListConversations
from chronicle_contract.events import events_stream
from nats.aio.client import Client as NATS

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle, bootstrap
from services.conversations.queries import list_conversations
from tests.conftest import JWT_SECRET, ClientFactory, make_settings
from tests.servers import TestServers

AUTHORITY = TokenAuthority(secret=JWT_SECRET)


@pytest.fixture(scope="module")
async def closed(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    """A Chronicle whose embedded NATS requires credentials, on a database of its own."""
    with servers.fresh_database() as url:
        settings = make_settings(url, None, tmp_path_factory.mktemp("red-team"), embedded_nats_auth=True)  # type: ignore[arg-type]
        chronicle = await bootstrap(settings)
        yield chronicle
        await chronicle.stop()


async def raw(chronicle: Chronicle, token: str, user: str) -> NATS:
    return await nats.connect(
        chronicle.nats_url, token=token, inbox_prefix=inbox_prefix(user), allow_reconnect=False, max_reconnect_attempts=0,
    )


async def client_of(chronicle: Chronicle, token: str) -> ChronicleClient:
    return await ChronicleClient.connect(chronicle.nats_url, token, prefix=chronicle.settings.subject_prefix)


# -- a feed token manages only its own consumers ---------------------------------------------


async def consumer_names(chronicle: Chronicle) -> set[str]:
    """The event feed stream's consumers, as the service sees them."""
    service = await nats.connect(chronicle.servers.service_nats_url)
    try:
        infos = await service.jetstream().consumers_info(events_stream(chronicle.settings.subject_prefix))
        return {info.name for info in infos}
    finally:
        await service.close()


async def test_a_feed_token_cannot_reach_another_followers_durable(closed: Chronicle) -> None:
    stream = events_stream(closed.settings.subject_prefix)
    durable = f"warehouse-{uuid.uuid4().hex[:6]}"
    alice = await client_of(closed, AUTHORITY.issue(f"alice-{uuid.uuid4().hex[:6]}"))
    loader = await client_of(closed, AUTHORITY.issue("loader-a", claims={"roles": ["feed"], "durables": [durable]}))
    # Another follower, whose token names the same durable: its own, not loader-a's.
    rival_token = AUTHORITY.issue("loader-b", claims={"roles": ["feed"], "durables": [durable]})
    rival = await raw(closed, rival_token, "loader-b")
    before = await consumer_names(closed)
    try:
        written = await alice.conversations.start(title="followed")
        assert written.position is not None
        events = loader.events.follow(written.position - 1, durable=durable)
        assert (await asyncio.wait_for(anext(events), 20)).aggregate_id == written.conversation_id
        await events.aclose()
        (loaders,) = await consumer_names(closed) - before  # the durable loader-a keeps
        js = rival.jetstream(timeout=1)
        for reach in (js.delete_consumer(stream, loaders), js.consumer_info(stream, loaders)):
            with pytest.raises(nats.errors.Error):  # (a permissions violation: no answer comes)
                await reach
        with pytest.raises(nats.errors.Error):
            await rival.request(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{loaders}", b'{"batch": 1}', timeout=1)
        assert loaders in await consumer_names(closed), "loader-a's durable is still there"
        again = loader.events.follow(0, durable=durable)  # and goes on where it stopped (the one it held)
        assert (await asyncio.wait_for(anext(again), 20)).position == written.position
        await again.aclose()
    finally:
        await alice.close()
        await loader.close()
        await rival.close()


async def test_a_durable_its_token_does_not_name_is_refused_before_the_bus(closed: Chronicle) -> None:
    loader = await client_of(closed, AUTHORITY.issue("loader-c", claims={"roles": ["feed"], "durables": ["mine"]}))
    try:
        with pytest.raises(ChronicleError) as refused:
            await anext(loader.events.follow(0, durable="someone-elses"))
        assert refused.value.code == "invalid" and refused.value.fields == ["durable"]
    finally:
        await loader.close()


# -- a token is taken exactly as issued, with an expiry a clock can reach ---------------------


def variants(token: str) -> list[str]:
    return [token + "=", token + " ", " " + token, token + "\n", token.replace(".", "=.", 1)]


async def test_a_bent_token_neither_connects_nor_is_heard(closed: Chronicle) -> None:
    user = f"alice-{uuid.uuid4().hex[:6]}"
    token = AUTHORITY.issue(user)
    alice = await client_of(closed, token)
    try:
        assert (await alice.conversations.list()).total == 0  # the token as issued works
        for bent in variants(token):
            with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                await raw(closed, bent, user)
            if bent.strip() == token.strip() and not bent.startswith(" "):
                continue  # (a header's value loses trailing whitespace on the way: the service sees the token)
            alice.token = bent  # on alice's own connection, in the request's header
            with pytest.raises(ChronicleError) as refused:
                await alice.conversations.list()
            assert refused.value.code == "unauthorized", repr(bent)
    finally:
        await alice.close()


@pytest.mark.parametrize("expires", [1e300, 10**30, -5, 0, "2000000000", True], ids=repr)
async def test_an_unusable_expiry_is_refused_at_once(closed: Chronicle, expires: object) -> None:
    user = f"alice-{uuid.uuid4().hex[:6]}"
    bad = AUTHORITY.issue(user, claims={"exp": expires})
    started = time.monotonic()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await raw(closed, bad, user)
    assert time.monotonic() - started < 1.0, "refused by the callout's answer, not by the server's 2 s timeout"
    alice = await client_of(closed, AUTHORITY.issue(user))
    alice.token = bad
    try:
        with pytest.raises(ChronicleError) as refused:
            await alice.conversations.list()
        assert refused.value.code == "unauthorized"
    finally:
        await alice.close()


# -- cursors are sealed ----------------------------------------------------------------------


def readable(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def main_style(*values: object) -> str:
    """A cursor as the service used to give them: base64 of its JSON, readable and editable."""
    return base64.urlsafe_b64encode(orjson.dumps(list(values))).decode().rstrip("=")


async def test_a_cursor_tells_its_holder_nothing_and_cannot_be_forged_or_lent(connect: ClientFactory) -> None:
    alice, bob = await connect(), await connect()
    secret = f"tulip-budget-{uuid.uuid4().hex[:8]}"
    for title in (secret + "-a", secret + "-b", secret + "-c"):
        await alice.conversations.start(title=title)
    page = await alice.conversations.list(limit=1, sort_by="title", order="asc")
    cursor = page.next_cursor
    assert cursor is not None and page.items[0].title == secret + "-a"
    assert secret.encode() not in readable(cursor) and b"tulip" not in readable(cursor).lower()
    second = await alice.conversations.list(limit=1, sort_by="title", order="asc", cursor=cursor)
    assert [c.title for c in second.items] == [secret + "-b"]

    flipped = cursor[:30] + ("A" if cursor[30] != "A" else "B") + cursor[31:]
    forged = main_style("conversations:title:asc", secret + "-b", str(page.items[0].id))
    attempts = [
        bob.conversations.list(limit=1, sort_by="title", order="asc", cursor=cursor),  # alice's, on bob's connection
        alice.conversations.list(limit=1, sort_by="title", order="asc", cursor=flipped),
        alice.conversations.list(limit=1, sort_by="title", order="asc", cursor=forged),
        alice.conversations.list(limit=1, sort_by="title", order="desc", cursor=cursor),  # another order's
    ]
    for attempt in attempts:
        with pytest.raises(ChronicleError) as refused:
            await attempt
        assert refused.value.code == "invalid" and refused.value.fields == ["cursor"], refused.value


async def test_a_message_cursor_is_sealed_to_its_conversation(connect: ClientFactory) -> None:
    alice = await connect()
    first = await alice.conversations.start(title="one")
    other = await alice.conversations.start(title="two")
    for n in range(3):
        await alice.conversations.add_message(first.conversation_id, "user", f"m{n}")
        await alice.conversations.add_message(other.conversation_id, "user", f"m{n}")
    page = await alice.request("query.conversations.get", {"conversation_id": str(first.conversation_id),
                                                            "messages": {"limit": 1},
                                                            "min_position": alice.last_position})  # its own writes
    cursor = page["next_cursor"]
    assert cursor and readable(cursor) != b"o1"  # was the order's letter and the message's seq
    with pytest.raises(ChronicleError) as refused:
        await alice.request("query.conversations.get", {"conversation_id": str(other.conversation_id),
                                                        "messages": {"limit": 1, "cursor": cursor}})
    assert refused.value.code == "invalid" and refused.value.fields == ["messages.cursor"]


async def test_instances_open_each_others_cursors(
    chronicle: Chronicle, second_instance: Chronicle, connect: ClientFactory
) -> None:
    alice = await connect()
    for title in ("a", "b", "c"):
        await alice.conversations.start(title=title)
    user, query = alice.user or "", ListConversations(limit=1, sort_by="title", order="asc")
    await alice.conversations.list()  # (after the client's last write: the read model has them)
    page = await list_conversations(chronicle.read_queries, user, query)
    on_the_other = await list_conversations(
        second_instance.read_queries, user, query.model_copy(update={"cursor": page["next_cursor"]})
    )
    assert [row["title"] for row in page["items"] + on_the_other["items"]] == ["a", "b"]
