"""Red team, the smaller holes at the edges: what a second connection, a forged or bent
token, or a cursor read and edited by its holder could do, tried as an attacker would on a
bus that requires credentials (the embedded default) and on the service's request path."""

from __future__ import annotations

import asyncio
import base64
import functools
import time
import uuid
from collections.abc import AsyncIterator

import nats
import nats.errors
import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_client.events import MAX_DELIVER as FEED_MAX_DELIVER
from chronicle_contract.bus import feed_consumer, inbox_prefix, signals_prefix, user_permissions
from chronicle_contract.conversations import ListConversations
from chronicle_contract.events import events_stream
from chronicle_contract.hitl import run_signals
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import SecretStr

from adapters.auth import TokenAuthority
from adapters.embedded import NATS_CONFIG, BusSecrets, EmbeddedNats
from adapters.messaging.callout import AuthCallout
from adapters.messaging.connect import connect_options
from adapters.messaging.fair_share import FairShare, Limits
from adapters.messaging.identities import Role, connect_role, identity, role_connect_options, static_roles_config
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.settings import Settings
from services.conversations.queries import list_conversations
from services.jobs.worker import MAX_DELIVER
from tests.conftest import JWT_SECRET, ClientFactory, fresh_chronicle, make_settings, new_prefix
from tests.servers import TestServers
from tests.violations import Violations, watched
from tests.waiting import eventually

AUTHORITY = TokenAuthority(secret=JWT_SECRET)
STATIC_ROLES = NATS_CONFIG.parent / "static-roles.conf"


