"""Command handlers: load, call one domain method, return plain data.

Each handler runs inside the writer thread's batch; it never saves (the bus does).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from domain.audit import AuditTrail
from domain.conversation import Conversation
from domain.erasure import DataSubject
from domain.errors import NotFound
from domain.hitl import HistoryWindow, HitlRun
from domain.session import Session
from services import commands_artifacts, commands_jobs, commands_optimization, digests
from services import contract as c
from services import contract_audit as a
from services.commands_sessions import open_session
from services.unit_of_work import UnitOfWork


def create_session(cmd: c.CreateSession, uow: UnitOfWork) -> dict[str, Any]:
    return {"session_id": str(open_session(cmd, uow).id)}


def update_session(cmd: c.UpdateSession, uow: UnitOfWork) -> dict[str, Any]:
    session = uow.get(Session, cmd.session_id)
    session.update(at=uow.now, name=cmd.name, description=cmd.description, tags=cmd.tags)
    return {"session_id": str(session.id)}


def close_session(cmd: c.CloseSession, uow: UnitOfWork) -> dict[str, Any]:
    session = uow.get(Session, cmd.session_id)
    session.close(at=uow.now)
    return {"session_id": str(session.id)}


def start_conversation(cmd: c.StartConversation, uow: UnitOfWork) -> dict[str, Any]:
    if cmd.session_id is not None:
        uow.get(Session, cmd.session_id).check_open()
    conversation = uow.add(
        Conversation.start(
            id=uow.new_id(),
            owner=uow.user_id,
            at=uow.now,
            title=cmd.title,
            tags=cmd.tags,
            session_id=cmd.session_id,
            document_context=cmd.document_context,
            embedding_provider=cmd.embedding_provider,
        )
    )
    return {"conversation_id": str(conversation.id), "title": conversation.title}


def add_message(cmd: c.AddMessage, uow: UnitOfWork) -> dict[str, Any]:
    conversation = uow.get(Conversation, cmd.conversation_id)
    message_id = uow.new_id()
    conversation.add_message(
        message_id=message_id,
        at=uow.now,
        role=cmd.role,
        content=cmd.content,
        metadata=cmd.metadata,
        pinned=cmd.pinned,
        message_type=cmd.message_type,
    )
    return {"conversation_id": str(conversation.id), "message_id": str(message_id), "title": conversation.title}


def update_conversation(cmd: c.UpdateConversation, uow: UnitOfWork) -> dict[str, Any]:
    conversation = uow.get(Conversation, cmd.conversation_id)
    conversation.update(at=uow.now, title=cmd.title, tags=cmd.tags)
    return {"conversation_id": str(conversation.id), "title": conversation.title}


def delete_conversation(cmd: c.DeleteConversation, uow: UnitOfWork) -> dict[str, Any]:
    conversation = uow.get(Conversation, cmd.conversation_id)
    conversation.delete(at=uow.now)
    return {"conversation_id": str(conversation.id)}


def pause_run(cmd: c.PauseRun, uow: UnitOfWork) -> dict[str, Any]:
    conversation = uow.get(Conversation, cmd.conversation_id)
    run_id = cmd.run_id or uow.new_id().hex
    # A run pausing this conversation again is among its checkpoints; any other run id is
    # almost always new, so the store is not asked first (see find_unless_new).
    if run_id in conversation.checkpoints:
        run = uow.find(HitlRun, HitlRun.id_for(run_id))
    else:
        run = uow.find_unless_new(HitlRun, HitlRun.id_for(run_id))
    if run is not None:
        run.check_reusable_by(uow.user_id, conversation.id)
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
    return {"run_id": run_id, "conversation_id": str(conversation.id), "prompt_message_id": str(prompt_message_id)}


def run_conversation(run_id: str, uow: UnitOfWork) -> Conversation:
    try:
        run = uow.get(HitlRun, HitlRun.id_for(run_id))
    except NotFound:
        raise NotFound(f"run {run_id} not found") from None
    return uow.get(Conversation, run.conversation_id)


def resume_run(cmd: c.ResumeRun, uow: UnitOfWork) -> dict[str, Any]:
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
    return {
        "run_id": cmd.run_id,
        "conversation_id": str(conversation.id),
        "feedback_message_id": str(feedback_message_id) if cmd.feedback is not None else None,
    }


def expire_run(cmd: c.ExpireRun, uow: UnitOfWork) -> dict[str, Any]:
    conversation = run_conversation(cmd.run_id, uow)
    expired = conversation.expire_checkpoint(run_id=cmd.run_id, at=uow.now)
    return {"run_id": cmd.run_id, "expired": expired}


def record_read(cmd: c.RecordRead, uow: UnitOfWork) -> dict[str, Any]:
    trail = uow.find(AuditTrail, AuditTrail.id_for(uow.user_id)) or uow.add(
        AuditTrail.open(auditor=uow.user_id, at=uow.now)
    )
    trail.record_read(at=uow.now, **cmd.model_dump())
    return {"trail_id": str(trail.id)}


def erase_user(cmd: c.EraseUser, uow: UnitOfWork) -> dict[str, Any]:
    subject = uow.find(DataSubject, DataSubject.id_for(cmd.user_id)) or uow.add(
        DataSubject.register(user_id=cmd.user_id, at=uow.now)
    )
    erased = subject.erase(at=uow.now, requested_by=uow.user_id)
    uow.forget_owner(cmd.user_id)  # cached aggregates hold the user's decrypted content
    return {"user_id": cmd.user_id, "erased": erased}


# subject suffix -> (request model, handler)
COMMANDS: dict[str, tuple[type[c.Command], Any]] = {
    "session.create": (c.CreateSession, create_session),
    "session.update": (c.UpdateSession, update_session),
    "session.close": (c.CloseSession, close_session),
    "conversation.start": (c.StartConversation, start_conversation),
    "conversation.add_message": (c.AddMessage, add_message),
    "conversation.update": (c.UpdateConversation, update_conversation),
    "conversation.delete": (c.DeleteConversation, delete_conversation),
    "hitl.pause": (c.PauseRun, pause_run),
    "hitl.resume": (c.ResumeRun, resume_run),
    **commands_optimization.COMMANDS,
    **commands_artifacts.COMMANDS,
}

# Commands the service issues itself; not reachable over NATS.
INTERNAL_COMMANDS: dict[str, tuple[type[c.Command], Any]] = {
    "hitl.expire": (c.ExpireRun, expire_run),
    "audit.record_read": (c.RecordRead, record_read),
    "user.erase": (c.EraseUser, erase_user),
    "audit.publish_digest": (a.PublishDigest, digests.publish_digest),
    **commands_artifacts.INTERNAL_COMMANDS,
    **commands_jobs.INTERNAL_COMMANDS,
}
