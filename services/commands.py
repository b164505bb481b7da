"""Command handlers: load, call one domain method, return plain data.

Each handler runs inside the writer thread's batch; it never saves (the bus does).
"""

from __future__ import annotations

from typing import Any

from domain.conversation import Conversation
from domain.session import Session
from services import contract as c
from services.unit_of_work import UnitOfWork


def create_session(cmd: c.CreateSession, uow: UnitOfWork) -> dict[str, Any]:
    session = uow.add(
        Session.create(
            id=uow.new_id(),
            owner=uow.user_id,
            at=uow.now,
            name=cmd.name,
            description=cmd.description,
            kind=cmd.kind,
            tags=cmd.tags,
            metadata=cmd.metadata,
        )
    )
    return {"session_id": str(session.id)}


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


# subject suffix -> (request model, handler)
COMMANDS: dict[str, tuple[type[c.Command], Any]] = {
    "session.create": (c.CreateSession, create_session),
    "session.update": (c.UpdateSession, update_session),
    "session.close": (c.CloseSession, close_session),
    "conversation.start": (c.StartConversation, start_conversation),
    "conversation.add_message": (c.AddMessage, add_message),
    "conversation.update": (c.UpdateConversation, update_conversation),
    "conversation.delete": (c.DeleteConversation, delete_conversation),
}
