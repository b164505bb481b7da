"""Command handlers of conversations: start, add a message, update, delete.

Each handler runs inside the writer thread's batch; it never saves (the bus does).
"""

from __future__ import annotations

from uuid import UUID

from chronicle_contract.base import Written
from chronicle_contract.conversations import (
    AddMessage,
    ConversationStarted,
    DeleteConversation,
    MessageAdded,
    StartConversation,
    UpdateConversation,
)
from chronicle_contract.sessions import CreateSession

from domain.base import Aggregate
from domain.conversation import Conversation
from domain.session import Session
from services.runtime.sessions import open_session
from services.runtime.unit_of_work import UnitOfWork


class ConversationWritten(Written):
    """What conversation.update and conversation.delete send: the contract promises their
    position; the conversation's id (and, on update, its title) has always come with it."""

    conversation_id: UUID
    title: str | None = None


def start_conversation(cmd: StartConversation, uow: UnitOfWork) -> ConversationStarted:
    if cmd.session_id is not None:
        chat_session(cmd.session_id, uow)
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
    return ConversationStarted(conversation_id=conversation.id, title=conversation.title)


def chat_session(session_id: UUID, uow: UnitOfWork) -> Session:
    """The caller's open session with this id, made for them when no aggregate has it yet:
    seed 001's front end makes its own session ids. Any other holder of the id (another
    user's session, or not a session at all) is `not_found`, as a missing one would be."""
    existing = uow.find(Aggregate, session_id)
    if existing is None:
        return open_session(CreateSession(name="Chat", kind="chat"), uow, session_id=session_id)
    session = uow.get(Session, session_id)
    session.check_open()
    return session


def add_message(cmd: AddMessage, uow: UnitOfWork) -> MessageAdded:
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
    return MessageAdded(conversation_id=conversation.id, message_id=message_id, title=conversation.title)


def update_conversation(cmd: UpdateConversation, uow: UnitOfWork) -> ConversationWritten:
    conversation = uow.get(Conversation, cmd.conversation_id)
    conversation.update(at=uow.now, title=cmd.title, tags=cmd.tags)
    return ConversationWritten(conversation_id=conversation.id, title=conversation.title)


def delete_conversation(cmd: DeleteConversation, uow: UnitOfWork) -> ConversationWritten:
    conversation = uow.get(Conversation, cmd.conversation_id)
    conversation.delete(at=uow.now)
    return ConversationWritten(conversation_id=conversation.id)
