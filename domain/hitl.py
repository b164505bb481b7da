"""Human-in-the-loop checkpoints: a run pauses a conversation for a person, who answers.

The events are recorded on the Conversation (the mixin below gives it the commands);
HitlRun is the small index that finds a run's conversation from its run id.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from domain.base import Aggregate, check_text
from domain.errors import Conflict

MAX_PROMPT = 10_000
MAX_STEP = 200
MAX_CHECKPOINT_TYPE = 50
RUN_NAMESPACE = UUID("0b6a3f0e-6c63-4f1e-9d7c-6a1c2f0d9e11")

CheckpointStatus = Literal["paused", "resumed", "expired"]


class HistoryWindow(BaseModel):
    """Which messages a signal carries: all, the last `count`, or pinned plus the last `minutes`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["all", "last", "recent"] = "all"
    count: int | None = None
    minutes: float | None = None


class Checkpoint(BaseModel):
    """A run's latest checkpoint, as the conversation knows it."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    status: CheckpointStatus
    step: str
    paused_at: datetime
    expires_at: datetime | None
    resumed_at: datetime | None = None
    approved: bool | None = None
    taken_at: datetime | None = None  # when its orchestrator took the answer (once)


class HitlPaused(Aggregate.Event):
    AGGREGATE = "Conversation"
    run_id: str
    step: str
    checkpoint_type: str
    prompt: str
    prompt_message_id: UUID
    data: dict[str, Any]
    conversation_mode: bool
    expires_at: datetime | None
    history: HistoryWindow

    def apply(self, conversation: Any) -> None:
        conversation.checkpoints[self.run_id] = Checkpoint(
            run_id=self.run_id,
            status="paused",
            step=self.step,
            paused_at=self.timestamp,
            expires_at=self.expires_at,
        )


class HitlResumed(Aggregate.Event):
    AGGREGATE = "Conversation"
    run_id: str
    approved: bool
    edits: dict[str, Any]
    feedback: str | None
    feedback_message_id: UUID | None

    def apply(self, conversation: Any) -> None:
        checkpoint = conversation.checkpoints[self.run_id]
        conversation.checkpoints[self.run_id] = checkpoint.model_copy(
            update={"status": "resumed", "resumed_at": self.timestamp, "approved": self.approved}
        )


class HitlExpired(Aggregate.Event):
    AGGREGATE = "Conversation"
    run_id: str

    def apply(self, conversation: Any) -> None:
        checkpoint = conversation.checkpoints[self.run_id]
        conversation.checkpoints[self.run_id] = checkpoint.model_copy(update={"status": "expired"})


class HitlAnswerTaken(Aggregate.Event):
    """The run's orchestrator took the answer to its checkpoint: nobody takes it again."""

    AGGREGATE = "Conversation"
    run_id: str

    def apply(self, conversation: Any) -> None:
        checkpoint = conversation.checkpoints[self.run_id]
        conversation.checkpoints[self.run_id] = checkpoint.model_copy(update={"taken_at": self.timestamp})


class NotPaused(Conflict):
    pass


