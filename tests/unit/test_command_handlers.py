"""Each capability's command handlers, through the real command bus on an in-memory event
store: no Postgres, no NATS. The bus is the one `build()` wires for the service, given the
fake store (a subclass of the event store port) through `Overrides`. What is checked here
is what the handlers decide and answer; tests/integration runs the same commands over NATS
against Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from chronicle_contract.artifacts import RemoveArtifact, StoreArtifact, TagArtifact
from chronicle_contract.audit import RecordRead
from chronicle_contract.base import Command
from chronicle_contract.conversations import AddMessage, DeleteConversation, StartConversation, UpdateConversation
from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import ExpireRun, PauseRun, RecordTaken, ResumeRun
from chronicle_contract.jobs import DescribeJob, FailJob, RecordJob, RecordOutcomes, StartPhase
from chronicle_contract.optimizations import EndRound, RecordTrial, StartOptimization, StartRound
from chronicle_contract.sessions import CloseSession, CreateSession, UpdateSession
from chronicle_contract.users import EraseUser
from chronicle_contract.values import Chunk
from eventsourcing.persistence import IntegrityError, StoredEvent

from adapters.store.memory import InMemoryEventStore, InMemoryRecorder
from domain.conversation import Conversation
from domain.hitl import HistoryWindow, HitlRun
from entrypoints.bootstrap import Overrides, Stage, build
from entrypoints.settings import Settings
from services.ports.event_store import IdempotencyRecord, Store
from services.runtime.command_bus import CommandBus

START = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


class Clock:
    """The bus's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store() -> InMemoryEventStore:
    return InMemoryEventStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Servers nobody reaches (port 9): the bus runs on the store it is given, and nothing
    # else is started.
    return Settings(
        database_url="postgresql://nobody@127.0.0.1:9/none", nats_url="nats://127.0.0.1:9", data_dir=tmp_path,
        jwt_secret="a-test-secret-that-is-long-enough-for-hs256-signing",
    )


@contextlib.asynccontextmanager
async def instance(
    settings: Settings, store: Store, clock: Clock, new_id: Callable[[], UUID] = uuid.uuid4
) -> AsyncIterator[CommandBus]:
    """A service instance's command bus on `store`, as build() wires it, started alone."""
    chronicle = await build(settings, Overrides(store=store, clock=clock, new_id=new_id)).start(through=Stage.BUS)
    try:
        yield chronicle.bus
    finally:
        await chronicle.stop()


@pytest.fixture
async def bus(settings: Settings, store: InMemoryEventStore, clock: Clock) -> AsyncIterator[CommandBus]:
    counter = itertools.count(1)
    async with instance(settings, store, clock, new_id=lambda: UUID(int=next(counter))) as running:
        yield running


async def refused(bus: CommandBus, command: Command[Any], user: str) -> ChronicleError:
    with pytest.raises(ChronicleError) as caught:
        await bus.execute(command, user)
    return caught.value


async def test_sessions_are_created_updated_and_closed_by_their_owner_only(bus: CommandBus) -> None:
    created = await bus.execute(CreateSession(name="research", tags=["a"]), "alice")
    session_id = UUID(created["session_id"])
    assert created["position"] == 1
    await bus.execute(UpdateSession(session_id=session_id, name="renamed"), "alice")
    assert (await refused(bus, UpdateSession(session_id=session_id, name="mine"), "mallory")).code == "not_found"
    await bus.execute(CloseSession(session_id=session_id), "alice")
    closed_again = await refused(bus, StartConversation(title="late", session_id=session_id), "alice")
    assert closed_again.code == "conflict"