@pytest.fixture(scope="module")
async def closed(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    """A Chronicle whose embedded NATS requires credentials, on a database of its own."""
    async with fresh_chronicle(servers, tmp_path_factory.mktemp("red-team"), None, embedded_nats_auth=True) as (chronicle, _):
        yield chronicle


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


# -- the service is nobody's deputy: it answers only to the asker's own inbox ------------------


class Inbox:
    """What arrives on a subscription, without ever waiting for nothing to come."""

    def __init__(self) -> None:
        self.received: list[str] = []

    async def arrived(self, message: Msg) -> None:
        self.received.append(message.subject)


def foreign_replies(chronicle: Chronicle, alice: str) -> list[str]:
    prefix = chronicle.settings.subject_prefix
    return [
        f"{run_signals(signals_prefix(prefix, alice), 'run-1')}.resumed",  # a forged approval for alice
        f"{inbox_prefix(alice)}.x.y",  # alice's replies
        f"{prefix}.events.conversation.started",  # into the event feed's stream
        f"{prefix}.jobs.work",  # into the job queue
        "nowhere.at.all",
    ]


async def test_a_reply_aimed_anywhere_but_the_askers_inbox_is_not_sent_and_costs_the_asker(closed: Chronicle) -> None:
    prefix, alice_id, bob_id = closed.settings.subject_prefix, f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    alices, alice = Inbox(), await raw(closed, AUTHORITY.issue(alice_id), alice_id)
    for subject in (f"{signals_prefix(prefix, alice_id)}.>", f"{inbox_prefix(alice_id)}.>"):
        await alice.subscribe(subject, cb=alices.arrived)
    await alice.flush()
    service = await nats.connect(closed.servers.service_nats_url)  # (what reaches the streams, read as the service)
    streams = {name: (await service.jetstream().stream_info(name)).state.last_seq
               for name in (events_stream(prefix), f"{prefix.upper()}_JOBS")}
    bob_token = AUTHORITY.issue(bob_id)
    bob = await raw(closed, bob_token, bob_id)
    service_share, closed.service.fair_share = closed.service.fair_share, FairShare(Limits(per_minute={"requests": 5}))
    unanswered = closed.service.unanswered
    try:
        for reply in foreign_replies(closed, alice_id):
            await bob.publish(f"{prefix}.query.conversations.list", b"{}", reply=reply,
                              headers={"Authorization": f"Bearer {bob_token}"})
        await eventually(lambda: closed.service.unanswered >= unanswered + 5, "the service to turn the requests down")
        await alice.flush()
        assert alices.received == [], "nothing reached alice's inbox or signals"
        assert {name: (await service.jetstream().stream_info(name)).state.last_seq for name in streams} == streams
        bobs = await client_of(closed, bob_token)
        with pytest.raises(ChronicleError) as refused:  # the five he aimed elsewhere spent his minute's five
            await bobs.conversations.list()
        assert refused.value.code == "rate_limited"
        await bobs.close()
    finally:
        closed.service.fair_share = service_share
        for connection in (alice, bob, service):
            await connection.close()


@pytest.mark.parametrize("verb", ["PING", "INFO", "STATS", "STATS.{name}", "INFO.{name}"])
async def test_service_discovery_answers_no_user(closed: Chronicle, verb: str) -> None:
    """Discovery's answers went to any reply subject a request named, and `$SRV.STATS` showed
    every user's request counts: a user may not ask at all; the service's operators may."""
    alice_id, bob_id = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    subject = "$SRV." + verb.format(name=closed.settings.service_name)
    alices, alice = Inbox(), await raw(closed, AUTHORITY.issue(alice_id), alice_id)
    await alice.subscribe(f"{inbox_prefix(alice_id)}.>", cb=alices.arrived)
    await alice.subscribe(f"{signals_prefix(closed.settings.subject_prefix, alice_id)}.>", cb=alices.arrived)
    await alice.flush()
    violations = Violations()
    bob = await watched(closed.nats_url, AUTHORITY.issue(bob_id), bob_id, violations)
    operator = await nats.connect(closed.servers.service_nats_url)
    try:
        for reply in foreign_replies(closed, alice_id)[:2] + [f"{inbox_prefix(bob_id)}.own"]:
            await bob.publish(subject, b"", reply=reply)
            assert "permissions violation for publish" in (await violations.next()).lower()
        answer = orjson.loads((await operator.request(subject, b"", timeout=5)).data)
        assert answer["name"] == closed.settings.service_name  # (discovery still serves the service's own)
        await alice.flush()
        assert alices.received == []
    finally:
        for connection in (alice, bob, operator):
            await connection.close()


# -- least privilege: each of the service's connections publishes only what its job needs -----


FORBIDDEN = {  # what each role's connection may not publish (formatted by `subjects`)
    Role.RESPONDER: ["{signals}.hitl.r.resumed", "{prefix}.events.conversation.started", "{prefix}.jobs.work",
                     "{prefix}.internal.usage", "$JS.API.STREAM.PURGE.{jobs}"],
    Role.SIGNALS: ["{inbox}.x", "{prefix}.events.conversation.started", "{prefix}.jobs.work"],
    Role.FEED: ["{inbox}.x", "{signals}.hitl.r.resumed", "{prefix}.jobs.work"],
    Role.JOBS: ["{inbox}.x", "{signals}.hitl.r.resumed", "{prefix}.events.conversation.started"],
    Role.USAGE: ["{inbox}.x", "{signals}.hitl.r.resumed", "{prefix}.jobs.work"],
    Role.STREAMS: ["{inbox}.x", "{signals}.hitl.r.resumed", "{prefix}.events.conversation.started", "{prefix}.jobs.work"],
}
ALLOWED = {  # one subject each role's job publishes to
    Role.RESPONDER: "{inbox}.reply", Role.SIGNALS: "{signals}.hitl.r.resumed",
    Role.FEED: "{prefix}.events.conversation.started", Role.JOBS: "{prefix}.jobs.work",
    Role.USAGE: "{prefix}.internal.usage", Role.STREAMS: "$JS.API.INFO",
}


def subjects(template: str, prefix: str, alice: str) -> str:
    return template.format(prefix=prefix, signals=signals_prefix(prefix, alice), inbox=inbox_prefix(alice),
                           jobs=f"{prefix.upper()}_JOBS")


@pytest.mark.parametrize(("role", "forbidden"), FORBIDDEN.items(), ids=str)
async def test_each_service_connection_may_publish_its_own_subjects_only(
    closed: Chronicle, role: Role, forbidden: list[str]
) -> None:
    prefix, alice = closed.settings.subject_prefix, f"alice-{uuid.uuid4().hex[:6]}"
    violations = Violations()
    options = role_connect_options(closed.servers.service_nats_url, role, scoped=True)
    connection = await nats.connect(**options, error_cb=violations.record, allow_reconnect=False)
    try:
        for subject in forbidden:
            await connection.publish(subjects(subject, prefix, alice), b"{}")
            assert "permissions violation for publish" in (await violations.next()).lower(), subject
    finally:
        await connection.close()
    assert closed.service.nc.options["user"] == identity(Role.RESPONDER), "the service answers as the responder"


@pytest.fixture(scope="module")
async def static_roles(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    """A Chronicle on a nats-server run from infra/nats/static-roles.conf as
    `chronicle nats-static-roles` writes it for this Chronicle's prefix: users admitted by
    the callout, the service's own connections by the server, as static users."""
    workdir = tmp_path_factory.mktemp("static-roles")
    prefix = new_prefix()
    config = workdir / "static-roles.conf"
    config.write_text(static_roles_config(prefix))
    secrets = BusSecrets.new()
    server = EmbeddedNats(workdir / "nats", auth=secrets, config=config)
    server.start()
    try:
        with servers.fresh_database() as url:
            settings = make_settings(url, secrets.service_url(server.url), workdir / "data").model_copy(update={
                "subject_prefix": prefix, "nats_callout_url": secrets.callout_url(server.url),
                "nats_callout_seed": SecretStr(secrets.issuer_seed)})
            chronicle = await bootstrap(settings)
            yield chronicle
            await chronicle.stop()
    finally:
        server.stop()


def test_the_static_roles_file_grants_what_the_callout_grants() -> None:
    """infra/nats/static-roles.conf is what `chronicle nats-static-roles` writes for the
    default prefix: each role's permissions are service_permissions', never edited apart."""
    assert STATIC_ROLES.read_text() == static_roles_config(Settings.model_fields["subject_prefix"].default)


@pytest.mark.parametrize("role", list(Role), ids=str)
async def test_each_static_role_publishes_its_own_subjects_and_nothing_else(static_roles: Chronicle, role: Role) -> None:
    """With the service's roles as static users (no callout asked for them), each may publish
    where its job needs and nowhere else; the service itself runs on those grants."""
    prefix, alice = static_roles.settings.subject_prefix, f"alice-{uuid.uuid4().hex[:6]}"
    operator = await nats.connect(static_roles.servers.service_nats_url)  # (the whole account: sees every subject)
    heard = await operator.subscribe(">")
    await operator.flush()
    violations = Violations()
    options = role_connect_options(static_roles.servers.service_nats_url, role, scoped=True)
    connection = await nats.connect(**options, error_cb=violations.record, allow_reconnect=False)
    try:
        allowed = subjects(ALLOWED[role], prefix, alice)
        await connection.publish(allowed, b"{}")
        await connection.flush()
        while (await heard.next_msg(timeout=5)).subject != allowed:
            pass
        for subject in FORBIDDEN[role]:
            await connection.publish(subjects(subject, prefix, alice), b"{}")
            assert "permissions violation for publish" in (await violations.next()).lower(), subject
        if role is not Role.RESPONDER:  # (no one but the responder may take requests)
            await connection.subscribe(f"{prefix}.cmd.>")
            assert "permissions violation for subscription" in (await violations.next()).lower()
    finally:
        await connection.close()
        await operator.close()
    client = await client_of(static_roles, AUTHORITY.issue(alice))  # a user, admitted by the callout, served
    try:
        assert (await client.conversations.start(title="static")).conversation_id
    finally:
        await client.close()


# -- no message poisons a consumer --------------------------------------------------------------


async def test_messages_put_on_the_job_queue_by_anyone_else_are_terminated_and_counted(closed: Chronicle) -> None:
    prefix, workers = closed.settings.subject_prefix, closed.job_workers
    assert workers is not None
    alice = await client_of(closed, AUTHORITY.issue(f"alice-{uuid.uuid4().hex[:6]}"))
    intruder = await nats.connect(closed.servers.service_nats_url)  # (whoever got past the bus)
    refused = workers.refused
    try:
        made_up = uuid.uuid4()
        order = orjson.dumps({"job_id": str(made_up), "owner": alice.user})
        forgeries: list[tuple[bytes, dict[str, str]]] = [
            (b"not json", {}), (b'{"job_id": 1}', {}), (order, {}),
            (order, {"Chronicle-Signature": "0" * 64}),  # a signature that is not the service's
            (order, {"Nats-Msg-Id": f"job:{made_up}"}),  # as an earlier version's, for a job the log does not hold
        ]
        for forged, headers in forgeries:
            await intruder.jetstream().publish(f"{prefix}.jobs.work", forged, headers=headers or None)
        await eventually(lambda: workers.refused >= refused + len(forgeries), "the workers to terminate them all")
        job = await alice.jobs.request("a summary of nothing", "summary")
        assert (await alice.jobs.wait(job.job_id, timeout=60)).status == "completed", "the workers go on"
        stream = f"{prefix.upper()}_JOBS"
        queue = await intruder.jetstream().consumer_info(stream, "workers")
        assert (queue.num_pending, queue.num_ack_pending, queue.num_redelivered) == (0, 0, 0), "nothing loops"
        assert queue.config.max_deliver == MAX_DELIVER
    finally:
        await alice.close()
        await intruder.close()


async def test_messages_put_on_the_event_feed_by_anyone_else_are_terminated_and_counted(closed: Chronicle) -> None:
    prefix = closed.settings.subject_prefix
    alice = await client_of(closed, AUTHORITY.issue(f"alice-{uuid.uuid4().hex[:6]}"))
    durable = f"poisoned-{uuid.uuid4().hex[:6]}"
    loader = await client_of(closed, AUTHORITY.issue("loader-p", claims={"roles": ["feed"], "durables": [durable]}))
    intruder = await nats.connect(closed.servers.service_nats_url)
    try:
        first = await alice.conversations.start(title="one")
        assert first.position is not None
        events = loader.events.follow(first.position - 1, durable=durable, filter="conversation.started")
        assert (await asyncio.wait_for(anext(events), 20)).position == first.position
        shaped = {"position": 10**9, "aggregate_id": str(uuid.uuid4()), "aggregate": "conversation",
                  "event": "started", "type": "Conversation.Started", "version": 1,
                  "timestamp": "2026-01-01T00:00:00Z", "owner": "alice", "data": {}}
        for forged in (b"{}", orjson.dumps(shaped)):  # (the second without the feed's position header)
            await intruder.jetstream().publish(f"{prefix}.events.conversation.started", forged)
        second = await alice.conversations.start(title="two")
        assert (await asyncio.wait_for(anext(events), 20)).position == second.position, "the follower goes on"
        assert loader.events.refused == 2
        kept = await intruder.jetstream().consumer_info(events_stream(prefix), feed_consumer("loader-p", durable))
        assert kept.config.max_deliver == FEED_MAX_DELIVER, "a message the follower keeps failing on ends"
        await events.aclose()
        again = loader.events.follow(0, durable=durable)  # and a restart meets neither again
        third = await alice.conversations.start(title="three")
        assert (await asyncio.wait_for(anext(again), 20)).position == second.position  # (not taken before the stop)
        assert (await asyncio.wait_for(anext(again), 20)).position == third.position
        await again.aclose()
        assert loader.events.refused == 2
    finally:
        for client in (alice, loader):
            await client.close()
        await intruder.close()


def takes(chronicle: Chronicle) -> float:
    subject = f"{chronicle.settings.subject_prefix}.cmd.hitl.take"
    return chronicle.metrics.registry.get_sample_value("chronicle_requests_total", {"subject": subject, "code": "ok"}) or 0.0


async def test_forged_resumed_signals_cost_the_waiter_one_take_per_interval(closed: Chronicle) -> None:
    """Before, every signal made a take, each a request of alice's budget: a flood of forged
    ones spent it until her wait raised `rate_limited`. Now the first prompts a take at once
    and each next waits twice as long after the last (HINT_SECONDS, doubling)."""
    prefix, alice_id = closed.settings.subject_prefix, f"alice-{uuid.uuid4().hex[:6]}"
    alice = await client_of(closed, AUTHORITY.issue(alice_id))
    forger = await nats.connect(closed.servers.service_nats_url)  # (whoever could publish there)
    service_share, closed.service.fair_share = closed.service.fair_share, FairShare(Limits(per_minute={"requests": 20}))
    try:
        started = await alice.conversations.start(title="deploy")
        handle = await alice.hitl.pause(started.conversation_id, step="deploy", prompt="Deploy?")
        before = takes(closed)
        waiting = asyncio.create_task(handle.wait_for_resume(timeout=60))
        await eventually(lambda: takes(closed) >= before + 1, "the waiter's first take")
        subject = f"{run_signals(signals_prefix(prefix, alice_id), handle.run_id)}.resumed"
        for _ in range(2000):
            await forger.publish(subject, orjson.dumps({"event": "resumed", "run_id": handle.run_id, "position": 1}))
            await forger.flush()  # (one at a time, as a flood spread over a while)
        assert takes(closed) - before - 1 <= 8, "a few takes, not one per signal"
        await alice.hitl.resume(handle.run_id, approved=True, feedback="yes")
        answer = await waiting  # (before: rate_limited, her minute's 20 requests spent by the signals)
        assert (answer.approved, answer.feedback) == (True, "yes")
    finally:
        closed.service.fair_share = service_share
        await alice.close()
        await forger.close()


async def test_a_service_connection_is_admitted_while_an_earlier_versions_callout_answers_too(
    closed: Chronicle,
) -> None:
    """A rolling upgrade: an instance that does not know the role identities answers callouts
    beside this one and refuses them; the role's first connect is tried again until admitted."""
    callout = closed.servers.callout
    assert callout is not None
    earlier = await nats.connect(**connect_options(callout.url))
    responder = AuthCallout(earlier, callout.issuer_seed, verify=AUTHORITY.verify, account=closed.settings.nats_account,
                            permissions=functools.partial(user_permissions, closed.settings.subject_prefix))
    await responder.start()
    refused = responder.refused
    try:
        # The server picks one of the two callouts at random: connect until the earlier one was
        # asked (4 tries left it unasked one run in 16; 40, one in 10^12), each admitted in the end.
        for _ in range(40):
            connection = await connect_role(closed.servers.service_nats_url, Role.SIGNALS, scoped=True)
            await connection.close()
            if responder.refused > refused:
                break
        assert responder.refused > refused, "the earlier version's callout was asked, and refused"
    finally:
        await responder.stop()
        await earlier.close()
