"""The wire contract: request and reply models shared by the service and ChronicleClient.

Requests refuse unknown fields; limits come from the domain so the edge and the
aggregates enforce the same rules.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from domain.base import MAX_TAG_LENGTH, MAX_TAGS, SYSTEM_OWNER
from domain.conversation import MAX_CONTENT, MAX_EMBEDDING_PROVIDER, MAX_MESSAGE_TYPE, MAX_TITLE
from domain.hitl import MAX_CHECKPOINT_TYPE, MAX_PROMPT, MAX_STEP, HistoryWindow
from domain.session import MAX_SESSION_DESCRIPTION, MAX_SESSION_NAME, SESSION_KINDS


def no_nul(text: str) -> str:
    # Postgres text and jsonb cannot hold NUL; refusing it here keeps it out of the log.
    if "\x00" in text:
        raise ValueError("must not contain NUL characters")
    return text


def text(max_length: int, *, may_be_blank: bool = False) -> Any:
    """A request's text field: length limits, not blank (unless allowed), no NUL."""
    constraints = StringConstraints(
        min_length=0 if may_be_blank else 1, max_length=max_length, pattern=None if may_be_blank else r"\S"
    )
    return Annotated[str, constraints, AfterValidator(no_nul)]


Tag = text(MAX_TAG_LENGTH)
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Title = text(MAX_TITLE)
Content = text(MAX_CONTENT)
Role = Literal["user", "agent", "system"]


def check_json_values(value: Any, path: str = "") -> Any:
    """Refuse what storing and reading back would change or refuse: integers beyond 64
    bits, NaN, infinity, NUL characters."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"text at {path or 'top level'} must not contain NUL characters")
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise ValueError(f"integer at {path or 'top level'} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"number at {path or 'top level'} must be finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise ValueError(f"keys at {path or 'top level'} must not contain NUL characters")
            check_json_values(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_values(item, f"{path}[{index}]")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(check_json_values)]


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
    name: text(MAX_SESSION_NAME)  # type: ignore[valid-type]
    description: text(MAX_SESSION_DESCRIPTION, may_be_blank=True) = ""  # type: ignore[valid-type]
    kind: Literal[SESSION_KINDS] = "general"  # type: ignore[valid-type]
    tags: Tags = []
    metadata: JsonObject = {}


class UpdateSession(Command):
    session_id: UUID
    name: text(MAX_SESSION_NAME) | None = None  # type: ignore[valid-type]
    description: text(MAX_SESSION_DESCRIPTION, may_be_blank=True) | None = None  # type: ignore[valid-type]
    tags: Tags | None = None


class CloseSession(Command):
    session_id: UUID


class ListSessions(Query):
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)
    kind: text(50) | None = None  # type: ignore[valid-type]


class GetSession(Query):
    session_id: UUID


# --- conversations ------------------------------------------------------------------------

class StartConversation(Command):
    title: Title | None = None
    tags: Tags = []
    session_id: UUID | None = None
    document_context: JsonObject | None = None
    embedding_provider: text(MAX_EMBEDDING_PROVIDER) | None = None  # type: ignore[valid-type]


class AddMessage(Command):
    conversation_id: UUID
    role: Role
    content: Content
    metadata: JsonObject = {}
    pinned: bool = False
    message_type: text(MAX_MESSAGE_TYPE) = "text"  # type: ignore[valid-type]


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
    q: text(500)  # type: ignore[valid-type]
    limit: int = Field(default=20, ge=1, le=100)


class ConversationStatsQuery(Query):
    top_tags: int = Field(default=10, ge=1, le=100)


class ExportConversation(Query):
    conversation_id: UUID
    format: Literal["json", "markdown"] = "json"


# --- human in the loop --------------------------------------------------------------------

RunId = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]
MAX_EXPIRES_IN = 30 * 24 * 3600


class History(HistoryWindow):
    """all | last `count` messages | `recent`: pinned plus the last `minutes`."""

    count: int | None = Field(default=None, ge=1, le=10_000)
    minutes: float | None = Field(default=None, gt=0, le=60 * 24 * 365)

    @model_validator(mode="after")
    def needs_its_parameter(self) -> History:
        if self.mode == "last" and self.count is None:
            raise ValueError("mode 'last' needs count")
        if self.mode == "recent" and self.minutes is None:
            raise ValueError("mode 'recent' needs minutes")
        return self


class PauseRun(Command):
    conversation_id: UUID
    run_id: RunId | None = Field(default=None, description="generated when absent")
    step: text(MAX_STEP)  # type: ignore[valid-type]
    checkpoint_type: text(MAX_CHECKPOINT_TYPE) = "approval"  # type: ignore[valid-type]
    prompt: text(MAX_PROMPT)  # type: ignore[valid-type]
    data: JsonObject = {}
    conversation_mode: bool = False
    expires_in: float | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN, description="seconds")
    history: History | None = Field(default=None, description="what the signals carry; default all")


class ResumeRun(Command):
    run_id: RunId
    approved: bool
    edits: JsonObject = {}
    feedback: text(MAX_PROMPT) | None = None  # type: ignore[valid-type]


class ExpireRun(Command):
    """Internal: the expiry sweeper records that a checkpoint's time ran out."""

    run_id: RunId


