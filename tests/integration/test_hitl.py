"""Human-in-the-loop pause and resume over NATS and JetStream, with the history carried across."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_client.hitl import Expired
from chronicle_contract.bus import signals_prefix
from chronicle_contract.hitl import ResumeSignal, run_signals
from nats.aio.subscription import Subscription

from adapters.auth import TokenAuthority
from domain.hitl import HitlRun
from entrypoints.bootstrap import Chronicle, bootstrap
from tests.conftest import ClientFactory, make_settings
from tests.servers import TestServers
from tests.waiting import eventually


async def conversation_with_history(client: ChronicleClient) -> uuid.UUID:
    started = await client.conversations.start(title="sunset")
    await client.conversations.add_message(started.conversation_id, "user", "a 1:1 sunset image please")
    await client.conversations.add_message(started.conversation_id, "agent", "calling the image API with 16:9")
    return started.conversation_id


async def run_signals_of(client: ChronicleClient, run_id: str) -> Subscription:
    """What the run's owner receives on `<prefix>.signals.<owner scope>.hitl.<run_id>.*` from now."""
    return await client.nc.subscribe(f"{run_signals(signals_prefix(client.prefix, client.user or ''), run_id)}.*")


async def next_signal(subscription: Subscription) -> dict:
    return orjson.loads((await subscription.next_msg(timeout=10)).data)


async def test_pause_resume_round_trip(client: ChronicleClient) -> None:
    conversation_id = await conversation_with_history(client)
    run_id = f"run-{uuid.uuid4().hex}"
    signals = await run_signals_of(client, run_id)
    handle = await client.hitl.pause(
        conversation_id,
        run_id=run_id,
        step="generate_image",
        checkpoint_type="error_recovery",
        prompt="The image API refused aspect ratio 16:9. Which one should I use?",
        data={"error": "invalid aspect ratio", "form": {"aspect_ratio": "16:9"}},
        conversation_mode=True,
    )
    paused = await next_signal(signals)
    assert set(paused) == {"event", "run_id", "conversation_id", "position", "at"}, "a signal carries no content"
    assert (paused["event"], paused["run_id"], paused["conversation_id"]) == ("paused", run_id, str(conversation_id))
    checkpoint = await client.hitl.get(run_id)  # the person's UI reads the checkpoint
    assert checkpoint.checkpoint_type == "error_recovery"
    assert checkpoint.data["form"] == {"aspect_ratio": "16:9"}

    waiting = asyncio.create_task(handle.wait_for_resume(timeout=10))
    resumed = await client.hitl.resume(handle.run_id, approved=True, edits={"aspect_ratio": "1:1"}, feedback="use 1:1")
    answer = await waiting
    assert (await next_signal(signals))["event"] == "resumed"
    await signals.unsubscribe()

    assert (answer.approved, answer.edits, answer.feedback) == (True, {"aspect_ratio": "1:1"}, "use 1:1")
    contents = [m.content for m in answer.history]
    assert contents[0] == "a 1:1 sunset image please", "the original request is in the history"
    assert contents[-2:] == [checkpoint.prompt, "use 1:1"]
    assert len({m.id for m in answer.history}) == len(answer.history)
    assert [m.created_at for m in answer.history] == sorted(m.created_at for m in answer.history)

    stored = await client.conversations.get(conversation_id)
    feedback = [m for m in stored.messages if m.message_type == "hitl_feedback"]
    assert [(m.content, m.id, m.metadata["run_id"]) for m in feedback] == [
        ("use 1:1", resumed.feedback_message_id, handle.run_id)
    ]
    status = await client.hitl.get(handle.run_id)
    assert (status.status, status.approved, status.feedback) == ("resumed", True, "use 1:1")
    assert status.resumed_at and status.resumed_at >= status.paused_at


async def answered_while_nobody_waits(client: ChronicleClient, *, approved: bool, feedback: str) -> str:
    """A run paused and answered while its orchestrator is down; its run id."""
    conversation_id = await conversation_with_history(client)
    run_id = f"run-{uuid.uuid4().hex}"
    await client.hitl.pause(conversation_id, step="review", prompt="Approve the draft?", run_id=run_id)
    await client.hitl.resume(run_id, approved=approved, feedback=feedback)
    return run_id