async def test_a_conversation_records_messages_retitles_and_deletes(bus: CommandBus, store: InMemoryEventStore) -> None:
    started = await bus.execute(StartConversation(title="Plan", tags=["x"]), "alice")
    conversation_id = UUID(started["conversation_id"])
    added = await bus.execute(AddMessage(conversation_id=conversation_id, role="user", content="hello"), "alice")
    assert added["title"] == "Plan" and added["position"] == 2
    await bus.execute(UpdateConversation(conversation_id=conversation_id, title="Plan B"), "alice")
    await bus.execute(DeleteConversation(conversation_id=conversation_id), "alice")
    kinds = [type(e).__name__ for e in store.events_of(conversation_id)]
    assert kinds == ["Started", "MessageAdded", "Retitled", "Deleted"]
    assert (await refused(bus, AddMessage(conversation_id=conversation_id, role="user", content="x"), "alice")).code in {
        "not_found", "conflict"}
    assert (await refused(bus, AddMessage(conversation_id=uuid.uuid4(), role="user", content="x"), "alice")).code == "not_found"


async def test_another_users_conversation_is_not_found(bus: CommandBus) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="mine"), "alice"))["conversation_id"])
    error = await refused(bus, AddMessage(conversation_id=conversation_id, role="user", content="hi"), "mallory")
    assert error.code == "not_found"


async def test_a_paused_run_is_resumed_once_and_expires_only_while_paused(bus: CommandBus, clock: Clock) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="review"), "alice"))["conversation_id"])
    paused = await bus.execute(
        PauseRun(conversation_id=conversation_id, run_id="run-1", step="draft", prompt="approve?", expires_in=60), "alice"
    )
    assert paused["run_id"] == "run-1"
    assert (await refused(bus, ResumeRun(run_id="run-1", approved=True), "mallory")).code == "not_found"
    resumed = await bus.execute(ResumeRun(run_id="run-1", approved=True, feedback="ok"), "alice")
    assert resumed["feedback_message_id"] is not None
    assert (await refused(bus, ResumeRun(run_id="run-1", approved=False), "alice")).code == "conflict"
    clock.now += timedelta(minutes=5)
    assert (await bus.execute(ExpireRun(run_id="run-1"), "alice"))["expired"] is False


