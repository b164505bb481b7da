"""The Conversation aggregate: a chat thread, its messages, and its HITL checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from domain.base import Aggregate, check_text, normalise_tags
from domain.hitl import Checkpoint, HumanInTheLoop
from domain.snapshot import state_of

MAX_TITLE = 500
MAX_CONTENT = 10_000
DERIVED_TITLE_MAX = 50
MAX_MESSAGE_TYPE = 50
MAX_EMBEDDING_PROVIDER = 200

Role = Literal["user", "agent", "system"]


def derive_title(content: str) -> str:
    """A title from a first message: whitespace folded, cut at a word, at most 50 chars."""
    text = " ".join(content.split())
    if len(text) <= DERIVED_TITLE_MAX:
        return text
    cut = text[: DERIVED_TITLE_MAX - 1]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + "…"


class ConversationAttributes:
    """What a snapshot keeps (domain/snapshot.py): every attribute the events set."""

    title: str
    title_derived: bool
    tags: tuple[str, ...]
    session_id: UUID | None
    message_count: int
    deleted: bool
    checkpoints: dict[str, Checkpoint]


class Conversation(ConversationAttributes, HumanInTheLoop, Aggregate):
    """State: owner, title, title_derived, tags, session_id, message_count, deleted, checkpoints.

    (Plain attributes set by the events' apply methods: class-level annotations would
    make eventsourcing generate an __init__ that expects them.)
    """

    State = state_of(ConversationAttributes)

    class Started(Aggregate.Created):
        title: str
        tags: tuple[str, ...]
        session_id: UUID | None
        document_context: dict[str, Any] | None
        embedding_provider: str | None

        def apply(self, conversation: Conversation) -> None:
            super().apply(conversation)
            conversation.title = self.title
            conversation.title_derived = not self.title
            conversation.tags = self.tags
            conversation.session_id = self.session_id
            conversation.message_count = 0
            conversation.deleted = False
            conversation.checkpoints = {}

    class MessageAdded(Aggregate.Event):
        message_id: UUID
        role: Role
        content: str
        metadata: dict[str, Any]
        pinned: bool
        message_type: str

        def apply(self, conversation: Conversation) -> None:
            conversation.message_count += 1

    class Retitled(Aggregate.Event):
        title: str
        derived: bool

        def apply(self, conversation: Conversation) -> None:
            conversation.title = self.title
            conversation.title_derived = self.derived

    class Retagged(Aggregate.Event):
        tags: tuple[str, ...]

        def apply(self, conversation: Conversation) -> None:
            conversation.tags = self.tags

    class Deleted(Aggregate.Event):
        def apply(self, conversation: Conversation) -> None:
            conversation.deleted = True

    @classmethod
    def start(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        title: str | None = None,
        tags: list[str] | tuple[str, ...] = (),
        session_id: UUID | None = None,
        document_context: dict[str, Any] | None = None,
        embedding_provider: str | None = None,
    ) -> Conversation:
        if title is not None:
            check_text("title", title, max_length=MAX_TITLE)
        if embedding_provider is not None:
            check_text("embedding_provider", embedding_provider, max_length=MAX_EMBEDDING_PROVIDER)
        return cls._create(
            cls.Started,
            id=id,
            timestamp=at,
            owner=owner,
            title=title or "",
            tags=normalise_tags("tags", tags),
            session_id=session_id,
            document_context=document_context,
            embedding_provider=embedding_provider,
        )

    def add_message(
        self,
        *,
        message_id: UUID,
        at: datetime,
        role: Role,
        content: str,
        metadata: dict[str, Any] | None = None,
        pinned: bool = False,
        message_type: str = "text",
    ) -> None:
        check_text("content", content, max_length=MAX_CONTENT)
        check_text("message_type", message_type, max_length=MAX_MESSAGE_TYPE)
        self.trigger_event(
            self.MessageAdded,
            timestamp=at,
            message_id=message_id,
            role=role,
            content=content,
            metadata=metadata or {},
            pinned=pinned,
            message_type=message_type,
        )
        if self.title_derived and not self.title and role == "user":
            self.trigger_event(self.Retitled, timestamp=at, title=derive_title(content), derived=True)

    def update(
        self,
        *,
        at: datetime,
        title: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        if title is not None:
            check_text("title", title, max_length=MAX_TITLE)
        new_tags = normalise_tags("tags", tags) if tags is not None else None
        if title is not None and (title != self.title or self.title_derived):
            self.trigger_event(self.Retitled, timestamp=at, title=title, derived=False)
        if new_tags is not None and new_tags != self.tags:
            self.trigger_event(self.Retagged, timestamp=at, tags=new_tags)

    def delete(self, *, at: datetime) -> None:
        self.trigger_event(self.Deleted, timestamp=at)

    def is_gone(self) -> bool:
        return self.deleted
