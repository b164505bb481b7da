"""Seeds 002, 003 and 004 as their documents name them, served by the REST and MCP gateways:
an artifact job asked for in words and polled (`POST /ai/chat`, `GET /ai/artifact/:id`, in the
seed's snake_case), a HITL checkpoint approved or rejected with `chatHistory`, a session's chat
history (`GET /api/sessions/:sessionId/messages`), and an optimization's history as seed 003's
`OptimizationResult`. Each is made of the contract's own requests; none is a new capability."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, cast
from uuid import UUID

from chronicle_client.transport import Transport
from chronicle_contract.base import Command, Content, JsonObject, Query, Reply, Role, Text
from chronicle_contract.conversations import AddMessage, GetConversation, ListConversations, MessagePage
from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import GetRun, ResumeRun, RunId, RunResumed
from chronicle_contract.jobs import OPTIONS, ArtifactType, GetJob, JobView, RequestJob
from chronicle_contract.optimizations import HistoryPage, OptimizationHistory, RoundEntry
from chronicle_contract.sessions import GetSession
from chronicle_contract.values import MAX_JOB_CONTENT, MAX_PROMPT, MAX_STEP, JobStatus
from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

Data = dict[str, Any]

# Seed 002 ---------------------------------------------------------------------------------

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


# Seed 003 ---------------------------------------------------------------------------------


class OptimizationResult(HistoryPage):
    """Seed 003's `OptimizationResult.history`: the normalized rounds (round_index, trials,
    candidates, best_score, best_candidate, stop_reason, stopped, best_so_far, timestamp,
    extra), a page at a time like the history route (`rounds` is the same list)."""

    history: list[RoundEntry]


class OptimizationResultQuery(OptimizationHistory, reply=OptimizationResult, action=""):
    """optimizations.history's fields; sent as that request (never under a subject of its own)."""


async def optimization_result(client: Transport, asked: OptimizationResultQuery, _: str | None) -> Data:
    page = await client.send_json(OptimizationHistory(**asked.model_dump(exclude_unset=True)))
    return {**page, "history": page["rounds"]}


# Seed 004 ---------------------------------------------------------------------------------

ROLES: dict[str, Role] = {"user": "user", "assistant": "agent", "agent": "agent", "system": "system"}
HISTORY_PAGE = 1_000  # messages read from each conversation (the newest)
SESSION_CONVERSATIONS = 20  # a session's conversations read for its chat history (the latest updated)


class ChatTurn(Reply):
    """One entry of seed 004's `chatHistory`: `{role, content}` (and `timestamp` when read)."""

    role: Annotated[str, Text(20)]
    content: Content
    timestamp: datetime | None = None


class ChatTurnIn(ChatTurn):
    model_config = {"extra": "forbid", "frozen": True}


class CheckpointAnswered(RunResumed):
    approved: bool
    status: Literal["resumed"] = "resumed"
    chat_history: list[ChatTurn]
    added_messages: int = 0  # turns of the given chatHistory the conversation did not hold yet


class CheckpointAnswer(Command[CheckpointAnswered]):
    """Seed 004's `HITLApproval` (`edits`, `step`), with `chatHistory` and `sessionId` beside.
    The run's conversation is the history: turns of `chatHistory` it does not hold yet are
    added to it (message type `hitl_feedback`) before the answer, and the reply's
    `chatHistory` is the history as the orchestrator will read it."""

    run_id: RunId
    edits: JsonObject = {}
    step: Annotated[str, Text(MAX_STEP)] | None = Field(default=None, description="the checkpoint's step, if checked")
    feedback: Annotated[str, Text(MAX_PROMPT)] | None = None
    session_id: UUID | None = Field(default=None, description="the run's session, if checked")
    chat_history: list[ChatTurnIn] | None = Field(default=None, max_length=1_000)


class Approval(CheckpointAnswer):
    """`POST /api/hitl/:runId/approve`: approved unless `approved` is false."""

    approved: bool = True


class Rejection(CheckpointAnswer):
    """`POST /api/hitl/:runId/reject`: the same answer, not approved."""


