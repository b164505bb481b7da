"""The wire contract of sessions: create, update, close, list, get."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from chronicle_contract.base import (
    Command,
    JsonObject,
    Offset,
    Page,
    PageCursor,
    Query,
    Reply,
    Tags,
    Text,
    Written,
    empty_list,
    empty_object,
)
from chronicle_contract.values import MAX_SESSION_DESCRIPTION, MAX_SESSION_NAME, SessionKind


class SessionCreated(Written):
    session_id: UUID


class SessionView(Reply):
    id: UUID
    name: str
    description: str
    kind: str
    tags: list[str]
    status: Literal["open", "closed"]
    conversation_count: int
    artifact_count: int = 0
    total_tokens: int = 0
    created_at: datetime
    updated_at: datetime


class CreateSession(Command[SessionCreated], action="session.create"):
    name: Annotated[str, Text(MAX_SESSION_NAME)]
    description: Annotated[str, Text(MAX_SESSION_DESCRIPTION, may_be_blank=True)] = ""
    kind: SessionKind = "general"
    tags: Tags = empty_list()
    metadata: JsonObject = empty_object()


class UpdateSession(Command[Written], action="session.update"):
    session_id: UUID
    name: Annotated[str, Text(MAX_SESSION_NAME)] | None = None
    description: Annotated[str, Text(MAX_SESSION_DESCRIPTION, may_be_blank=True)] | None = None
    tags: Tags | None = None


class CloseSession(Command[Written], action="session.close"):
    session_id: UUID


class ListSessions(Query[Page[SessionView]], action="sessions.list"):
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None
    kind: Annotated[str, Text(50)] | None = None


class GetSession(Query[SessionView], action="sessions.get"):
    session_id: UUID