async def test_run_ids_are_each_users_and_runs_from_before_still_answer(
    bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    alices = UUID((await bus.execute(StartConversation(title="a"), "alice"))["conversation_id"])
    mallorys = UUID((await bus.execute(StartConversation(title="m"), "mallory"))["conversation_id"])
    await bus.execute(PauseRun(conversation_id=alices, run_id="same", step="s", prompt="alice?"), "alice")
    await bus.execute(PauseRun(conversation_id=mallorys, run_id="same", step="s", prompt="mallory?"), "mallory")
    await bus.execute(ResumeRun(run_id="same", approved=False), "mallory")
    taken = await bus.execute(RecordTaken(run_id="same"), "mallory")
    assert (taken["status"], taken["conversation_id"]) == ("resumed", str(mallorys))
    assert (await bus.execute(RecordTaken(run_id="same"), "alice"))["status"] == "paused", "alice's run is untouched"

    # A run opened when run ids were shared by all users lives under the shared id.
    old = HitlRun._create(HitlRun.Opened, id=HitlRun.shared_id_for("old"), timestamp=clock.now, owner="alice",
                          run_id="old", conversation_id=alices)
    alices_conversation = store.load_many([alices])[alices]
    alices_conversation.pause_for_human(
        run_id="old", at=clock.now, step="s", checkpoint_type="approval", prompt="from before?",
        prompt_message_id=uuid.uuid4(), data={}, conversation_mode=False, expires_at=None, history=HistoryWindow(),
    )
    store.recorder.record([store.mapper.to_stored_event(e) for e in (*old.collect_events(), *alices_conversation.collect_events())])
    bus.cache.evict([alices])
    assert (await refused(bus, ResumeRun(run_id="old", approved=True), "mallory")).code == "not_found"
    await bus.execute(ResumeRun(run_id="old", approved=True), "alice")
    assert (await bus.execute(RecordTaken(run_id="old"), "alice"))["status"] == "resumed"
    again = await bus.execute(PauseRun(conversation_id=alices, run_id="old", step="t", prompt="and again?"), "alice")
    assert again["run_id"] == "old"  # pauses again under the same (shared-id) run


async def test_artifacts_descend_get_tagged_and_removed(bus: CommandBus) -> None:
    layout = {"type": "page", "children": [{"type": "text", "label": "hi"}]}
    parent = await bus.execute(StoreArtifact(layout=layout, query="a page"), "alice")
    child = await bus.execute(StoreArtifact(layout=layout, parent_id=UUID(parent["artifact_id"])), "alice")
    assert (parent["generation"], child["generation"]) == (0, 1)
    assert child["session_id"] == parent["session_id"]  # both in the caller's current session
    await bus.execute(TagArtifact(artifact_id=UUID(child["artifact_id"]), tags=["keep"]), "alice")
    removed = await bus.execute(RemoveArtifact(artifact_id=UUID(child["artifact_id"]), reason="retention"), "alice")
    assert removed["removed"] is True
    gone = await refused(bus, TagArtifact(artifact_id=UUID(child["artifact_id"]), tags=["late"]), "alice")
    assert gone.code == "not_found"  # a removed artifact takes no more commands
    foreign_parent = await refused(bus, StoreArtifact(layout=layout, parent_id=UUID(parent["artifact_id"])), "mallory")
    assert foreign_parent.code == "not_found"


async def test_a_job_is_claimed_advanced_and_failed_by_its_worker(bus: CommandBus) -> None:
    snapshot = [Chunk(
        chunk_id="c1", source_id="s1", text="Light drives photosynthesis.", score=1.0, embedding_version="fts",
        captured_at=START,
    )]
    requested = await bus.execute(RecordJob(content="a quiz", artifact_type="quiz", snapshot=snapshot), "alice")
    job_id = UUID(requested["job_id"])
    assert requested["status"] == "pending" and requested["created"] is True
    again = await bus.execute(RecordJob(content="a quiz", artifact_type="quiz", snapshot=snapshot), "alice")
    assert again["job_id"] == requested["job_id"] and again["created"] is False  # the active one answers
    described = await bus.execute(DescribeJob(job_id=job_id, worker="w1"), "alice")
    assert described["phase"] == "planning" and described["status"] == "pending"
    planning = await bus.execute(StartPhase(job_id=job_id, worker="w1"), "alice")
    assert planning["status"] == "planning"
    generating = await bus.execute(RecordOutcomes(job_id=job_id, worker="w1", plan={"questions": []}), "alice")
    assert generating["phase"] == "generating"
    intruder = await refused(bus, RecordOutcomes(job_id=job_id, worker="w2", result={"x": 1}), "alice")
    assert intruder.code == "conflict"
    failed = await bus.execute(FailJob(job_id=job_id, worker="w1", reason="the model refused"), "alice")
    assert failed["phase"] is None


async def test_an_optimization_records_rounds_and_trials_with_the_best_so_far(bus: CommandBus) -> None:
    optimization_id = UUID(
        (await bus.execute(StartOptimization(name="prompt search", optimizer="random"), "alice"))["optimization_id"]
    )
    round_ = await bus.execute(StartRound(optimization_id=optimization_id), "alice")
    round_id = UUID(round_["round_id"])
    scores = [0.2, 0.9, 0.5]
    recorded = [await bus.execute(RecordTrial(round_id=round_id, score=s, candidate={"id": f"c{s}"}), "alice")
                for s in scores]
    assert [t["trial_index"] for t in recorded] == [0, 1, 2]
    assert [t["best_so_far"] for t in recorded] == [0.2, 0.9, 0.9]
    ended = await bus.execute(EndRound(round_id=round_id, stop_reason="converged"), "alice")
    assert ended["best_score"] == 0.9 and ended["stopped"] is True
    assert (await refused(bus, RecordTrial(round_id=round_id, score=1.0), "alice")).code == "conflict"


async def test_an_erased_user_gets_no_new_events_and_the_erasure_is_recorded_once(bus: CommandBus) -> None:
    assert (await bus.execute(EraseUser(user_id="bob"), "admin"))["erased"] is True
    assert (await bus.execute(EraseUser(user_id="bob"), "admin"))["erased"] is False


async def test_an_auditors_read_goes_on_their_own_trail(bus: CommandBus) -> None:
    read = RecordRead(what="stream", aggregate_id=uuid.uuid4(), aggregate_owner="alice")
    first = await bus.execute(read, "carol")
    second = await bus.execute(read, "carol")
    assert first["trail_id"] == second["trail_id"] and second["position"] > first["position"]


async def test_a_repeated_idempotency_key_returns_the_first_reply_and_appends_nothing(
    bus: CommandBus, store: InMemoryEventStore
) -> None:
    first = await bus.execute(CreateSession(name="once"), "alice", "key-1")
    again = await bus.execute(CreateSession(name="once"), "alice", "key-1")
    assert again == first and len(store.recorder.events) == 1
    with pytest.raises(ChronicleError) as reused:
        await bus.execute(CreateSession(name="another"), "alice", "key-1")
    assert reused.value.code == "conflict" and len(store.recorder.events) == 1
    assert (await bus.execute(CreateSession(name="once"), "bob", "key-1"))["session_id"] != first["session_id"]


async def test_two_writers_on_one_conversation_meet_optimistic_concurrency(
    settings: Settings, store: InMemoryEventStore, clock: Clock
) -> None:
    # Two buses (two service instances) on one store, each with its own cache: a write that
    # meets a version taken by the other is decided again on fresh state, never lost.
    async with instance(settings, store, clock) as first, instance(settings, store, clock) as second:
        buses = [first, second]
        conversation_id = UUID((await buses[0].execute(StartConversation(title="shared"), "alice"))["conversation_id"])
        for running in buses:  # both caches hold the conversation at version 1
            await running.execute(AddMessage(conversation_id=conversation_id, role="user", content="warm"), "alice")
        writes = [
            buses[i % 2].execute(AddMessage(conversation_id=conversation_id, role="user", content=f"m{i}"), "alice")
            for i in range(40)
        ]
        await asyncio.gather(*writes)
    messages = [e for e in store.events_of(conversation_id) if isinstance(e, Conversation.MessageAdded)]
    assert len(messages) == 42
    assert [e.originator_version for e in store.events_of(conversation_id)] == list(range(1, 44))
    assert sum(running.conflicts for running in buses) > 0


class LateRecorder:
    """The shared recorder, whose first look for stored replies came just before the other
    instance committed them (what a retry sent to a second instance may see)."""

    def __init__(self, shared: Any) -> None:
        self.shared = shared
        self.looked = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shared, name)

    def replies(self, keys: Any) -> Any:
        if not self.looked:
            self.looked = True
            return {}
        return self.shared.replies(keys)