class GetRun(Query):
    run_id: RunId


class ListRuns(Query):
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0)


class RecordRead(Command):
    """Internal: an auditor read another user's history (services/queries_audit.py)."""

    what: Literal["stream", "timeline", "aggregate"]
    aggregate_id: UUID
    aggregate_owner: str
    at_version: int | None = None
    at_time: datetime | None = None

    def aggregate_ids(self) -> list[UUID]:
        return []  # the read aggregate is not loaded; only the auditor's trail is


class EraseUser(Command):
    """Admin: destroy a user's data key (crypto-shredding); see services/erasure.py."""

    user_id: text(200)  # type: ignore[valid-type]

    @field_validator("user_id")
    @classmethod
    def not_the_system(cls, user_id: str) -> str:
        if user_id == SYSTEM_OWNER:
            raise ValueError(f"{SYSTEM_OWNER!r} is Chronicle itself, not a user")
        return user_id


def hitl_stream(prefix: str) -> str:
    """The JetStream stream holding `<prefix>.hitl.>` signals (names allow no dots)."""
    return prefix.replace(".", "_").upper() + "_HITL"


def hitl_taken_bucket(prefix: str) -> str:
    """The key-value bucket where orchestrators note, per run id, the position of the
    last answer they took (see services/client_hitl.py)."""
    return hitl_stream(prefix) + "_TAKEN"


# --- replies ------------------------------------------------------------------------------

class Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Written(Reply):
    """What every command answers: the ids it made and the log position of its last event."""

    position: int | None = None


class UserErasure(Reply):
    user_id: str
    erased: bool  # False: the user had been erased before
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
    artifact_count: int = 0
    total_tokens: int = 0
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


class RunPaused(Written):
    run_id: str
    conversation_id: UUID
    prompt_message_id: UUID


class RunResumed(Written):
    run_id: str
    conversation_id: UUID
    feedback_message_id: UUID | None


class RunStatus(Reply):
    run_id: str
    conversation_id: UUID
    status: Literal["paused", "resumed", "expired"]
    step: str
    checkpoint_type: str
    prompt: str
    data: dict[str, Any]
    conversation_mode: bool
    paused_at: datetime
    expires_at: datetime | None
    resumed_at: datetime | None
    expired_at: datetime | None
    approved: bool | None
    edits: dict[str, Any] | None
    feedback: str | None
    checkpoints: int


class Checkpoint(Reply):
    step: str
    checkpoint_type: str
    prompt: str
    prompt_message_id: UUID
    data: dict[str, Any]
    conversation_mode: bool
    expires_at: datetime | None


class Signal(Reply):
    """What a run's subject carries: `<prefix>.hitl.<run_id>.<event>`."""

    event: Literal["paused", "resumed", "expired"]
    run_id: str
    conversation_id: UUID
    position: int
    at: datetime


class PauseSignal(Signal):
    checkpoint: Checkpoint
    history: list[Message]


class ResumeSignal(Signal):
    approved: bool
    edits: dict[str, Any]
    feedback: str | None
    feedback_message_id: UUID | None
    history: list[Message]
