"""The wire contract of conversations: start, messages, update, delete, and their queries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from chronicle_contract.base import (
    Command,
    Content,
    JsonObject,
    Offset,
    Page,
    PageCursor,
    Query,
    Reply,
    Role,
    Tags,
    Text,
    Title,
    Written,
    empty_list,
    empty_object,
)
from chronicle_contract.values import MAX_MESSAGE_TYPE


class ConversationStarted(Written):
    conversation_id: UUID
    title: str


class MessageAdded(Written):
    conversation_id: UUID
    message_id: UUID
    title: str


class ConversationSummaryView(Reply):
    id: UUID
    title: str
    tags: list[str]
    session_id: UUID | None
    message_count: int
    first_message: str | None
    created_at: datetime
    updated_at: datetime


class MessageView(Reply):
    id: UUID
    role: Role
    content: str
    metadata: dict[str, Any]
    pinned: bool
    message_type: str
    created_at: datetime


class ConversationView(ConversationSummaryView):
    document_context: dict[str, Any] | None
    embedding_provider: str | None
    messages: list[MessageView]  # one page, oldest first
    next_cursor: str | None = None  # the next page's (older ones when the order is newest first); None: no more


class SearchHit(Reply):
    conversation_id: UUID
    title: str
    message_id: UUID | None
    snippet: str
    created_at: datetime
    rank: int
    matched_by: list[Literal["text", "semantic"]] = Field(
        description="which half of the search found it: the words (full text), their meaning (semantic), or both"
    )


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
    content: str  # one part: a JSON document or Markdown of one page of messages
    next_cursor: str | None = None  # the next part's; None: this is the last


# Seed 001's providers (its `embedding_provider` column defaults to 'llama').
EmbeddingProvider = Literal["llama", "gemini", "grok"]


class StartConversation(Command[ConversationStarted], action="conversation.start"):
    title: Title | None = None
    tags: Tags = empty_list()
    session_id: UUID | None = None
    document_context: JsonObject | None = None
    embedding_provider: EmbeddingProvider | None = None


class AddMessage(Command[MessageAdded], action="conversation.add_message"):
    conversation_id: UUID
    role: Role
    content: Content
    metadata: JsonObject = empty_object()
    pinned: bool = False
    message_type: Annotated[str, Text(MAX_MESSAGE_TYPE)] = "text"


class UpdateConversation(Command[Written], action="conversation.update"):
    conversation_id: UUID
    title: Title | None = None
    tags: Tags | None = None


class DeleteConversation(Command[Written], action="conversation.delete"):
    conversation_id: UUID


class ListConversations(Query[Page[ConversationSummaryView]], action="conversations.list"):
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None
    tags: Tags = empty_list(description="only conversations carrying every one of these tags")
    session_id: UUID | None = None
    sort_by: Literal["created_at", "updated_at", "title"] = "created_at"  # (seed 001's default)
    order: Literal["asc", "desc"] = "desc"


MAX_PAGE_MESSAGES = 1000
# What a page's messages may hold (content and metadata), well under a NATS message.
PAGE_BYTES = 512 * 1024
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]


class MessagePage(BaseModel):
    """Which messages a page holds: `limit` of them (fewer when they pass PAGE_BYTES), from
    the oldest or the newest, continuing from `cursor` (a previous page's next_cursor)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limit: int = Field(default=MAX_PAGE_MESSAGES, ge=1, le=MAX_PAGE_MESSAGES)
    order: Literal["oldest", "newest"] = "oldest"
    cursor: Cursor | None = None


class GetConversation(Query[ConversationView], action="conversations.get"):
    conversation_id: UUID
    messages: MessagePage = MessagePage()


class SearchConversations(Query[SearchResults], action="conversations.search"):
    q: Annotated[str, Text(500)]
    limit: int = Field(default=20, ge=1, le=100)


class ConversationStatsQuery(Query[ConversationStats], action="conversations.stats"):
    top_tags: int = Field(default=10, ge=1, le=100)


class ExportConversation(Query[Export], action="conversations.export"):
    conversation_id: UUID
    format: Literal["json", "markdown"] = "json"
    cursor: Cursor | None = Field(default=None, description="the next part of a large export (next_cursor)")