class SecondInstance(InMemoryEventStore):
    def __init__(self, shared: InMemoryEventStore) -> None:
        self.recorder = LateRecorder(shared.recorder)  # type: ignore[assignment]
        self.mapper = shared.mapper


async def test_a_retry_racing_its_first_send_on_another_instance_gets_the_first_reply(
    settings: Settings, bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="review"), "alice"))["conversation_id"])
    await bus.execute(PauseRun(conversation_id=conversation_id, run_id="run-1", step="s", prompt="ok?"), "alice")
    first = await bus.execute(ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice", "resume-1")
    async with instance(settings, SecondInstance(store), clock) as other:
        # It finds no stored reply, loads the run already resumed: refused by the aggregate,
        # but the refusal was caused by the same request, so its stored reply is the answer.
        again = await other.execute(ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice", "resume-1")
        assert again == first
        # A request that is not the same one under that key still hears that the key is taken.
        reused = await refused_keyed(other, ResumeRun(run_id="run-1", approved=False), "alice", "resume-1")
        assert reused.code == "conflict" and "Idempotency-Key" in reused.message
        # And a refusal for a reason of its own stands.
        alone = await refused_keyed(other, ResumeRun(run_id="run-1", approved=True), "alice", "resume-2")
        assert alone.code == "conflict" and "already resumed" in alone.message


class UnheardRecorder(InMemoryRecorder):
    """Its next saves fail as `failing` says, one each: True, the save commits and is not
    heard (tried again, as the Postgres recorder tries a dropped connection's statement
    again, it meets its own versions taken: IntegrityError); False, it fails without
    committing anything, as a version conflict does."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: list[bool] = []

    def record(
        self, stored_events: Sequence[StoredEvent], replies: Sequence[IdempotencyRecord] = (), *,
        writers: Collection[str] = (), erased: Collection[str] = (),
    ) -> list[int]:
        if self.failing:
            if self.failing.pop(0):
                super().record(stored_events, replies, writers=writers, erased=erased)
            raise IntegrityError("an aggregate version is already taken")
        return super().record(stored_events, replies, writers=writers, erased=erased)


class UnheardStore(InMemoryEventStore):
    recorder: UnheardRecorder

    def __init__(self) -> None:
        super().__init__()
        self.recorder = UnheardRecorder()


@pytest.mark.parametrize(
    "failing", [[True], [False], [True, False]],
    ids=["committed unheard", "not committed", "committed unheard, then the next attempt failed"],
)
async def test_an_unkeyed_command_whose_commit_went_unheard_is_saved_once(
    settings: Settings, clock: Clock, failing: list[bool]
) -> None:
    """No record is kept for a command without an Idempotency-Key: its events, found as it
    sent them, say its save committed, and it is answered as decided, not decided again."""
    store = UnheardStore()
    async with instance(settings, store, clock) as running:
        conversation_id = UUID((await running.execute(StartConversation(title="t"), "alice"))["conversation_id"])
        store.recorder.failing = failing
        reply = await running.execute(AddMessage(conversation_id=conversation_id, role="user", content="once"), "alice")
    messages = [e for e in store.events_of(conversation_id) if isinstance(e, Conversation.MessageAdded)]
    assert [(e.content, e.message_id) for e in messages] == [("once", UUID(reply["message_id"]))]
    assert reply["position"] == len(store.recorder.events)
    assert store.recorder.stored_replies == {}  # (no record for an unkeyed command)


async def refused_keyed(bus: CommandBus, command: Command[Any], user: str, key: str) -> ChronicleError:
    with pytest.raises(ChronicleError) as caught:
        await bus.execute(command, user, key)
    return caught.value


async def test_a_refusal_on_state_another_instance_changed_is_decided_again_on_the_stored_state(
    settings: Settings, bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="review"), "alice"))["conversation_id"])
    async with instance(settings, store, clock) as other:  # a second instance on one database
        await other.execute(PauseRun(conversation_id=conversation_id, run_id="run-1", step="s", prompt="ok?"), "alice")
    # This instance's cached conversation knows of no run-1: refused on it alone.
    resumed = await bus.execute(ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice")
    assert resumed["run_id"] == "run-1"
    assert (await bus.execute(RecordTaken(run_id="run-1"), "alice"))["status"] == "resumed"


async def test_an_answer_that_saves_nothing_is_not_given_on_state_another_instance_changed(
    settings: Settings, bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="review"), "alice"))["conversation_id"])
    await bus.execute(PauseRun(conversation_id=conversation_id, run_id="run-1", step="s", prompt="ok?"), "alice")
    assert (await bus.execute(RecordTaken(run_id="run-1"), "alice"))["status"] == "paused"  # cached here
    async with instance(settings, store, clock) as other:  # a second instance on one database
        await other.execute(ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice")
    # On its cached conversation this instance would answer `paused` and save nothing.
    assert (await bus.execute(RecordTaken(run_id="run-1"), "alice"))["status"] == "resumed"
    assert bus.stale_reads == 1


async def test_once_another_writer_is_seen_its_writes_to_cached_aggregates_are_loaded_before_deciding(
    settings: Settings, bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="chat"), "alice"))["conversation_id"])
    async with instance(settings, store, clock) as other:  # a second instance on one database
        for turn in range(6):  # consecutive messages land on either instance, as in a queue group
            writer = bus if turn % 2 == 0 else other
            await writer.execute(AddMessage(conversation_id=conversation_id, role="user", content=f"m{turn}"), "alice")
    # The first write after the other's finds this bus's copy behind and conflicts once;
    # from then on this bus knows the log is shared and catches its copies up first.
    assert bus.conflicts == 1
    assert len(store.events_of(conversation_id)) == 7


class UnreadableReplies(SecondInstance):
    """A second instance whose key ring cannot be read just now (its connection dropped)."""

    def __init__(self, shared: InMemoryEventStore) -> None:
        super().__init__(shared)
        self.mapper = copy.copy(shared.mapper)

        def open_reply(owner: str, key: str, stored: bytes) -> tuple[str, dict[str, Any]]:
            raise RuntimeError("the key ring's connection dropped")

        self.mapper.open_reply = open_reply  # type: ignore[method-assign]  # this instance's only


async def test_a_raced_key_whose_reply_cannot_be_opened_leaves_the_refusal_and_the_writer_running(
    settings: Settings, bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    conversation_id = UUID((await bus.execute(StartConversation(title="review"), "alice"))["conversation_id"])
    await bus.execute(PauseRun(conversation_id=conversation_id, run_id="run-1", step="s", prompt="ok?"), "alice")
    await bus.execute(ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice", "resume-1")
    async with instance(settings, UnreadableReplies(store), clock) as other:
        refusal = await refused_keyed(other, ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice", "resume-1")
        assert refusal.code == "conflict" and "already resumed" in refusal.message
        # The writer thread still answers.
        assert (await other.execute(StartConversation(title="after"), "alice"))["conversation_id"]


async def test_a_run_read_from_the_cache_is_not_checked_it_is_written_once(
    settings: Settings, bus: CommandBus, store: InMemoryEventStore, clock: Clock
) -> None:
    """A resume reads the run (cached since the pause) and writes the conversation: the
    store checks the conversation's version, and the run, whose only event is its opening,
    needs no look-up of its own; a take that saves nothing still has its conversation checked."""
    conversation_id = UUID((await bus.execute(StartConversation(title="review"), "alice"))["conversation_id"])
    await bus.execute(PauseRun(conversation_id=conversation_id, run_id="run-1", step="s", prompt="ok?"), "alice")
    checked: list[set[UUID]] = []
    changed = store.recorder.changed

    def counting(seen: Any) -> set[UUID]:
        checked.append(set(seen))
        return changed(seen)

    store.recorder.changed = counting  # type: ignore[method-assign]
    assert (await bus.execute(RecordTaken(run_id="run-1"), "alice"))["status"] == "paused"  # saves nothing
    assert checked == [{conversation_id}]
    await bus.execute(ResumeRun(run_id="run-1", approved=True, feedback="yes"), "alice")
    assert checked == [{conversation_id}]  # (no second look-up)
    with pytest.raises(TypeError, match="written once"):
        bus.cache.get(HitlRun.id_for("alice", "run-1")).trigger_event(HitlRun.Opened)  # type: ignore[union-attr]


async def test_a_first_send_looks_no_key_up_and_a_key_sent_before_is_still_answered_from_its_record(
    bus: CommandBus, store: InMemoryEventStore
) -> None:
    looked_up: list[list[tuple[str, str]]] = []
    replies = store.recorder.replies

    def counting(keys: Any) -> Any:
        looked_up.append(list(keys))
        return replies(keys)

    store.recorder.replies = counting  # type: ignore[method-assign]
    conversation_id = UUID((await bus.execute(StartConversation(title="keys"), "alice", "start-1"))["conversation_id"])
    first = await bus.execute(AddMessage(conversation_id=conversation_id, role="user", content="hi"), "alice", "add-1")
    assert [keys for keys in looked_up if keys] == []  # (new keys: saved without a look-up)
    # Sent again: the save finds the key taken, and the command is answered from its record.
    again = await bus.execute(AddMessage(conversation_id=conversation_id, role="user", content="hi"), "alice", "add-1")
    assert again == first and len(store.recorder.events) == 2
    assert ("alice", "add-1") in looked_up[-1]
    # Refused by the aggregate, a retry of a pause still gets its first reply; another request
    # under a key already used hears that, not the aggregate's refusal.
    paused = await bus.execute(PauseRun(conversation_id=conversation_id, run_id="r", step="s", prompt="ok?"), "alice", "p")
    assert await bus.execute(PauseRun(conversation_id=conversation_id, run_id="r", step="s", prompt="ok?"), "alice", "p") == paused
    other = await refused_keyed(bus, ResumeRun(run_id="nobody-s-run", approved=True), "alice", "p")
    assert other.code == "conflict" and "Idempotency-Key" in other.message
