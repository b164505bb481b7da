"""Conversation commands and queries over real NATS and Postgres."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from tests.conftest import ClientFactory


async def test_the_first_message_stays_the_preview_while_later_batches_add_more(client: ChronicleClient) -> None:
    started = await client.conversations.start()
    await client.conversations.add_message(started.conversation_id, "user", "The very first")
    for n in range(3):
        # Read at the last write's position: each message reaches the read model in a batch of its own.
        await client.conversations.get(started.conversation_id)
        await client.conversations.add_message(started.conversation_id, "agent", f"Later {n}")
    [summary] = (await client.conversations.list()).items
    assert summary.message_count == 4 and summary.first_message == "The very first"


async def test_start_add_list_get(client: ChronicleClient) -> None:
    started = await client.conversations.start(tags=["work"])
    first = await client.conversations.add_message(started.conversation_id, "user", "Plan the quarterly review")
    await client.conversations.add_message(started.conversation_id, "agent", "Here is a plan", pinned=True)

    page = await client.conversations.list()
    assert page.total == 1
    [summary] = page.items
    assert summary.id == started.conversation_id
    assert summary.title == "Plan the quarterly review"
    assert summary.message_count == 2
    assert summary.first_message == "Plan the quarterly review"
    assert summary.updated_at >= summary.created_at

    conversation = await client.conversations.get(started.conversation_id)
    assert [m.content for m in conversation.messages] == ["Plan the quarterly review", "Here is a plan"]
    assert conversation.messages[0].id == first.message_id
    assert conversation.messages[1].pinned is True


async def test_invalid_input_names_the_field_and_writes_nothing(client: ChronicleClient) -> None:
    started = await client.conversations.start(title="limits")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"role": "user", "content": ""}, "content"),
        ({"role": "user", "content": "x" * 10_001}, "content"),
        ({"role": "robot", "content": "hi"}, "role"),
        ({"role": "user", "content": "hi", "surprise": 1}, "surprise"),
    ]
    for fields, field in cases:
        payload = {"conversation_id": str(started.conversation_id), **fields}
        with pytest.raises(ChronicleError) as raised:
            await client.request("cmd.conversation.add_message", payload)
        assert raised.value.code == "invalid"
        assert field in raised.value.fields
    with pytest.raises(ChronicleError) as raised:
        await client.conversations.start(title="t" * 501)
    assert raised.value.fields == ["title"]
    with pytest.raises(ChronicleError) as raised:
        await client.conversations.start(tags=[f"t{i}" for i in range(11)])
    assert raised.value.fields == ["tags"]
    conversation = await client.conversations.get(started.conversation_id)
    assert conversation.messages == []


async def test_bad_json_and_missing_token(client: ChronicleClient) -> None:
    reply = orjson.loads(
        (await client.nc.request(f"{client.prefix}.cmd.conversation.start", b"{not json", timeout=5,
                                 headers={"Authorization": f"Bearer {client.token}"})).data
    )
    assert reply["ok"] is False and reply["error"]["code"] == "invalid"
    for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": "Basic abc"}):
        reply = orjson.loads(
            (await client.nc.request(f"{client.prefix}.query.conversations.list", b"{}", timeout=5,
                                     headers=headers)).data
        )
        assert reply["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    ("subject", "payload", "field"),
    [
        ("query.conversations.list", {"offset": 2**63}, "offset"),
        ("query.conversations.list", {"offset": 100_001}, "offset"),
        ("query.sessions.list", {"offset": 2**63}, "offset"),
        ("query.conversations.list", {"min_position": 2**63}, "min_position"),
        ("query.audit.timeline", {"scope_id": str(uuid.uuid4()), "after_position": 2**63}, "after_position"),
    ],
)
async def test_numbers_past_what_the_database_takes_are_invalid(
    client: ChronicleClient, subject: str, payload: dict, field: str
) -> None:
    """Not `unavailable`: the request will never succeed, and it is refused before any query."""
    with pytest.raises(ChronicleError) as raised:
        await client.request(subject, payload)
    assert (raised.value.code, raised.value.fields) == ("invalid", [field])


@pytest.mark.parametrize(
    ("subject", "fields", "field", "rule"),
    [
        ("cmd.conversation.add_message", {"role": "user", "content": "hi", "pinned": 1}, "pinned", "bool_type"),
        ("cmd.conversation.add_message", {"role": "user", "content": "hi", "pinned": "yes"}, "pinned", "bool_type"),
        ("query.conversations.list", {"limit": True}, "limit", "int_type"),
        ("query.conversations.list", {"limit": "5"}, "limit", "int_type"),
        ("query.conversations.list", {"limit": 5.0}, "limit", "int_type"),
    ],
)
async def test_a_json_value_of_another_type_is_invalid_not_converted(
    client: ChronicleClient, subject: str, fields: dict[str, Any], field: str, rule: str
) -> None:
    """JSON says what type a value is: pydantic's lax mode would take 1 or "yes" for true
    and "5" or 5.0 for 5 (the artifacts' tests: true for a number); the bus takes each as
    itself."""
    started = await client.conversations.start(title="types")
    payload = {"conversation_id": str(started.conversation_id), **fields} if subject.startswith("cmd.") else fields
    with pytest.raises(ChronicleError) as raised:
        await client.request(subject, payload)
    assert (raised.value.code, raised.value.fields) == ("invalid", [field])
    assert raised.value.details[0]["rule"] == rule
    assert (await client.conversations.get(started.conversation_id)).messages == []


OVER_THE_LIMIT = {"notes": "x" * 65_536}  # more than CHRONICLE_MAX_JSON_BYTES's default, as JSON


@pytest.mark.parametrize(
    ("subject", "payload", "field"),
    [
        ("cmd.session.create", {"name": "s", "metadata": OVER_THE_LIMIT}, "metadata"),
        ("cmd.conversation.start", {"document_context": OVER_THE_LIMIT}, "document_context"),
        ("cmd.optimization.start", {"name": "o", "optimizer": "grid", "metadata": OVER_THE_LIMIT}, "metadata"),
    ],
)
async def test_a_json_field_past_its_byte_limit_is_invalid_and_writes_nothing(
    client: ChronicleClient, subject: str, payload: dict, field: str
) -> None:
    before = (await client.sessions.list()).total, (await client.conversations.list()).total
    with pytest.raises(ChronicleError) as raised:
        await client.request(subject, payload)
    assert (raised.value.code, raised.value.fields) == ("invalid", [field])
    assert raised.value.details[0]["rule"] == "max_bytes" and "65536 bytes" in raised.value.details[0]["message"]
    assert ((await client.sessions.list()).total, (await client.conversations.list()).total) == before
    just_under = {"notes": "x" * 60_000}
    if subject == "cmd.session.create":  # the same field under the limit is taken
        await client.request(subject, {"name": "s", "metadata": just_under})


async def test_another_users_conversation_is_not_found(connect: ClientFactory) -> None:
    alice, mallory = await connect(), await connect()
    started = await alice.conversations.start(title="private")
    missing = uuid.uuid4()
    for target in (started.conversation_id, missing):
        for attempt in (
            mallory.conversations.get(target),
            mallory.conversations.add_message(target, "user", "sneaky"),
            mallory.conversations.update(target, title="mine"),
            mallory.conversations.delete(target),
            mallory.conversations.export(target),
        ):
            with pytest.raises(ChronicleError) as raised:
                await attempt
            assert raised.value.code == "not_found"
    assert (await mallory.conversations.list()).total == 0
    assert (await alice.conversations.get(started.conversation_id)).title == "private"


async def test_delete_removes_from_every_read_model(client: ChronicleClient) -> None:
    started = await client.conversations.start(title="ephemeral zebra", tags=["gone"])
    await client.conversations.add_message(started.conversation_id, "user", "zebra crossing")
    assert (await client.conversations.search("zebra")).items
    await client.conversations.delete(started.conversation_id)
    assert (await client.conversations.list()).total == 0
    assert (await client.conversations.search("zebra")).items == []
    stats = await client.conversations.stats()
    assert (stats.total_conversations, stats.total_messages, stats.top_tags) == (0, 0, [])
    with pytest.raises(ChronicleError) as raised:
        await client.conversations.get(started.conversation_id)
    assert raised.value.code == "not_found"


async def test_sessions(client: ChronicleClient) -> None:
    session = await client.sessions.create("research", tags=["r"])
    await client.conversations.start(session_id=session.session_id)
    await client.sessions.update(session.session_id, name="research 2")
    got = await client.sessions.get(session.session_id)
    assert (got.name, got.conversation_count, got.status) == ("research 2", 1, "open")
    await client.sessions.close(session.session_id)
    with pytest.raises(ChronicleError) as raised:
        await client.conversations.start(session_id=session.session_id)
    assert raised.value.code == "conflict"
    assert (await client.sessions.list()).items[0].status == "closed"


async def test_a_conversation_larger_than_a_nats_message_is_read_and_exported_in_pages(client: ChronicleClient) -> None:
    """150 messages of 10,000 characters (1.5 MB) timed out: the reply passed NATS's 1 MiB."""
    started = await client.conversations.start(title="long")
    texts = [f"{n:04d} " + "w" * 9_995 for n in range(150)]
    for start in range(0, 150, 50):
        await asyncio.gather(*(
            client.conversations.add_message(started.conversation_id, "user", text) for text in texts[start : start + 50]
        ))
    first = await client.conversations.get_page(started.conversation_id)
    assert first.next_cursor is not None and 0 < len(first.messages) < 150
    whole = await client.conversations.get(started.conversation_id)
    assert sorted(m.content for m in whole.messages) == texts and len({m.id for m in whole.messages}) == 150
    assert [m.created_at for m in whole.messages] == sorted(m.created_at for m in whole.messages)

    newest = await client.conversations.get_page(started.conversation_id, order="newest", limit=10)
    assert [m.id for m in newest.messages] == [m.id for m in whole.messages[-10:]]
    older = await client.conversations.get_page(started.conversation_id, order="newest", limit=10, cursor=newest.next_cursor)
    assert [m.id for m in older.messages] == [m.id for m in whole.messages[-20:-10]]

    exported = await client.conversations.export(started.conversation_id, format="json")
    assert [m["content"] for m in orjson.loads(exported.content)["messages"]] == [m.content for m in whole.messages]
    markdown = await client.conversations.export(started.conversation_id, format="markdown")
    assert markdown.content.startswith("# long") and all(text in markdown.content for text in texts)
    assert markdown.content.count("# long") == 1

    with pytest.raises(ChronicleError) as refused:
        await client.conversations.get_page(started.conversation_id, order="oldest", cursor=newest.next_cursor)
    assert (refused.value.code, refused.value.fields) == ("invalid", ["messages.cursor"])
