"""HITL checkpoint rules and the history window, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from domain.conversation import Conversation
from domain.errors import Conflict
from domain.hitl import HistoryWindow, select_history

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pause(conversation: Conversation, step: str = "s", expires_at: datetime | None = None) -> None:
    conversation.pause_for_human(
        run_id="r1", at=NOW, step=step, checkpoint_type="approval", prompt=f"{step}?", prompt_message_id=uuid4(),
        data={}, conversation_mode=False, expires_at=expires_at, history=HistoryWindow(),
    )


def paused(expires_at: datetime | None = None) -> Conversation:
    conversation = Conversation.start(id=uuid4(), owner="alice", at=NOW)
    pause(conversation, expires_at=expires_at)
    return conversation


def resume(conversation: Conversation, at: datetime = NOW, feedback: str | None = "yes") -> None:
    conversation.resume_from_human(
        run_id="r1", at=at, approved=True, edits={}, feedback=feedback, feedback_message_id=uuid4()
    )


def test_resume_twice_names_the_first_resume() -> None:
    conversation = paused()
    resume(conversation)
    with pytest.raises(Conflict) as raised:
        resume(conversation)
    assert raised.value.context["approved"] is True
    assert raised.value.context["resumed_at"] == NOW.isoformat()


def test_an_expired_checkpoint_cannot_be_resumed_even_before_the_sweeper() -> None:
    conversation = paused(expires_at=NOW + timedelta(seconds=5))
    conversation.collect_events()
    with pytest.raises(Conflict):
        resume(conversation, at=NOW + timedelta(seconds=6))
    assert conversation.collect_events() == []
    assert conversation.expire_checkpoint(run_id="r1", at=NOW + timedelta(seconds=6)) is True
    assert conversation.expire_checkpoint(run_id="r1", at=NOW + timedelta(seconds=7)) is False


def test_not_yet_due_checkpoints_do_not_expire() -> None:
    conversation = paused(expires_at=NOW + timedelta(seconds=5))
    assert conversation.expire_checkpoint(run_id="r1", at=NOW + timedelta(seconds=1)) is False


def test_a_run_pauses_again_after_it_was_resumed() -> None:
    conversation = paused()
    with pytest.raises(Conflict):
        pause(conversation, step="s2")  # still paused at s
    resume(conversation, feedback=None)
    pause(conversation, step="s2")
    assert conversation.checkpoints["r1"].step == "s2"


def message(n: int, minutes_ago: float, pinned: bool = False) -> dict:
    return {"id": uuid4(), "n": n, "pinned": pinned, "created_at": NOW - timedelta(minutes=minutes_ago)}


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (HistoryWindow(), [0, 1, 2, 3]),
        (HistoryWindow(mode="last", count=2), [0, 2, 3]),  # 0 is kept: it is the HITL prompt
        (HistoryWindow(mode="recent", minutes=10), [0, 1, 3]),  # pinned 1, recent 3
    ],
)
def test_history_window(window: HistoryWindow, expected: list[int]) -> None:
    messages = [message(0, 60), message(1, 50, pinned=True), message(2, 30), message(3, 1)]
    history = select_history(messages, window, NOW, keep={messages[0]["id"]})
    assert [m["n"] for m in history] == expected


def test_an_answer_is_taken_once_and_a_new_checkpoint_has_its_own() -> None:
    conversation = paused()
    assert conversation.take_answer(run_id="r1", at=NOW)[1] is False, "nothing to take while paused"
    resume(conversation)
    conversation.collect_events()
    checkpoint, taken = conversation.take_answer(run_id="r1", at=NOW + timedelta(seconds=1))
    assert taken and checkpoint.status == "resumed" and checkpoint.taken_at == NOW + timedelta(seconds=1)
    assert [type(e).__name__ for e in conversation.collect_events()] == ["HitlAnswerTaken"]
    assert conversation.take_answer(run_id="r1", at=NOW + timedelta(seconds=2))[1] is False
    assert conversation.collect_events() == []
    pause(conversation, step="again")
    assert conversation.take_answer(run_id="r1", at=NOW)[1] is False
    resume(conversation)
    assert conversation.take_answer(run_id="r1", at=NOW)[1] is True


def test_an_expiry_is_taken_once_too() -> None:
    conversation = paused(expires_at=NOW + timedelta(seconds=5))
    conversation.expire_checkpoint(run_id="r1", at=NOW + timedelta(seconds=6))
    checkpoint, taken = conversation.take_answer(run_id="r1", at=NOW + timedelta(seconds=7))
    assert taken and checkpoint.status == "expired"
    assert conversation.take_answer(run_id="r1", at=NOW + timedelta(seconds=8))[1] is False


def test_taking_from_a_run_never_paused_here_is_refused() -> None:
    with pytest.raises(Conflict):
        paused().take_answer(run_id="other", at=NOW)
