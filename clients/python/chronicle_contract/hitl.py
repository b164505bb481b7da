"""The wire contract of human in the loop: pause, resume, expire, the run's status and its signals."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from chronicle_contract.base import (
    Command,
    JsonObject,
    Offset,
    Page,
    PageCursor,
    Query,
    Reply,
    Text,
    Written,
    empty_object,
)
from chronicle_contract.conversations import MessageView
from chronicle_contract.values import MAX_CHECKPOINT_TYPE, MAX_PROMPT, MAX_STEP, HistoryWindow

RunId = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]


MAX_EXPIRES_IN = 30 * 24 * 3600


class SignalHistory(HistoryWindow):
    """all | last `count` messages | `recent`: pinned plus the last `minutes`."""

    # The rule below, as JSON Schema too: what a schema-led client sends is taken.
    model_config = ConfigDict(json_schema_extra={"allOf": [
        {"if": {"properties": {"mode": {"const": mode}}, "required": ["mode"]},
         "then": {"required": [needs], "properties": {needs: {"not": {"type": "null"}}}}}
        for mode, needs in (("last", "count"), ("recent", "minutes"))
    ]})

    count: int | None = Field(default=None, ge=1, le=10_000)
    minutes: float | None = Field(default=None, gt=0, le=60 * 24 * 365)

    @model_validator(mode="after")
    def needs_its_parameter(self) -> SignalHistory:
        if self.mode == "last" and self.count is None:
            raise ValueError("mode 'last' needs count")
        if self.mode == "recent" and self.minutes is None:
            raise ValueError("mode 'recent' needs minutes")
        return self


def hitl_stream(prefix: str) -> str:
    """The JetStream stream that held `<prefix>.hitl.>` signals, content included, before
    signals went to each owner's own subjects without content; removed on start."""
    return prefix.replace(".", "_").upper() + "_HITL"


def hitl_taken_bucket(prefix: str) -> str:
    """The key-value bucket where orchestrators noted the answers they took, before the
    service recorded that itself (hitl.take); removed on start."""
    return hitl_stream(prefix) + "_TAKEN"


def run_signals(signals_prefix: str, run_id: str) -> str:
    """A run's signals, under its owner's signal subjects (clients/python/chronicle_contract/bus.py):
    `<prefix>.signals.<owner scope>.hitl.<run_id>.<paused|resumed|expired>`."""
    return f"{signals_prefix}.hitl.{run_id}"


class RunPaused(Written):
    run_id: str
    conversation_id: UUID
    prompt_message_id: UUID


class RunResumed(Written):
    run_id: str
    conversation_id: UUID
    feedback_message_id: UUID | None


class RunExpired(Written):
    """Internal: what the expiry sweeper's command answers (expired False: already answered)."""

    run_id: str
    expired: bool


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


class Signal(Reply):
    """What a run's signal subject carries (run_signals): ids and the log position, no
    content. The checkpoint is read with hitl.get (min_position = position); the answer
    is taken with hitl.take."""

    event: Literal["paused", "resumed", "expired"]
    run_id: str
    conversation_id: UUID
    position: int
    at: datetime


class ResumeSignal(Signal):
    """The person's answer, as hitl.take hands it to the run's orchestrator; the history
    leaves out its oldest messages (`history_truncated`) past 512 KiB."""

    approved: bool
    edits: dict[str, Any]
    feedback: str | None
    feedback_message_id: UUID | None
    history: list[MessageView]
    history_truncated: bool = False


class PauseRun(Command[RunPaused], action="hitl.pause"):
    conversation_id: UUID
    run_id: RunId | None = Field(default=None, description="generated when absent")
    step: Annotated[str, Text(MAX_STEP)]
    checkpoint_type: Annotated[str, Text(MAX_CHECKPOINT_TYPE)] = "approval"
    prompt: Annotated[str, Text(MAX_PROMPT)]
    data: JsonObject = empty_object()
    conversation_mode: bool = False
    expires_in: float | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN, description="seconds")
    history: SignalHistory | None = Field(default=None, description="what the signals carry; default all")


class ResumeRun(Command[RunResumed], action="hitl.resume"):
    run_id: RunId
    approved: bool
    edits: JsonObject = empty_object()
    feedback: Annotated[str, Text(MAX_PROMPT)] | None = None


class ExpireRun(Command[RunExpired], action="hitl.expire"):
    """Internal: the expiry sweeper records that a checkpoint's time ran out."""

    run_id: RunId


class AnswerTaken(Written):
    """`resumed` or `expired`: the answer is this caller's (`answer` holds a resume's);
    `paused`: nobody answered yet; `taken`: another orchestrator took this answer."""

    run_id: str
    conversation_id: UUID
    status: Literal["paused", "resumed", "expired", "taken"]
    answer: ResumeSignal | None = None


class TakeAnswer(Command[AnswerTaken], action="hitl.take"):
    """Take the answer to the run's current checkpoint, once, whoever asks first."""

    run_id: RunId


class RecordTaken(Command[AnswerTaken], action="hitl.record_taken"):
    """Internal: hitl.take's decision on the conversation, before the answer is read."""

    run_id: RunId


class GetRun(Query[RunStatus], action="hitl.get"):
    run_id: RunId


class ListRuns(Query[Page[RunStatus]], action="hitl.list"):
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None
