"""Command handlers of human in the loop: pause a run, resume it, expire it, take its answer.

Each handler runs inside the writer thread's batch; it never saves (the bus does).
"""

from __future__ import annotations

from datetime import timedelta

from chronicle_contract.hitl import (
    AnswerTaken,
    ExpireRun,
    PauseRun,
    RecordTaken,
    ResumeRun,
    RunExpired,
    RunPaused,
    RunResumed,
)

from domain.conversation import Conversation
from domain.errors import NotFound
from domain.hitl import HistoryWindow, HitlRun
from services.runtime.unit_of_work import UnitOfWork


def pause_run(cmd: PauseRun, uow: UnitOfWork) -> RunPaused:
    conversation = uow.get(Conversation, cmd.conversation_id)
    run_id = cmd.run_id or uow.new_id().hex
    # A run pausing this conversation again is among its checkpoints (maybe under the id
    # runs had when ids were shared); any other run id is almost always new, so the store
    # is not asked first (see find_unless_new).
    if run_id in conversation.checkpoints:
        run = find_run(run_id, uow)
    else:
        run = uow.find_unless_new(HitlRun, HitlRun.id_for(uow.user_id, run_id))
    if run is not None:
        run.check_reusable_on(conversation.id)
    prompt_message_id = uow.new_id()
    conversation.pause_for_human(
        run_id=run_id,
        at=uow.now,
        step=cmd.step,
        checkpoint_type=cmd.checkpoint_type,
        prompt=cmd.prompt,
        prompt_message_id=prompt_message_id,
        data=cmd.data,
        conversation_mode=cmd.conversation_mode,
        expires_at=uow.now + timedelta(seconds=cmd.expires_in) if cmd.expires_in else None,
        history=HistoryWindow.model_validate(cmd.history.model_dump()) if cmd.history else HistoryWindow(),
    )
    if run is None:
        uow.add(HitlRun.open(owner=uow.user_id, run_id=run_id, conversation_id=conversation.id, at=uow.now))
    return RunPaused(run_id=run_id, conversation_id=conversation.id, prompt_message_id=prompt_message_id)


def find_run(run_id: str, uow: UnitOfWork) -> HitlRun | None:
    """The caller's run of that id: under its per-user id, or one opened before ids were
    per user (then under the shared id, and only if it is the caller's)."""
    run = uow.find(HitlRun, HitlRun.id_for(uow.user_id, run_id))
    if run is None:
        run = uow.find(HitlRun, HitlRun.shared_id_for(run_id))
    if run is None or run.owner != uow.user_id or run.is_gone():
        return None
    return run


def run_conversation(run_id: str, uow: UnitOfWork) -> Conversation:
    run = find_run(run_id, uow)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return uow.get(Conversation, run.conversation_id)


def resume_run(cmd: ResumeRun, uow: UnitOfWork) -> RunResumed:
    conversation = run_conversation(cmd.run_id, uow)
    feedback_message_id = uow.new_id()
    conversation.resume_from_human(
        run_id=cmd.run_id,
        at=uow.now,
        approved=cmd.approved,
        edits=cmd.edits,
        feedback=cmd.feedback,
        feedback_message_id=feedback_message_id,
    )
    return RunResumed(
        run_id=cmd.run_id,
        conversation_id=conversation.id,
        feedback_message_id=feedback_message_id if cmd.feedback is not None else None,
    )


def expire_run(cmd: ExpireRun, uow: UnitOfWork) -> RunExpired:
    conversation = run_conversation(cmd.run_id, uow)
    expired = conversation.expire_checkpoint(run_id=cmd.run_id, at=uow.now)
    return RunExpired(run_id=cmd.run_id, expired=expired)


def record_taken(cmd: RecordTaken, uow: UnitOfWork) -> AnswerTaken:
    conversation = run_conversation(cmd.run_id, uow)
    checkpoint, taken_now = conversation.take_answer(run_id=cmd.run_id, at=uow.now)
    status = checkpoint.status if taken_now or checkpoint.status == "paused" else "taken"
    return AnswerTaken(run_id=cmd.run_id, conversation_id=conversation.id, status=status)
