"""Seed 002's artifact job pipeline as its document names it: an artifact asked for in words
(`POST /ai/chat`) and polled (`GET /ai/artifact/:job_id`), in the seed's snake_case; made of
job.request and jobs.get."""

from __future__ import annotations

import re
from typing import Annotated, Literal, cast
from uuid import UUID

from chronicle_client.transport import Transport
from chronicle_contract.base import Command, JsonObject, Query, Reply, Text
from chronicle_contract.errors import ChronicleError
from chronicle_contract.jobs import OPTIONS, ArtifactType, GetJob, JobView, RequestJob
from chronicle_contract.values import MAX_JOB_CONTENT, JobStatus
from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from entrypoints.gateways.seeds import Data


# The seed's intent router, as words: "Create a quiz on photosynthesis" -> quiz. Each pattern
# is spelt without flags or word boundaries, so that JSON Schema (the request's `anyOf`) and
# Python read it alike.
def any_case(*words: str) -> str:
    return "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)  # (letters, spaces)
                    for word in words)


INTENT_WORDS: tuple[tuple[ArtifactType, str], ...] = (
    ("quiz", any_case("quiz", "question")),
    ("summary", any_case("summar", "recap", "key point")),
    ("layout", any_case("layout", "dashboard", "screen", "page")),
)
INTENTS = tuple((kind, re.compile(pattern)) for kind, pattern in INTENT_WORDS)
NAMES_AN_ARTIFACT = "|".join(pattern for _, pattern in INTENT_WORDS)


def intent_of(message: str) -> ArtifactType | None:
    return next((kind for kind, words in INTENTS if words.search(message)), None)


class ArtifactJobCreated(Reply):
    type: Literal["artifact_job_created"] = "artifact_job_created"
    job_id: UUID
    status: JobStatus
    artifact_type: ArtifactType
    message: str
    session_id: UUID
    progress: int
    created: bool  # False: an active job with the same request answered (seed 002's idempotency)
    position: int | None = None


# ArtifactChat's rules, as JSON Schema too: `artifact_type` with its own options, or words
# naming an artifact and no options.
def chat_rules() -> list[JsonValue]:
    rules: list[JsonValue] = []
    for kind, options in OPTIONS.items():
        named: JsonDict = {"required": ["artifact_type"], "properties": {
            "artifact_type": {"const": kind}, "options": cast(JsonDict, options.model_json_schema())}}
        rules.append(named)
    in_words: JsonDict = {"properties": {"artifact_type": {"type": "null"},
                                         "options": {"type": "object", "maxProperties": 0},
                                         "message": {"pattern": NAMES_AN_ARTIFACT}}}
    return [*rules, in_words]


class ArtifactChat(Command[ArtifactJobCreated]):
    """Seed 002's `POST /ai/chat`: an artifact asked for in words. Its type is the seed's
    intent (quiz, summary, layout, from the words) unless `artifact_type` names it."""

    model_config = ConfigDict(json_schema_extra={"anyOf": chat_rules()})

    message: Annotated[str, Text(MAX_JOB_CONTENT)] = Field(
        description="the request in words: quiz/question -> quiz, summary/recap/key points -> summary, "
        "layout/dashboard/screen/page -> layout (the first that matches)")
    session_id: UUID | None = Field(default=None, description="default: your current session")
    artifact_type: ArtifactType | None = Field(default=None, description="default: read from the message")
    source_ids: list[Annotated[str, Text(200)]] = Field(default=[], max_length=100)
    options: JsonObject = Field(default={}, description="with artifact_type: its options, as POST /api/jobs takes"
                                " them (num_questions, ...)")


async def artifact_chat(client: Transport, asked: ArtifactChat, key: str | None) -> Data:
    if asked.artifact_type is None and asked.options:
        message = "options are an artifact type's: give artifact_type with them"
        raise ChronicleError("invalid", message, [{"field": "options", "rule": "needs_artifact_type",
                                                   "message": message}])
    kind = asked.artifact_type or intent_of(asked.message)
    if kind is None:
        message = "no artifact asked for: name a quiz, a summary or a layout (or give artifact_type)"
        raise ChronicleError("invalid", message, [{"field": "message", "rule": "artifact_intent", "message": message}])
    job = RequestJob(content=asked.message, artifact_type=kind, session_id=asked.session_id,
                     source_ids=asked.source_ids, options=asked.options)
    made = await client.send_json(job, key)
    return {**made, "type": "artifact_job_created", "artifact_type": kind,
            "message": f"Artifact generation job created. Job ID: {made['job_id']}"}


class ArtifactJob(Query[JobView]):
    """Seed 002's `GET /ai/artifact/:job_id`: the job's status, progress and result."""

    job_id: UUID


async def artifact_job(client: Transport, asked: ArtifactJob, _: str | None) -> Data:
    return await client.send_json(GetJob(job_id=asked.job_id, min_position=asked.min_position))
