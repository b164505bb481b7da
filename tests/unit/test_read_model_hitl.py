"""The HITL read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from domain.conversation import Conversation
from domain.hitl import HistoryWindow
from projections.hitl import HitlProjection, HitlView
from tests.unit.projected import NOW, at, erasure_of, project


class MemoryHitlView(HitlView):
    def __init__(self) -> None:
        self.conversations: dict[UUID, str] = {}
        self.checkpoints: dict[tuple[UUID, str, int], dict[str, Any]] = {}

    def add_conversation(self, conversation_id: UUID, owner: str) -> None:
        self.conversations[conversation_id] = owner

    def pause(
        self, conversation_id: UUID, run_id: str, seq: int, step: str, checkpoint_type: str, prompt: str,
        data: dict[str, Any], conversation_mode: bool, at: datetime, expires_at: datetime | None,
    ) -> None:
        if conversation_id in self.conversations:
            self.checkpoints[(conversation_id, run_id, seq)] = {
                "owner": self.conversations[conversation_id], "step": step, "checkpoint_type": checkpoint_type,
                "prompt": prompt, "data": data, "conversation_mode": conversation_mode, "status": "paused",
                "paused_at": at, "expires_at": expires_at,
            }

    def _latest(self, conversation_id: UUID, run_id: str) -> dict[str, Any]:
        seq = max(s for c, r, s in self.checkpoints if (c, r) == (conversation_id, run_id))
        return self.checkpoints[(conversation_id, run_id, seq)]

    def resume(
        self, conversation_id: UUID, run_id: str, approved: bool, edits: Any, feedback: str | None, at: datetime
    ) -> None:
        self._latest(conversation_id, run_id).update(
            status="resumed", resumed_at=at, approved=approved, edits=edits, feedback=feedback
        )

    def expire(self, conversation_id: UUID, run_id: str, at: datetime) -> None:
        self._latest(conversation_id, run_id).update(status="expired", expired_at=at)

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.conversations.pop(conversation_id, None)
        self.checkpoints = {k: r for k, r in self.checkpoints.items() if k[0] != conversation_id}

    def erase_owner(self, owner: str) -> None:
        self.conversations = {i: o for i, o in self.conversations.items() if o != owner}
        self.checkpoints = {k: r for k, r in self.checkpoints.items() if r["owner"] != owner}


def hitl() -> tuple[HitlProjection, MemoryHitlView]:
    view = MemoryHitlView()
    return HitlProjection(view), view


def pause(
    conversation: Conversation, run_id: str, when: datetime, step: str = "check", expires_at: datetime | None = None
) -> None:
    conversation.pause_for_human(
        run_id=run_id, at=when, step=step, checkpoint_type="approval", prompt="Go on?", prompt_message_id=uuid4(),
        data={"n": 1}, conversation_mode=False, expires_at=expires_at, history=HistoryWindow(),
    )


def test_checkpoints_of_a_run_paused_resumed_and_paused_again() -> None:
    projection, view = hitl()
    conversation = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="Run")
    pause(conversation, "run-1", at(1))
    conversation.resume_from_human(
        run_id="run-1", at=at(2), approved=False, edits={"x": 2}, feedback="no", feedback_message_id=uuid4()
    )
    pause(conversation, "run-1", at(3), step="retry", expires_at=at(4))
    project(projection, conversation)
    first, second = (view.checkpoints[key] for key in sorted(view.checkpoints, key=lambda k: k[2]))
    assert (first["status"], first["approved"], first["edits"], first["feedback"]) == ("resumed", False, {"x": 2}, "no")
    assert (second["status"], second["step"], second["owner"], second["expires_at"]) == ("paused", "retry", "alice", at(4))
    assert conversation.expire_checkpoint(run_id="run-1", at=at(4))
    project(projection, conversation)
    assert (second["status"], second["expired_at"]) == ("expired", at(4))  # the latest only
    assert first["status"] == "resumed"


def test_a_deleted_conversation_and_an_erased_owner_leave_no_checkpoint() -> None:
    projection, view = hitl()
    deleted = Conversation.start(id=uuid4(), owner="bob", at=NOW, title="a")
    pause(deleted, "run-2", NOW)
    deleted.delete(at=at(1))
    erased = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="b")
    pause(erased, "run-3", NOW)
    kept = Conversation.start(id=uuid4(), owner="bob", at=NOW, title="c")
    pause(kept, "run-4", NOW)
    project(projection, deleted, erased, kept, erasure_of("alice"))
    assert [run for _, run, _ in view.checkpoints] == ["run-4"] and list(view.conversations) == [kept.id]
