"""Seed 004's HITL chat history as its document names it: a checkpoint approved or rejected
with `chatHistory`, and a session's chat history (`GET /api/sessions/:sessionId/messages`);
made of hitl.get, conversations.get and .list, conversation.add_message, hitl.resume."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

from chronicle_client.transport import Transport
from chronicle_contract.base import Command, Content, JsonObject, Query, Reply, Role, Text
from chronicle_contract.conversations import AddMessage, GetConversation, ListConversations, MessagePage
from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import GetRun, ResumeRun, RunId, RunResumed
from chronicle_contract.sessions import GetSession
from chronicle_contract.values import MAX_PROMPT, MAX_STEP
from pydantic import Field

from entrypoints.gateways.seeds import Data

ROLES: dict[str, Role] = {"user": "user", "assistant": "agent", "agent": "agent", "system": "system"}
HISTORY_PAGE = 1_000  # messages read from each conversation (the newest)
SESSION_CONVERSATIONS = 20  # a session's conversations read for its chat history (the latest updated)
READS_AT_ONCE = 5  # of them read side by side (a user's requests at once are capped: 64 by default)


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


async def newest_messages(client: Transport, conversation_id: UUID, min_position: int | None = None) -> list[Data]:
    page = await client.send_json(GetConversation(
        conversation_id=conversation_id, messages=MessagePage(limit=HISTORY_PAGE, order="newest"),
        min_position=min_position))
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
    # (at the resume's position: the turns just added are in the history the reply shows)
    history = await newest_messages(client, run["conversation_id"], resumed.get("position"))
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
    at_once = asyncio.Semaphore(READS_AT_ONCE)

    async def page_of(conversation_id: UUID) -> list[Data]:
        async with at_once:
            return await newest_messages(client, conversation_id)

    pages = await asyncio.gather(*(page_of(c["id"]) for c in listed["items"]))
    for conversation, page in zip(listed["items"], pages, strict=True):
        for message in page:
            at = datetime.fromisoformat(message["created_at"])
            if asked.mode == "all" or message["pinned"] or at > since:
                messages.append({**message, "conversation_id": conversation["id"], "sender": message["role"],
                                 "timestamp": message["created_at"]})
    messages.sort(key=lambda m: (m["created_at"], str(m["id"])))
    return {"session_id": str(asked.session_id), "messages": messages, "count": len(messages)}