async def test_resume_while_orchestrator_is_down_reaches_a_new_process(
    client: ChronicleClient, chronicle: Chronicle
) -> None:
    run_id = await answered_while_nobody_waits(client, approved=False, feedback="shorter, please")
    later = await ChronicleClient.connect(chronicle.nats_url, client.token, prefix=client.prefix)
    try:
        answer = await later.hitl.run(run_id).wait_for_resume(timeout=10)
        assert (answer.approved, answer.feedback) == (False, "shorter, please")
        with pytest.raises(TimeoutError):  # exactly once: a second wait gets nothing
            await later.hitl.run(run_id).wait_for_resume(timeout=1)
    finally:
        await later.close()


async def test_concurrent_waiters_take_an_answer_once(client: ChronicleClient, chronicle: Chronicle) -> None:
    run_id = await answered_while_nobody_waits(client, approved=True, feedback="ship it")
    orchestrators = [await ChronicleClient.connect(chronicle.nats_url, client.token, prefix=client.prefix) for _ in range(2)]
    try:
        outcomes = await asyncio.gather(
            *(o.hitl.run(run_id).wait_for_resume(timeout=2) for o in orchestrators), return_exceptions=True
        )
        answers = [o for o in outcomes if isinstance(o, ResumeSignal)]
        assert [a.feedback for a in answers] == ["ship it"]
        assert sum(isinstance(o, TimeoutError) for o in outcomes) == 1
        assert (await client.hitl.take(run_id)).status == "taken"
    finally:
        for o in orchestrators:
            await o.close()


async def test_a_forged_signal_is_no_answer(client: ChronicleClient, chronicle: Chronicle) -> None:
    """On a bus nobody else may publish on, still: a waiter woken by a message that is not
    the service's takes nothing from it; it gets exactly the person's answer."""
    conversation_id = await conversation_with_history(client)
    handle = await client.hitl.pause(conversation_id, step="forge", prompt="Delete the database?")
    subscriptions = len(client.nc._subs)
    waiting = asyncio.create_task(handle.wait_for_resume(timeout=10))
    subject = f"{run_signals(signals_prefix(client.prefix, client.user or ''), handle.run_id)}.resumed"
    forged = {"event": "resumed", "run_id": handle.run_id, "approved": True, "edits": {"drop": "all"}, "position": 10**9}
    await eventually(lambda: len(client.nc._subs) > subscriptions, "the waiter listening")
    await client.nc.publish(subject, orjson.dumps(forged))
    await client.hitl.resume(handle.run_id, approved=False, feedback="no!")
    answer = await waiting
    assert (answer.approved, answer.edits, answer.feedback) == (False, {}, "no!")
    assert client.last_position is not None and client.last_position < 10**9


async def test_an_answer_to_an_earlier_checkpoint_is_not_the_answer_to_the_next(client: ChronicleClient) -> None:
    conversation_id = await conversation_with_history(client)
    run_id = f"run-{uuid.uuid4().hex}"
    await client.hitl.pause(conversation_id, step="outline", prompt="Outline ok?", run_id=run_id)
    await client.hitl.resume(run_id, approved=True, feedback="outline ok")  # nobody took this one
    await client.hitl.pause(conversation_id, step="draft", prompt="Draft ok?", run_id=run_id)

    # The earlier answer was never taken, and a wait with no time left looks only at what
    # is there: the current checkpoint has no answer, so it must not take that one.
    with pytest.raises(TimeoutError):
        await client.hitl.run(run_id).wait_for_resume(timeout=0)
    waiting = asyncio.create_task(client.hitl.run(run_id).wait_for_resume(timeout=10))
    await client.hitl.resume(run_id, approved=False, feedback="draft too long")
    assert (await waiting).feedback == "draft too long"


