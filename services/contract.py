"""The wire contract: request and reply models shared by the service and ChronicleClient.

Requests refuse unknown fields; limits come from the domain so the edge and the
aggregates enforce the same rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from domain.base import MAX_TAG_LENGTH, MAX_TAGS
from domain.conversation import MAX_CONTENT, MAX_EMBEDDING_PROVIDER, MAX_MESSAGE_TYPE, MAX_TITLE
from domain.session import MAX_SESSION_DESCRIPTION, MAX_SESSION_NAME, SESSION_KINDS

Tag = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TAG_LENGTH, pattern=r"\S")]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Title = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TITLE, pattern=r"\S")]
Content = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT, pattern=r"\S")]
Role = Literal["user", "agent", "system"]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Command(Request):
    def aggregate_ids(self) -> list[UUID]:
        """Aggregates the handler will load, so a batch can fetch them in one query."""
        return [v for k, v in self if isinstance(v, UUID) and k.endswith("_id")]


class Query(Request):
    min_position: int | None = Field(
        default=None, ge=0, description="wait until read models include this notification id"
    )


# --- sessions -----------------------------------------------------------------------------

class CreateSession(Command):
    name: Annotated[str, StringConstraints(min_length=1, max_length=MAX_SESSION_NAME, pattern=r"\S")]
    description: Annotated[str, Field(max_length=MAX_SESSION_DESCRIPTION)] = ""
    kind: Literal[SESSION_KINDS] = "general"  # type: ignore[valid-type]
    tags: Tags = []
    metadata: dict[str, Any] = {}


class UpdateSession(Command):
    session_id: UUID
    name: Annotated[str, StringConstraints(min_length=1, max_length=MAX_SESSION_NAME, pattern=r"\S")] | None = None
    description: Annotated[str, Field(max_length=MAX_SESSION_DESCRIPTION)] | None = None
    tags: Tags | None = None


class CloseSession(Command):
    session_id: UUID


class ListSessions(Query):
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)
    kind: str | None = None


class GetSession(Query):
    session_id: UUID


# --- conversations ------------------------------------------------------------------------

class StartConversation(Command):
    title: Title | None = None
    tags: Tags = []
    session_id: UUID | None = None
    document_context: dict[str, Any] | None = None
    embedding_provider: Annotated[str, Field(min_length=1, max_length=MAX_EMBEDDING_PROVIDER)] | None = None


class AddMessage(Command):
    conversation_id: UUID
    role: Role
    content: Content
    metadata: dict[str, Any] = {}
    pinned: bool = False
    message_type: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_TYPE)] = "text"


class UpdateConversation(Command):
    conversation_id: UUID
    title: Title | None = None
    tags: Tags | None = None


class DeleteConversation(Command):
    conversation_id: UUID


class ListConversations(Query):
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)
    tags: Tags = Field(default=[], description="only conversations carrying every one of these tags")
    session_id: UUID | None = None
    sort_by: Literal["created_at", "updated_at", "title"] = "updated_at"
    order: Literal["asc", "desc"] = "desc"


class GetConversation(Query):
    conversation_id: UUID


class SearchConversations(Query):
    q: Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"\S")]
    limit: int = Field(default=20, ge=1, le=100)


class ConversationStatsQuery(Query):
    top_tags: int = Field(default=10, ge=1, le=100)


class ExportConversation(Query):
    conversation_id: UUID
    format: Literal["json", "markdown"] = "json"


# --- replies ------------------------------------------------------------------------------

class Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Written(Reply):
    """What every command answers: the ids it made and the log position of its last event."""

    position: int | None = None


class SessionCreated(Written):
    session_id: UUID


class ConversationStarted(Written):
    conversation_id: UUID
    title: str


class MessageAdded(Written):
    conversation_id: UUID
    message_id: UUID
    title: str


class Session(Reply):
    id: UUID
    name: str
    description: str
    kind: str
    tags: list[str]
    status: Literal["open", "closed"]
    conversation_count: int
    created_at: datetime
    updated_at: datetime


class ConversationSummary(Reply):
    id: UUID
    title: str
    tags: list[str]
    session_id: UUID | None
    message_count: int
    first_message: str | None
    created_at: datetime
    updated_at: datetime


class Message(Reply):
    id: UUID
    role: Role
    content: str
    metadata: dict[str, Any]
    pinned: bool
    message_type: str
    created_at: datetime


class Conversation(ConversationSummary):
    document_context: dict[str, Any] | None
    embedding_provider: str | None
    messages: list[Message]


T = TypeVar("T")


class Page(Reply, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class SearchHit(Reply):
    conversation_id: UUID
    title: str
    message_id: UUID | None
    snippet: str
    created_at: datetime
    rank: int


class SearchResults(Reply):
    items: list[SearchHit]
    query: str


class TagCount(Reply):
    tag: str
    count: int


class ConversationStats(Reply):
    total_conversations: int
    total_messages: int
    average_messages: float
    first_conversation_at: datetime | None
    last_conversation_at: datetime | None
    top_tags: list[TagCount]


class Export(Reply):
    format: Literal["json", "markdown"]
    content: str