def seed_turn(message: Data) -> Data:
    """A message as seed 004's chat history names it (agent -> assistant, as its client does)."""
    role = "assistant" if message["role"] == "agent" else message["role"]
    return {"role": role, "content": message["content"], "timestamp": message["created_at"]}


async def newest_messages(client: Transport, conversation_id: UUID) -> list[Data]:
    page = await client.send_json(GetConversation(
        conversation_id=conversation_id, messages=MessagePage(limit=HISTORY_PAGE, order="newest")))
    return list(page["messages"])


async def answer_checkpoint(client: Transport, answer: CheckpointAnswer, key: str | None) -> Data:
    approved = answer.approved if isinstance(answer, Approval) else False
    run = await client.send_json(GetRun(run_id=answer.run_id))
    if answer.step is not None and answer.step != run["step"]:
        message = f"the run is paused at step {run['step']!r}, not {answer.step!r}"
        raise ChronicleError("conflict", message, [{"field": "step", "rule": "current_step", "message": message}])
    conversation = await client.send_json(GetConversation(
        conversation_id=run["conversation_id"], messages=MessagePage(limit=HISTORY_PAGE, order="newest")))
    if answer.session_id is not None and str(answer.session_id) != str(conversation["session_id"]):
        message = "the run's conversation is not in this session"
        raise ChronicleError("conflict", message, [{"field": "session_id", "rule": "run_session", "message": message}])
    added = 0
    if answer.chat_history and run["status"] == "paused":
        held = [(m["role"], m["content"]) for m in conversation["messages"]]
        for turn in answer.chat_history:
            role = ROLES.get(turn.role.lower(), "system")
            if (role, turn.content) in held:
                held.remove((role, turn.content))
                continue
            await client.send_json(AddMessage(conversation_id=run["conversation_id"], role=role, content=turn.content,
                                              message_type="hitl_feedback", metadata={"run_id": answer.run_id}))
            added += 1
    resumed = await client.send_json(ResumeRun(run_id=answer.run_id, approved=approved, edits=answer.edits,
                                               feedback=answer.feedback), key)
    history = await newest_messages(client, run["conversation_id"])
    return {**resumed, "approved": approved, "status": "resumed", "added_messages": added,
            "chat_history": [seed_turn(m) for m in history]}


class SessionMessage(Reply):
    """A message as seed 004's `getSessionChatHistory` row and `ChatHistoryClient` read it
    (`sender`, `content`, `created_at`; `role` and `timestamp` as its formatted history), our
    own fields beside."""

    id: UUID
    conversation_id: UUID
    role: str
    sender: str
    content: str
    timestamp: datetime
    created_at: datetime
    pinned: bool
    message_type: str
    metadata: dict[str, Any]


class SessionChatHistory(Reply):
    session_id: UUID
    messages: list[SessionMessage]
    count: int


class SessionMessages(Query[SessionChatHistory]):
    """Seed 004's `GET /api/sessions/:sessionId/messages`: the session's chat history, oldest
    first; by default as the seed's query has it, pinned messages and the last hour's."""

    session_id: UUID
    mode: Literal["recent", "all"] = Field(default="recent", description="recent: pinned and the last `minutes`")
    minutes: float = Field(default=60, gt=0, le=60 * 24 * 365)


async def session_messages(client: Transport, asked: SessionMessages, _: str | None) -> Data:
    # (not_found: missing or another's; the request's read position applies to its first read)
    await client.send_json(GetSession(session_id=asked.session_id, min_position=asked.min_position))
    listed = await client.send_json(ListConversations(session_id=asked.session_id, limit=SESSION_CONVERSATIONS,
                                                      sort_by="updated_at", order="desc"))
    since = datetime.now(UTC) - timedelta(minutes=asked.minutes)
    messages = []
    for conversation in listed["items"]:
        for message in await newest_messages(client, conversation["id"]):
            at = datetime.fromisoformat(message["created_at"])
            if asked.mode == "all" or message["pinned"] or at > since:
                messages.append({**message, "conversation_id": conversation["id"], "sender": message["role"],
                                 "timestamp": message["created_at"]})
    messages.sort(key=lambda m: (m["created_at"], str(m["id"])))
    return {"session_id": str(asked.session_id), "messages": messages, "count": len(messages)}