async def test_exactly_once_across_a_service_restart(
    servers: TestServers, authority: TokenAuthority, tmp_path: Path
) -> None:
    """Pause on one service process, restart it, resume on the next: one answer, once."""
    with servers.fresh_database() as url:
        settings = make_settings(url, servers.nats_url, tmp_path)
        first = await bootstrap(settings)
        client = await ChronicleClient.connect(first.nats_url, authority.issue("restart-user"), prefix=settings.subject_prefix)
        try:
            conversation_id = await conversation_with_history(client)
            handle = await client.hitl.pause(conversation_id, step="restart", prompt="Still there?")
            await first.stop()
            second = await bootstrap(settings)
            try:
                await client.hitl.resume(handle.run_id, approved=True, feedback="yes, still here")
                answer = await handle.wait_for_resume(timeout=10)
                assert (answer.approved, answer.feedback) == (True, "yes, still here")
                with pytest.raises(TimeoutError):
                    await client.hitl.run(handle.run_id).wait_for_resume(timeout=1)
            finally:
                await second.stop()
        finally:
            await client.close()


async def test_lifecycle_errors_write_nothing(client: ChronicleClient, connect: ClientFactory) -> None:
    conversation_id = await conversation_with_history(client)
    with pytest.raises(ChronicleError) as raised:
        await client.hitl.resume(f"never-{uuid.uuid4().hex}", approved=True)
    assert raised.value.code == "not_found"

    handle = await client.hitl.pause(conversation_id, step="s1", prompt="ok?")
    with pytest.raises(ChronicleError) as raised:
        await client.hitl.pause(conversation_id, step="s1", prompt="again?", run_id=handle.run_id)
    assert raised.value.code == "conflict"

    mallory = await connect()
    with pytest.raises(ChronicleError) as raised:
        await mallory.hitl.resume(handle.run_id, approved=True)
    assert raised.value.code == "not_found"
    with pytest.raises(ChronicleError) as raised:
        await mallory.hitl.get(handle.run_id)
    assert raised.value.code == "not_found"
    assert (await mallory.hitl.list()).total == 0

    first = await client.hitl.resume(handle.run_id, approved=True, feedback="yes")
    with pytest.raises(ChronicleError) as raised:
        await client.hitl.resume(handle.run_id, approved=False, feedback="no")
    assert raised.value.code == "conflict"
    assert raised.value.details[0]["approved"] is True, "the second reply names the first resume"
    assert "resumed_at" in raised.value.details[0]

    with pytest.raises(ChronicleError) as raised:
        await client.hitl.pause(uuid.uuid4(), step="s", prompt="p")
    assert raised.value.code == "not_found"

    messages = (await client.conversations.get(conversation_id)).messages
    assert [m.message_type for m in messages].count("hitl_feedback") == 1
    assert first.feedback_message_id in {m.id for m in messages}


async def test_a_run_id_is_its_users_and_stays_on_its_conversation(
    chronicle: Chronicle, client: ChronicleClient, connect: ClientFactory
) -> None:
    """Run ids are each user's own: another user pausing with the same id opens another
    run (learning nothing of this one). Ids are not looked up before a first pause: one
    the user already used on another conversation is caught when the save fails, and the
    pause then gets the error it would have got, with nothing written."""
    conversation_id = await conversation_with_history(client)
    run_id = f"taken-{uuid.uuid4().hex}"
    handle = await client.hitl.pause(conversation_id, step="s1", prompt="first?", run_id=run_id)
    await client.hitl.resume(run_id, approved=True)
    again = await client.hitl.pause(conversation_id, step="s2", prompt="second step?", run_id=run_id)
    assert again.paused is not None and handle.paused is not None
    assert again.paused.position is not None and handle.paused.position is not None
    assert again.paused.position > handle.paused.position  # the same run pauses again, later

    mallory = await connect()
    theirs = await conversation_with_history(mallory)
    await mallory.hitl.pause(theirs, step="s", prompt="mine?", run_id=run_id)
    await mallory.hitl.resume(run_id, approved=False, feedback="mallory's own")
    assert (await mallory.hitl.get(run_id)).conversation_id == theirs
    assert (await client.hitl.get(run_id)).status == "paused", "alice's run is untouched"

    chronicle.bus.cache.evict([HitlRun.id_for(client.user or "", run_id)])  # as another instance: not cached
    other = await conversation_with_history(client)
    conflicts = chronicle.bus.conflicts
    with pytest.raises(ChronicleError) as raised:
        await client.hitl.pause(other, step="s", prompt="mine?", run_id=run_id)
    assert (raised.value.code, raised.value.details[0]["rule"]) == ("conflict", "same_conversation")
    assert chronicle.bus.conflicts == conflicts + 1  # found by the failed save, not a look-up
    assert (await client.conversations.get(other)).message_count == 2  # no prompt was added


