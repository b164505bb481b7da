"""The flood brake on a bus that requires credentials: a user whose requests are refused by
the score (the threshold, lowered here) is put off the bus, their connection kicked by the
server and their connects refused until the cooldown ends, while everyone else is served;
refusals of a forged token aimed at another user's inbox put nobody off."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import nats
import nats.errors
import orjson
import pytest
from chronicle_client import ChronicleClient
from chronicle_contract.bus import inbox_prefix
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle
from tests.conftest import JWT_SECRET, fresh_chronicle
from tests.servers import TestServers
from tests.waiting import eventually

AUTHORITY = TokenAuthority(secret=JWT_SECRET)
THRESHOLD = 40
COOLDOWN = 3.0


@pytest.fixture(scope="module")
async def braked(servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chronicle]:
    async with fresh_chronicle(
        servers, tmp_path_factory.mktemp("flood-brake"), None, embedded_nats_auth=True,
        flood_refusals=THRESHOLD, flood_window=60.0, flood_cooldown=COOLDOWN, job_workers=0,
    ) as (chronicle, _):
        yield chronicle


async def raw(chronicle: Chronicle, user: str) -> NATS:
    return await nats.connect(
        chronicle.nats_url, token=AUTHORITY.issue(user), inbox_prefix=inbox_prefix(user),
        allow_reconnect=False, max_reconnect_attempts=0,
    )


def invalid_list(chronicle: Chronicle) -> str:
    return f"{chronicle.settings.subject_prefix}.query.sessions.list"


async def test_a_user_refused_past_the_threshold_is_kicked_and_kept_off_until_the_cooldown(braked: Chronicle) -> None:
    mallory_id, alice_id = f"mallory-{uuid.uuid4().hex[:6]}", f"alice-{uuid.uuid4().hex[:6]}"
    alice = await ChronicleClient.connect(braked.nats_url, AUTHORITY.issue(alice_id), prefix=braked.settings.subject_prefix)
    mallory = await raw(braked, mallory_id)
    headers = {"Authorization": f"Bearer {AUTHORITY.issue(mallory_id)}"}
    brake = braked.service.flood_brake
    assert brake is not None
    benched_before = brake.benched_users
    try:
        answers = []
        for _ in range(THRESHOLD - 1):  # each refused `invalid`, and she stays on the bus
            reply = await mallory.request(invalid_list(braked), b'{"limit": 0}', headers=headers, timeout=5)
            answers.append(orjson.loads(reply.data)["error"]["code"])
        assert set(answers) == {"invalid"} and mallory.is_connected
        await mallory.publish(invalid_list(braked), b'{"limit": 0}', reply=f"{inbox_prefix(mallory_id)}.x", headers=headers)
        await eventually(lambda: mallory.is_closed, "the server to close mallory's connection")
        assert brake.benched_users == benched_before + 1
        with pytest.raises(nats.errors.Error, match="(?i)authorization"):
            await raw(braked, mallory_id)  # refused at the door while benched
        assert (await alice.sessions.list()).items == []  # everyone else is served
        again = await eventually(lambda: connect_or_none(braked, mallory_id), "mallory's connect after the cooldown",
                                 timeout=COOLDOWN + 10)
        reply = await again.request(invalid_list(braked), b"{}", headers=headers, timeout=5)
        assert orjson.loads(reply.data)["ok"] is True
        await again.close()
    finally:
        await alice.close()
        await mallory.close()


async def connect_or_none(chronicle: Chronicle, user: str) -> NATS | None:
    try:
        return await raw(chronicle, user)
    except nats.errors.Error:
        return None


async def test_refusals_of_a_forged_token_aimed_at_another_users_inbox_put_nobody_off(braked: Chronicle) -> None:
    """Nobody is named by a token that does not verify: mallory cannot have alice benched
    by flooding refusals into alice's inbox."""
    mallory_id, alice_id = f"mallory-{uuid.uuid4().hex[:6]}", f"alice-{uuid.uuid4().hex[:6]}"
    alice = await raw(braked, alice_id)
    mallory = await raw(braked, mallory_id)
    forged = AUTHORITY.issue(alice_id)[:-4] + "AAAA"
    arrived: list[bytes] = []

    async def take(msg: Msg) -> None:
        arrived.append(msg.data)

    await alice.subscribe(f"{inbox_prefix(alice_id)}.framed", cb=take)
    await alice.flush()
    brake = braked.service.flood_brake
    assert brake is not None
    benched_before = brake.benched_users
    try:
        for _ in range(THRESHOLD * 2):
            await mallory.publish(invalid_list(braked), b"{}", reply=f"{inbox_prefix(alice_id)}.framed",
                                  headers={"Authorization": f"Bearer {forged}"})
        await mallory.flush()
        await eventually(lambda: len(arrived) == THRESHOLD * 2, "every refusal to arrive in alice's inbox")
        assert {orjson.loads(data)["error"]["code"] for data in arrived} == {"unauthorized"}
        assert brake.benched_users == benched_before and brake.benched_for(alice_id) == 0
        assert alice.is_connected and mallory.is_connected
        reply = await alice.request(invalid_list(braked), b"{}", headers={"Authorization": f"Bearer {AUTHORITY.issue(alice_id)}"},
                                    timeout=5)
        assert orjson.loads(reply.data)["ok"] is True
    finally:
        await alice.close()
        await mallory.close()


async def test_requests_aimed_at_another_users_inbox_count_against_their_sender(braked: Chronicle) -> None:
    """A valid token's request whose reply is aimed elsewhere gets no answer and counts
    against its sender: enough of them put the sender off the bus, not the inbox's owner."""
    mallory_id, alice_id = f"mallory-{uuid.uuid4().hex[:6]}", f"alice-{uuid.uuid4().hex[:6]}"
    alice = await raw(braked, alice_id)
    mallory = await raw(braked, mallory_id)
    headers = {"Authorization": f"Bearer {AUTHORITY.issue(mallory_id)}"}
    try:
        for _ in range(THRESHOLD):
            await mallory.publish(invalid_list(braked), b"{}", reply=f"{inbox_prefix(alice_id)}.x", headers=headers)
        await mallory.flush()
        await eventually(lambda: mallory.is_closed, "the server to close mallory's connection")
        assert alice.is_connected
        assert braked.service.flood_brake is not None and braked.service.flood_brake.benched_for(alice_id) == 0
    finally:
        await alice.close()
        await mallory.close()
