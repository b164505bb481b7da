"""History read model: sessions, conversations (with counts and first message), messages."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from domain.conversation import Conversation
from domain.session import Session
from projections.view import Projection, View, handles

FIRST_MESSAGE_PREVIEW = 200

SessionField = Literal["name", "description", "tags", "status"]


class HistoryView(View):
    @abstractmethod
    def add_session(
        self, session_id: UUID, owner: str, name: str, description: str, kind: str, tags: list[str], at: datetime
    ) -> None:
        """A new open session with no conversations."""

    @abstractmethod
    def update_session(self, session_id: UUID, field: SessionField, value: Any, at: datetime) -> None: ...

    @abstractmethod
    def add_conversation(
        self, conversation_id: UUID, owner: str, title: str, tags: list[str], session_id: UUID | None,
        document_context: dict[str, Any] | None, embedding_provider: str | None, at: datetime,
    ) -> None:
        """A new conversation with no messages."""

    @abstractmethod
    def count_session_conversations(self, session_id: UUID, added: int) -> None: ...

    @abstractmethod
    def add_message(
        self, conversation_id: UUID, seq: int, message_id: UUID, role: str, content: str, metadata: dict[str, Any],
        pinned: bool, message_type: str, at: datetime,
    ) -> None: ...

    @abstractmethod
    def count_messages(self, conversation_id: UUID, added: int, preview: str, at: datetime) -> None:
        """`added` more messages; `preview` is the first message's unless one is kept; the
        conversation was updated at `at` unless later."""

    @abstractmethod
    def retitle_conversation(self, conversation_id: UUID, title: str, at: datetime) -> None:
        """The new title; updated at `at` unless later."""

    @abstractmethod
    def retag_conversation(self, conversation_id: UUID, tags: list[str], at: datetime) -> None: ...

    @abstractmethod
    def delete_conversation(self, conversation_id: UUID) -> None:
        """The conversation and its messages gone, and counted out of its session."""


class HistoryProjection(Projection[HistoryView]):
    name = "history"
    # 2: content sealed under its owner's key; 3: a message's content and metadata sealed
    # together; 4: a message sealed whole, as a get's reply carries it; 5: conversations
    # updated in place by each message (HOT: no index on updated_at, pages left a fifth free)
    version = 5
    weight = 3

    @handles(Session.Created)
    def session_created(self, e: Session.Created) -> None:
        self.view.add_session(e.originator_id, e.owner, e.name, e.description, e.kind, list(e.tags), e.timestamp)

    @handles(Session.Renamed)
    def session_renamed(self, e: Session.Renamed) -> None:
        self.view.update_session(e.originator_id, "name", e.name, e.timestamp)

    @handles(Session.Described)
    def session_described(self, e: Session.Described) -> None:
        self.view.update_session(e.originator_id, "description", e.description, e.timestamp)

    @handles(Session.Tagged)
    def session_tagged(self, e: Session.Tagged) -> None:
        self.view.update_session(e.originator_id, "tags", list(e.tags), e.timestamp)

    @handles(Session.Closed)
    def session_closed(self, e: Session.Closed) -> None:
        self.view.update_session(e.originator_id, "status", "closed", e.timestamp)

    @handles(Conversation.Started)
    def conversation_started(self, e: Conversation.Started) -> None:
        self.view.add_conversation(
            e.originator_id, e.owner, e.title, list(e.tags), e.session_id, e.document_context, e.embedding_provider,
            e.timestamp,
        )
        if e.session_id is not None:
            self.view.count_session_conversations(e.session_id, 1)

    @handles(Conversation.MessageAdded)
    def message_added(self, e: Conversation.MessageAdded) -> None:
        self.view.add_message(
            e.originator_id, e.originator_version, e.message_id, e.role, e.content, e.metadata, e.pinned,
            e.message_type, e.timestamp,
        )
        self.view.count_messages(e.originator_id, 1, e.content[:FIRST_MESSAGE_PREVIEW], e.timestamp)

    @handles(Conversation.Retitled)
    def retitled(self, e: Conversation.Retitled) -> None:
        self.view.retitle_conversation(e.originator_id, e.title, e.timestamp)

    @handles(Conversation.Retagged)
    def retagged(self, e: Conversation.Retagged) -> None:
        self.view.retag_conversation(e.originator_id, list(e.tags), e.timestamp)

    @handles(Conversation.Deleted)
    def deleted(self, e: Conversation.Deleted) -> None:
        self.view.delete_conversation(e.originator_id)