async def test_expiry(client: ChronicleClient) -> None:
    conversation_id = await conversation_with_history(client)
    run_id = f"run-{uuid.uuid4().hex}"
    signals = await run_signals_of(client, run_id)
    handle = await client.hitl.pause(conversation_id, run_id=run_id, step="slow human", prompt="Quick!", expires_in=0.3)
    with pytest.raises(Expired):
        await handle.wait_for_resume(timeout=15)
    assert [(await next_signal(signals))["event"] for _ in range(2)] == ["paused", "expired"]
    await signals.unsubscribe()
    with pytest.raises(ChronicleError) as raised:
        await client.hitl.resume(handle.run_id, approved=True)
    assert raised.value.code == "conflict"
    assert (await client.hitl.get(handle.run_id)).status == "expired"


async def test_open_checkpoints_are_listed_oldest_first(client: ChronicleClient) -> None:
    conversation_id = await conversation_with_history(client)
    runs = [
        (await client.hitl.pause(conversation_id, step=f"step {n}", prompt=f"question {n}", run_id=f"r{n}-{uuid.uuid4().hex}")).run_id
        for n in range(3)
    ]
    await client.hitl.resume(runs[1], approved=True)
    listed = await client.hitl.list()
    assert [r.run_id for r in listed.items] == [runs[0], runs[2]]
    assert all(r.status == "paused" for r in listed.items)


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ({"mode": "last", "count": 1}, ["Approve?", "fine"]),
        ({"mode": "all"}, ["first", "pinned note", "second", "Approve?", "fine"]),
        ({"mode": "recent", "minutes": 0.0001}, ["pinned note", "Approve?", "fine"]),
    ],
)
async def test_history_window(client: ChronicleClient, window: dict, expected: list[str]) -> None:
    started = await client.conversations.start(title="window")
    await client.conversations.add_message(started.conversation_id, "user", "first")
    await client.conversations.add_message(started.conversation_id, "user", "pinned note", pinned=True)
    await client.conversations.add_message(started.conversation_id, "agent", "second")
    await asyncio.sleep(0.05)  # the 'recent' window must leave the older messages out
    handle = await client.hitl.pause(started.conversation_id, step="w", prompt="Approve?", history=window)
    await client.hitl.resume(handle.run_id, approved=True, feedback="fine")
    answer = await handle.wait_for_resume(timeout=10)
    assert [m.content for m in answer.history] == expected


async def test_an_answer_with_a_history_too_large_for_one_reply_still_arrives(client: ChronicleClient) -> None:
    """120 messages of 9,900 characters (1.2 MB) with the default window `all`: the
    answer, once taken, must reach its orchestrator, so its oldest messages are left out."""
    started = await client.conversations.start(title="long talk")
    for start in range(0, 120, 40):
        await asyncio.gather(*(
            client.conversations.add_message(started.conversation_id, "user", f"{n:03d} " + "z" * 9_896)
            for n in range(start, start + 40)
        ))
    handle = await client.hitl.pause(started.conversation_id, step="big", prompt="Go on?")
    await client.hitl.resume(handle.run_id, approved=True, feedback="yes")
    answer = await handle.wait_for_resume(timeout=10)
    assert answer.history_truncated and 0 < len(answer.history) < 122
    assert [m.content for m in answer.history][-2:] == ["Go on?", "yes"]
    assert answer.history[-3].content.startswith("119 ")  # the newest are kept