class HumanInTheLoop:
    """Commands a Conversation gains for checkpoints; `checkpoints` maps run id -> Checkpoint."""

    checkpoints: dict[str, Checkpoint]

    def pause_for_human(
        self,
        *,
        run_id: str,
        at: datetime,
        step: str,
        checkpoint_type: str,
        prompt: str,
        prompt_message_id: UUID,
        data: dict[str, Any],
        conversation_mode: bool,
        expires_at: datetime | None,
        history: HistoryWindow,
    ) -> None:
        check_text("prompt", prompt, max_length=MAX_PROMPT)
        check_text("step", step, max_length=MAX_STEP)
        check_text("checkpoint_type", checkpoint_type, max_length=MAX_CHECKPOINT_TYPE)
        current = self.checkpoints.get(run_id)
        if current is not None and current.status == "paused":
            raise Conflict(f"run {run_id} is already paused at step {current.step}", field="run_id", rule="not_paused")
        self.add_message(  # type: ignore[attr-defined]
            message_id=prompt_message_id,
            at=at,
            role="agent",
            content=prompt,
            metadata={"run_id": run_id, "step": step, "checkpoint_type": checkpoint_type},
            message_type="hitl_prompt",
        )
        self.trigger_event(  # type: ignore[attr-defined]
            HitlPaused,
            timestamp=at,
            run_id=run_id,
            step=step,
            checkpoint_type=checkpoint_type,
            prompt=prompt,
            prompt_message_id=prompt_message_id,
            data=data,
            conversation_mode=conversation_mode,
            expires_at=expires_at,
            history=history,
        )

    def resume_from_human(
        self,
        *,
        run_id: str,
        at: datetime,
        approved: bool,
        edits: dict[str, Any],
        feedback: str | None,
        feedback_message_id: UUID,
    ) -> None:
        self.check_paused(run_id, at)
        if feedback is not None:
            check_text("feedback", feedback, max_length=MAX_PROMPT)
            self.add_message(  # type: ignore[attr-defined]
                message_id=feedback_message_id,
                at=at,
                role="user",
                content=feedback,
                metadata={"run_id": run_id, "approved": approved},
                message_type="hitl_feedback",
            )
        self.trigger_event(  # type: ignore[attr-defined]
            HitlResumed,
            timestamp=at,
            run_id=run_id,
            approved=approved,
            edits=edits,
            feedback=feedback,
            feedback_message_id=feedback_message_id if feedback is not None else None,
        )

    def expire_checkpoint(self, *, run_id: str, at: datetime) -> bool:
        """Record the expiry of a paused checkpoint whose time is up; False if there is none."""
        checkpoint = self.checkpoints.get(run_id)
        if checkpoint is None or checkpoint.status != "paused" or not is_due(checkpoint, at):
            return False
        self.trigger_event(HitlExpired, timestamp=at, run_id=run_id)  # type: ignore[attr-defined]
        return True

    def take_answer(self, *, run_id: str, at: datetime) -> tuple[Checkpoint, bool]:
        """The run's checkpoint, and whether its answer (resumed or expired) is taken now:
        an answer is taken once, by whichever orchestrator asks first."""
        checkpoint = self.checkpoints.get(run_id)
        if checkpoint is None:
            raise NotPaused(f"run {run_id} is not paused", field="run_id", rule="paused")
        if checkpoint.status == "paused" or checkpoint.taken_at is not None:
            return checkpoint, False
        self.trigger_event(HitlAnswerTaken, timestamp=at, run_id=run_id)  # type: ignore[attr-defined]
        return self.checkpoints[run_id], True

    def check_paused(self, run_id: str, at: datetime) -> None:
        checkpoint = self.checkpoints.get(run_id)
        if checkpoint is None:
            raise NotPaused(f"run {run_id} is not paused", field="run_id", rule="paused")
        if checkpoint.status == "resumed":
            raise NotPaused(
                f"run {run_id} was already resumed at {checkpoint.resumed_at.isoformat()}",  # type: ignore[union-attr]
                field="run_id",
                rule="paused",
                context={"resumed_at": checkpoint.resumed_at.isoformat(), "approved": checkpoint.approved},  # type: ignore[union-attr]
            )
        if checkpoint.status == "expired" or is_due(checkpoint, at):
            raise NotPaused(f"run {run_id} expired before it was resumed", field="run_id", rule="not_expired")


def is_due(checkpoint: Checkpoint, at: datetime) -> bool:
    return checkpoint.expires_at is not None and checkpoint.expires_at <= at


class HitlRunAttributes:
    # What its events set (declared here, not on the aggregate: see domain/snapshot.py state_of).
    run_id: str
    conversation_id: UUID


class HitlRun(HitlRunAttributes, Aggregate):
    """Finds a run's conversation from its owner and run id: run ids are each user's own,
    so another user's run of the same id is another run, and says nothing of this one."""

    WRITTEN_ONCE = True  # Opened is its only event: a resume or take reads it unchecked

    class Opened(Aggregate.Created):
        run_id: str
        conversation_id: UUID

        def apply(self, run: HitlRun) -> None:
            super().apply(run)
            run.run_id = self.run_id
            run.conversation_id = self.conversation_id

    @staticmethod
    def id_for(owner: str, run_id: str) -> UUID:
        return uuid.uuid5(RUN_NAMESPACE, f"{owner}\0{run_id}")

    @staticmethod
    def shared_id_for(run_id: str) -> UUID:
        """The id runs opened before run ids were per user have (one for all users)."""
        return uuid.uuid5(RUN_NAMESPACE, run_id)

    @classmethod
    def open(cls, *, owner: str, run_id: str, conversation_id: UUID, at: datetime) -> HitlRun:
        return cls._create(
            cls.Opened,
            id=cls.id_for(owner, run_id),
            timestamp=at,
            owner=owner,
            run_id=run_id,
            conversation_id=conversation_id,
        )

    def check_reusable_on(self, conversation_id: UUID) -> None:
        """A run pauses again only on its own conversation."""
        if conversation_id != self.conversation_id:
            raise Conflict(
                f"run {self.run_id} belongs to conversation {self.conversation_id}",
                field="conversation_id",
                rule="same_conversation",
            )


def select_history(
    messages: list[dict[str, Any]], window: HistoryWindow, now: datetime, keep: set[UUID]
) -> list[dict[str, Any]]:
    """The messages a signal carries, oldest first, once each; `keep` ids are always in.

    `recent` is the rule the old orchestrators used: pinned messages plus those of the
    last `minutes`.
    """
    if window.mode == "last" and window.count is not None:
        chosen = messages[-window.count :]
    elif window.mode == "recent" and window.minutes is not None:
        since = now.timestamp() - window.minutes * 60
        chosen = [m for m in messages if m["pinned"] or m["created_at"].timestamp() >= since]
    else:
        chosen = messages
    wanted = {m["id"] for m in chosen} | keep
    seen: set[UUID] = set()
    history = []
    for message in messages:
        if message["id"] in wanted and message["id"] not in seen:
            seen.add(message["id"])
            history.append(message)
    return history
