"""Idempotency-Key: a repeated command returns the first reply and appends nothing."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from adapters.store.mapper import ErasedContent
from entrypoints.bootstrap import Chronicle
from tests.conftest import ClientFactory


def events_count(chronicle: Chronicle, conversation_id: uuid.UUID) -> int:
    return len(chronicle.postgres_store.events_of(conversation_id))


async def test_repeated_key_returns_first_reply(chronicle: Chronicle, client: ChronicleClient) -> None:
    started = await client.conversations.start(title="retry me")
    key = str(uuid.uuid4())
    first = await client.conversations.add_message(started.conversation_id, "user", "once", idempotency_key=key)
    again = await client.conversations.add_message(started.conversation_id, "user", "once", idempotency_key=key)
    assert again == first and first.position is not None  # the position is kept beside the stored reply
    assert events_count(chronicle, started.conversation_id) == 2  # Started + one MessageAdded
    assert len((await client.conversations.get(started.conversation_id)).messages) == 1


async def test_concurrent_duplicates_append_once(chronicle: Chronicle, client: ChronicleClient) -> None:
    started = await client.conversations.start(title="storm")
    key = str(uuid.uuid4())
    replies = await asyncio.gather(
        *(
            client.conversations.add_message(started.conversation_id, "user", "only one", idempotency_key=key)
            for _ in range(20)
        )
    )
    assert len({r.message_id for r in replies}) == 1
    assert events_count(chronicle, started.conversation_id) == 2


async def test_starting_with_a_key_creates_one_conversation(client: ChronicleClient) -> None:
    key = str(uuid.uuid4())
    replies = [await client.conversations.start(title="one", idempotency_key=key) for _ in range(3)]
    assert len({r.conversation_id for r in replies}) == 1
    assert (await client.conversations.list()).total == 1


async def test_same_key_for_another_request_is_a_conflict(client: ChronicleClient) -> None:
    started = await client.conversations.start(title="k")
    key = str(uuid.uuid4())
    await client.conversations.add_message(started.conversation_id, "user", "first", idempotency_key=key)
    with pytest.raises(ChronicleError) as raised:
        await client.conversations.add_message(started.conversation_id, "user", "different", idempotency_key=key)
    assert raised.value.code == "conflict"
    assert raised.value.fields == ["Idempotency-Key"]
    assert len((await client.conversations.get(started.conversation_id)).messages) == 1


async def test_keys_belong_to_their_user(connect: ClientFactory) -> None:
    alice, bob = await connect(), await connect()
    key = str(uuid.uuid4())
    a = await alice.conversations.start(title="same", idempotency_key=key)
    b = await bob.conversations.start(title="same", idempotency_key=key)
    assert a.conversation_id != b.conversation_id


async def test_failed_commands_are_not_remembered(client: ChronicleClient) -> None:
    """A rejected command wrote nothing, so retrying it with the same key runs it afresh."""
    session = await client.sessions.create("s")
    await client.sessions.close(session.session_id)
    key = str(uuid.uuid4())
    for _ in range(2):
        with pytest.raises(ChronicleError) as raised:
            await client.conversations.start(session_id=session.session_id, idempotency_key=key)
        assert raised.value.code == "conflict"


def stored_records(chronicle: Chronicle, owner: str) -> list[bytes]:
    url = chronicle.settings.database_url or ""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT reply, fingerprint FROM chronicle.idempotency WHERE owner = %s", (owner,))
        return [bytes(reply) + fingerprint.encode() for reply, fingerprint in rows.fetchall()]


async def test_stored_replies_are_sealed_and_unreadable_after_erasure(
    chronicle: Chronicle, connect: ClientFactory
) -> None:
    """A backup of the idempotency table quotes nothing of the user, before or after erasure."""
    user = f"sealed-{uuid.uuid4().hex[:8]}"
    alice, admin = await connect(user), await connect(roles=("admin",))
    key = str(uuid.uuid4())
    first = await alice.conversations.start(title="tulip diagnosis", idempotency_key=key)
    assert (await alice.conversations.start(title="tulip diagnosis", idempotency_key=key)) == first
    backup = stored_records(chronicle, user)
    assert len(backup) == 1 and b"tulip" not in backup[0] and str(first.conversation_id).encode() not in backup[0]

    await admin.request("cmd.user.erase", {"user_id": user})
    assert stored_records(chronicle, user) == []
    with pytest.raises(ErasedContent):  # the backup's record cannot be opened any more
        chronicle.store.mapper.open_reply(user, key, backup[0])


@pytest.mark.parametrize("key", ["k" * 3000, "tab\tkey"], ids=["3,000 characters", "control character"])
async def test_an_unusable_key_is_invalid_and_changes_nothing(chronicle: Chronicle, client: ChronicleClient, key: str) -> None:
    """Checked before the command reaches the group commit, where it would fail its batch."""
    started = await client.conversations.start(title="keys")
    with pytest.raises(ChronicleError) as raised:
        await client.conversations.add_message(started.conversation_id, "user", "hello", idempotency_key=key)
    assert (raised.value.code, raised.value.fields) == ("invalid", ["Idempotency-Key"])
    assert events_count(chronicle, started.conversation_id) == 1
