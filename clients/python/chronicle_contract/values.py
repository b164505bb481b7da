"""The wire's own limits and value types; the server checks that its domain agrees (tests/unit/test_contract_values.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SYSTEM_OWNER = "chronicle"  # the owner of what Chronicle itself records; no user may take the name

MAX_TAGS = 10
MAX_TAG_LENGTH = 50
MAX_TITLE = 500
MAX_CONTENT = 10_000
MAX_MESSAGE_TYPE = 50
MAX_EMBEDDING_PROVIDER = 200

MAX_QUERY = 10_000
MAX_DRAFT = 1_000_000
MAX_LABEL = 200  # model, provider, example ids, preview style and format, optimization labels
MAX_EXAMPLE_TEXT = 10_000
MAX_REFINEMENT = 10_000
MAX_TEMPERATURE = 2.0
MAX_PREVIEW_BYTES = 20 * 1024 * 1024
MAX_REMOVAL_REASON = 500
MAX_VARIATIONS = 10

MAX_PROMPT = 10_000
MAX_STEP = 200
MAX_CHECKPOINT_TYPE = 50

MAX_JOB_CONTENT = 50_000
MAX_JOB_REASON = 2_000
MAX_WORKER = 200

MAX_STOP_REASON = 1_000
MAX_SESSION_NAME = 500
MAX_SESSION_DESCRIPTION = 10_000
MAX_CANDIDATE_ID = 200
MAX_INVALID_REASON = 2_000

Origin = Literal["stored", "generated", "refined", "variation", "job"]
JobStatus = Literal["pending", "planning", "generating", "validating", "completed", "failed"]
Direction = Literal["maximize", "minimize"]
SessionKind = Literal["general", "chat", "generation", "optimization"]


class GenerationStats(BaseModel):
    """What producing the artifact cost: model calls, tokens, retries and wall time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(default=1, ge=0, le=1_000)
    tokens: int = Field(default=0, ge=0, le=2**62)
    retries: int = Field(default=0, ge=0, le=1_000)
    duration_ms: float = Field(default=0.0, ge=0, le=1e12)


class HistoryWindow(BaseModel):
    """Which messages a signal carries: all, the last `count`, or pinned plus the last `minutes`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["all", "last", "recent"] = "all"
    count: int | None = None
    minutes: float | None = None


class Chunk(BaseModel):
    """A piece of retrieved content, captured when the job was requested."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_id: str
    source_id: str
    text: str
    score: float
    embedding_version: str
    captured_at: datetime


def improves(direction: Direction, score: float | None, best: float | None) -> bool:
    """Whether `score` beats `best` (no score never does; any score beats none)."""
    if score is None:
        return False
    if best is None:
        return True
    return score > best if direction == "maximize" else score < best
