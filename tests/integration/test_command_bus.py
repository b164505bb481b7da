"""The group-commit bus on its own: a batch's commands share one transaction, and a
command that fails after changing an aggregate takes nothing of its own with it."""

from __future__ import annotations

import asyncio
import secrets
import uuid

from chronicle_contract.conversations import AddMessage, MessageAdded, StartConversation
from chronicle_contract.errors import ChronicleError

from adapters.errors import DriverFailures
from domain.conversation import Conversation
from entrypoints.bootstrap import Chronicle
from entrypoints.routes import command_handlers
from services.runtime.command_bus import CommandBus
from services.runtime.dispatch import Decide
from services.runtime.unit_of_work import UnitOfWork


class BuggyAddMessage(AddMessage, action="buggy.add_message"):
    """Decided by a handler with a bug."""


def add_then_fail(cmd: AddMessage, uow: UnitOfWork) -> MessageAdded:
    """A handler with a bug: it changes the conversation, then raises."""
    uow.get(Conversation, cmd.conversation_id).add_message(
        message_id=uow.new_id(), at=uow.now, role="user", content="must never be saved"
    )
    raise RuntimeError("bug after the change")


async def test_a_failing_command_after_a_change_leaves_its_batch_mates_intact(chronicle: Chronicle) -> None:
    handlers = command_handlers() | {BuggyAddMessage: Decide(BuggyAddMessage, add_then_fail)}
    bus = CommandBus(chronicle.store, handlers, failures=DriverFailures())
    user = f"bus-{uuid.uuid4().hex}"
    try:
        # Queued before the writer starts, so all of them form one batch.
        start = asyncio.ensure_future(bus.execute(StartConversation(title="batch"), user))
        bus.start()
        conversation_id = uuid.UUID((await start)["conversation_id"])
        bus.stop()
        bus = CommandBus(chronicle.store, handlers, failures=DriverFailures())
        commands = [(AddMessage, "before"), (BuggyAddMessage, "ignored"), (AddMessage, "after")]
        futures = [
            asyncio.ensure_future(bus.execute(kind(conversation_id=conversation_id, role="user", content=text), user))
            for kind, text in commands
        ]
        await asyncio.sleep(0)  # every submission reaches the queue
        bus.start()
        results = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        bus.stop()

    assert isinstance(results[1], ChronicleError) and results[1].code == "internal"
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    assert bus.batches == 1
    contents = [
        e.content for e in chronicle.postgres_store.events_of(conversation_id) if isinstance(e, Conversation.MessageAdded)
    ]
    assert contents == ["before", "after"]


async def test_a_group_commit_of_tens_of_megabytes_is_saved(chronicle: Chronicle) -> None:
    # psycopg's pipeline mode hangs for good sending a statement over ~10 MB; the recorder
    # must not use it (adapters/store/event_store.py). 30 artifacts of ~0.9 MB, sent at once.
    from chronicle_contract.artifacts import StoreArtifact

    bus = CommandBus(chronicle.store, command_handlers(), failures=DriverFailures())
    bus.start()
    try:
        big = {"type": "page", "label": "x" * 900_000}
        stores = [bus.execute(StoreArtifact(layout=big), f"big-{uuid.uuid4().hex}") for _ in range(30)]
        replies = await asyncio.wait_for(asyncio.gather(*stores), 60)
    finally:
        bus.stop()
    assert len({r["artifact_id"] for r in replies}) == 30 and bus.batches < 30


async def test_a_value_the_database_refuses_fails_only_its_own_command(chronicle: Chronicle) -> None:
    """A key too long for the idempotency index (the edge refuses it earlier; here it reaches
    the bus) broke the batch's one statement: every batch mate got `unavailable`, after ten
    retries. Now the batch is saved command by command and only that one is refused."""
    bus = CommandBus(chronicle.store, command_handlers(), failures=DriverFailures())
    users = [f"mate-{n}-{uuid.uuid4().hex[:6]}" for n in range(5)]
    try:
        futures = [asyncio.ensure_future(bus.execute(StartConversation(title="bad key"), users[0], secrets.token_urlsafe(6000)))]
        futures += [asyncio.ensure_future(bus.execute(StartConversation(title="fine"), user)) for user in users[1:]]
        await asyncio.sleep(0)  # every submission reaches the queue before the writer starts
        bus.start()
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 30)
    finally:
        bus.stop()
    assert isinstance(results[0], ChronicleError) and results[0].code == "invalid"
    assert all(isinstance(r, dict) and r["conversation_id"] for r in results[1:])
    assert bus.batches == 1


async def test_an_erasure_batched_with_the_users_own_writes_fails_only_what_comes_after_it(
    chronicle: Chronicle,
) -> None:
    """add_message(v), erase(v), add_message(v), start(bystander) in one batch: all four got
    `conflict "too much contention"` (the erasure dropped v's cached conversation, the
    second add_message reused a version). Now the bystander and what came before stand."""
    from chronicle_contract.users import EraseUser

    bus = CommandBus(chronicle.store, command_handlers(), failures=DriverFailures())
    victim, bystander = f"v-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    bus.start()
    try:
        conversation_id = uuid.UUID((await bus.execute(StartConversation(title="t"), victim))["conversation_id"])
    finally:
        bus.stop()
    bus = CommandBus(chronicle.store, command_handlers(), failures=DriverFailures())
    message = AddMessage(conversation_id=conversation_id, role="user", content="hi")
    try:
        futures = [
            asyncio.ensure_future(bus.execute(message, victim)),
            asyncio.ensure_future(bus.execute(EraseUser(user_id=victim), "an-admin")),
            asyncio.ensure_future(bus.execute(message, victim)),
            asyncio.ensure_future(bus.execute(StartConversation(title="mine"), bystander)),
        ]
        await asyncio.sleep(0)  # every submission reaches the queue before the writer starts
        bus.start()
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 30)
    finally:
        bus.stop()
    assert isinstance(results[0], dict) and results[1]["erased"] is True  # type: ignore[index]
    assert isinstance(results[2], ChronicleError) and results[2].code == "conflict"
    assert isinstance(results[3], dict) and results[3]["conversation_id"]
    assert bus.batches == 1
