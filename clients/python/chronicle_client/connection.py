"""ChronicleClient: a typed async client for Chronicle's NATS contract.

The client remembers the log position of its last write and passes it on its next
queries, so a caller always reads its own writes without sleeping or polling.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

import orjson
from chronicle_contract.base import Page, Written
from chronicle_contract.conversations import (
    AddMessage,
    ConversationStarted,
    ConversationStats,
    ConversationStatsQuery,
    ConversationSummaryView,
    ConversationView,
    DeleteConversation,
    Export,
    ExportConversation,
    GetConversation,
    ListConversations,
    MessageAdded,
    SearchConversations,
    SearchResults,
    StartConversation,
    UpdateConversation,
)
from chronicle_contract.errors import ChronicleError
from chronicle_contract.sessions import (
    CloseSession,
    CreateSession,
    GetSession,
    ListSessions,
    SessionCreated,
    SessionView,
    UpdateSession,
)
from nats.aio.client import Client as NATS

from chronicle_client.artifacts import Artifacts
from chronicle_client.audit import AuditReader
from chronicle_client.events import Events
from chronicle_client.hitl import Hitl
from chronicle_client.jobs import Jobs
from chronicle_client.optimizations import Optimizations, OptimizationState
from chronicle_client.transport import Transport, build

__all__ = ["ChronicleClient", "ChronicleError"]

class ChronicleClient(Transport):
    """The typed client: one side per capability (`client.conversations.add_message(...)`)."""

    def __init__(self, nc: NATS, token: str, *, prefix: str = "chronicle", timeout: float = 10.0):
        super().__init__(nc, token, prefix=prefix, timeout=timeout)
        self.sessions = Sessions(self)
        self.conversations = Conversations(self)
        self.hitl = Hitl(self)
        self.optimizations = Optimizations(self)
        self.audit = AuditReader(self)
        self.artifacts = Artifacts(self)
        self.jobs = Jobs(self)
        self.events = Events(self)

    def optimization(self, optimization_id: UUID | None = None, **fields: Any) -> OptimizationState:
        """An optimizer's handle: a new optimization (`fields`: name, optimizer, direction,
        project, dataset, ...; started on first use), or an existing one by id."""
        return OptimizationState(self, optimization_id, **fields)


class Sessions:
    def __init__(self, client: Transport):
        self._client = client

    async def create(self, name: str, *, idempotency_key: str | None = None, **fields: Any) -> SessionCreated:
        return await self._client.command(build(CreateSession, name=name, **fields), idempotency_key)

    async def update(self, session_id: UUID, *, idempotency_key: str | None = None, **fields: Any) -> Written:
        return await self._client.command(build(UpdateSession, session_id=session_id, **fields), idempotency_key)

    async def close(self, session_id: UUID, *, idempotency_key: str | None = None) -> Written:
        return await self._client.command(build(CloseSession, session_id=session_id), idempotency_key)

    async def list(self, **fields: Any) -> Page[SessionView]:
        return await self._client.query(build(ListSessions, **fields))

    async def get(self, session_id: UUID) -> SessionView:
        return await self._client.query(build(GetSession, session_id=session_id))


class Conversations:
    def __init__(self, client: Transport):
        self._client = client

    async def start(self, *, idempotency_key: str | None = None, **fields: Any) -> ConversationStarted:
        return await self._client.command(build(StartConversation, **fields), idempotency_key)

    async def add_message(
        self,
        conversation_id: UUID,
        role: Literal["user", "agent", "system"],
        content: str,
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> MessageAdded:
        request = build(AddMessage, conversation_id=conversation_id, role=role, content=content, **fields)
        return await self._client.command(request, idempotency_key)

    async def update(self, conversation_id: UUID, *, idempotency_key: str | None = None, **fields: Any) -> Written:
        return await self._client.command(build(UpdateConversation, conversation_id=conversation_id, **fields), idempotency_key)

    async def delete(self, conversation_id: UUID, *, idempotency_key: str | None = None) -> Written:
        return await self._client.command(build(DeleteConversation, conversation_id=conversation_id), idempotency_key)

    async def list(self, **fields: Any) -> Page[ConversationSummaryView]:
        return await self._client.query(build(ListConversations, **fields))

    async def get(self, conversation_id: UUID) -> ConversationView:
        """The conversation with all its messages, read a page at a time."""
        first = await self.get_page(conversation_id)
        messages, cursor = list(first.messages), first.next_cursor
        while cursor is not None:
            page = await self.get_page(conversation_id, cursor=cursor)
            messages += page.messages
            cursor = page.next_cursor
        return first.model_copy(update={"messages": messages, "next_cursor": None})

    async def get_page(self, conversation_id: UUID, **messages: Any) -> ConversationView:
        """The conversation with one page of messages; `messages`: limit (up to 1,000),
        order ("oldest" | "newest"), cursor (a page's next_cursor)."""
        return await self._client.query(build(GetConversation, conversation_id=conversation_id, messages=messages))

    async def search(self, q: str, **fields: Any) -> SearchResults:
        return await self._client.query(build(SearchConversations, q=q, **fields))

    async def stats(self, **fields: Any) -> ConversationStats:
        return await self._client.query(build(ConversationStatsQuery, **fields))

    async def export(
        self, conversation_id: UUID, format: Literal["json", "markdown"] = "json", *, min_position: int | None = None
    ) -> Export:
        """The whole export, its parts joined (a JSON document's messages, Markdown's text);
        `min_position`: read from at least this log position (this export only)."""
        wait = {} if min_position is None else {"min_position": min_position}
        request = build(ExportConversation, conversation_id=conversation_id, format=format, **wait)
        parts = [await self._client.query(request)]
        while parts[-1].next_cursor is not None:
            parts.append(await self._client.query(request.model_copy(update={"cursor": parts[-1].next_cursor})))
        if len(parts) == 1:
            return parts[0]
        if format == "markdown":
            content = "\n".join(part.content for part in parts)
        else:
            documents = [orjson.loads(part.content) for part in parts]
            documents[0]["messages"] = [m for document in documents for m in document["messages"]]
            content = orjson.dumps(documents[0], option=orjson.OPT_INDENT_2).decode()
        return Export(format=format, content=content)
