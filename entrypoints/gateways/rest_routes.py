"""The REST API's routes: seed 001's conversation routes with its shapes, and the other
capabilities in the same style. Each route names the request model it sends over NATS;
the fields come from the path, the query string (GET, DELETE) or the JSON body."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from chronicle_contract.artifacts import (
    ArtifactLineage,
    CompareArtifacts,
    CreateVariations,
    GenerateArtifact,
    GetArtifact,
    GetVariations,
    ListArtifacts,
    RagInfluence,
    RefineArtifact,
    SearchArtifacts,
    StoreArtifact,
    TagArtifact,
)
from chronicle_contract.audit import AuditStream, AuditTimeline, AuditVerify
from chronicle_contract.base import Request
from chronicle_contract.conversations import (
    AddMessage,
    ConversationStatsQuery,
    ConversationSummaryView,
    ConversationView,
    DeleteConversation,
    ExportConversation,
    GetConversation,
    ListConversations,
    MessageView,
    SearchConversations,
    StartConversation,
    UpdateConversation,
)
from chronicle_contract.hitl import GetRun, ListRuns, PauseRun, ResumeRun, RunStatus
from chronicle_contract.jobs import OPTIONS, GetJob, ListJobs, RequestJob
from chronicle_contract.optimizations import (
    CandidateLineage,
    CompareOptimizations,
    GetOptimization,
    InvalidateTrial,
    ListOptimizations,
    OptimizationHistory,
    ParetoQuery,
    RestoreTrial,
)
from chronicle_contract.sessions import CloseSession, CreateSession, GetSession, ListSessions, UpdateSession
from pydantic import BaseModel

from entrypoints.gateways.casing import to_camel
from entrypoints.gateways.seeds.hitl import Approval, Rejection, SessionMessages, answer_checkpoint, session_messages
from entrypoints.gateways.seeds.jobs import ArtifactChat, ArtifactJob, artifact_chat, artifact_job
from entrypoints.gateways.seeds.optimizations import OptimizationResultQuery, optimization_result

Method = Literal["GET", "POST", "PUT", "DELETE"]
Body = dict[str, Any]


@dataclass(frozen=True)
class HttpRoute:
    """`method path` sends `request`. `fields(params)` maps the route's own parameter names
    onto the request's (seed 001 names some differently); `shape(data)` turns the reply's
    data (already camelCase) into the body after `success`, and `body` names its fields'
    types for the OpenAPI document; by default the body is the reply's fields."""

    method: Method
    path: str
    request: type[Request[Any]]
    summary: str
    tag: str
    status: int = 200
    fields: Callable[[Body], Body] = lambda params: params
    shape: Callable[[Body, Any], Body] | None = None  # (reply data, the request sent)
    body: dict[str, Any] = field(default_factory=dict)
    download: bool = False  # the reply is a file (export)
    reread: Callable[[Any], Request[Any]] | None = None  # a query whose reply joins the data as `conversation`
    schemas: dict[str, Any] = field(default_factory=dict)  # a request field's schema where its model's says less
    # A body whose other fields depend on one field's value: (that field, {value: {field: schema}}).
    variants: tuple[str, dict[str, dict[str, Any]]] | None = None
    flat: str | None = None  # a request field (an object) whose fields are the query's own parameters
    also_accepted: dict[str, list[str]] = field(default_factory=dict)  # a parameter's other spellings (by `fields`)
    undeclared: tuple[str, ...] = ()
    # A route made of several requests (entrypoints/gateways/seeds/): it sends them itself and answers the
    # reply's data; `snake`: its bodies keep the seed's snake_case names.
    run: Callable[[Any, Any, str | None], Awaitable[Body]] | None = None
    snake: bool = False  # request fields taken (an older form) but left out of the OpenAPI document


def sort_key(value: Any) -> Any:
    # Seed 001's front end names sort keys in camelCase (createdAt); the contract in snake_case.
    if isinstance(value, str) and value in {to_camel(k) for k in ("created_at", "updated_at")}:
        return {"createdAt": "created_at", "updatedAt": "updated_at"}[value]
    return value


def list_fields(params: Body) -> Body:
    return {**params, **({"sort_by": sort_key(params["sort_by"])} if "sort_by" in params else {})}


def message_page(params: Body) -> Body:
    """`GET /api/conversations/:id?limit=&order=&cursor=`: the page of messages."""
    page = {name: params.pop(name) for name in ("limit", "order", "cursor") if name in params}
    return {**params, **({"messages": page} if page else {})}


DIRECTIONS = ("maximize", "minimize")
NOT_BLANK = re.compile(r"[^\s\x1c-\x1f\x85]")  # (as the contract's Text has it)
OBJECTIVE: dict[str, Any] = {  # an item of the pareto query's `objectives` (a metric name: 1 to 200 characters, not blank)
    "anyOf": [
        {"type": "string", "allOf": [
            {"pattern": "^[^,\\x00]{1,200}:(maximize|minimize)$"},
            {"pattern": "^[^,\\x00]*[^\\s\\x1c-\\x1f\\x85,\\x00][^,\\x00]*:(maximize|minimize)$"}]},
        {"type": "string", "maxLength": 200, "pattern": "^[^,\\x00]*[^\\s\\x1c-\\x1f\\x85,\\x00][^,\\x00]*$"},
    ],
    "description": "`name`, or `name:maximize` / `name:minimize` (default: the optimization's direction)",
}


def pareto_fields(params: Body) -> Body:
    """`objectives=score:maximize,length:minimize`: each objective with its direction, in one
    parameter (the older `directions` JSON object is still taken beside it)."""
    if not isinstance(params.get("objectives"), list):
        return params
    names, directions = [], dict(params.get("directions") or {})
    for item in params["objectives"]:
        name, _, direction = item.rpartition(":") if isinstance(item, str) else ("", "", "")
        if direction in DIRECTIONS and NOT_BLANK.search(name):
            names.append(name)
            directions[name] = direction
        else:
            names.append(item)
    return {**params, "objectives": names, **({"directions": directions} if directions else {})}


def conversations_page(data: Body, _: Any) -> Body:
    return {
        "conversations": data["items"],
        "total": data["total"],
        "limit": data["limit"],
        "offset": data["offset"],
        "hasMore": data["offset"] + len(data["items"]) < data["total"],
    }


def with_timestamps(conversation: Body) -> Body:
    """Seed 001 names a message's time `timestamp`; `createdAt` stays beside it."""
    messages = [{**message, "timestamp": message["createdAt"]} for message in conversation.get("messages", ())]
    return {**conversation, "messages": messages}


def search_results(data: Body, _: Any) -> Body:
    """Seed 001's results: one per conversation (its best hit), the matched message's
    snippet as a string with its id beside it."""
    results, seen = [], set()
    for hit in data["items"]:
        if hit["conversationId"] in seen:
            continue
        seen.add(hit["conversationId"])
        results.append({
            "conversationId": hit["conversationId"],
            "title": hit["title"],
            "matchedMessage": hit["snippet"] if hit["messageId"] is not None else None,
            "messageId": hit["messageId"],
            "timestamp": hit["createdAt"],
            "snippet": hit["snippet"],
            "createdAt": hit["createdAt"],
            "rank": hit["rank"],
        })
    return {"query": data["query"], "results": results, "total": len(results), "count": len(results)}


def stats_shape(data: Body, _: Any) -> Body:
    first, last = data["firstConversationAt"], data["lastConversationAt"]
    return {
        "stats": {
            "totalConversations": data["totalConversations"],
            "totalMessages": data["totalMessages"],
            "averageMessagesPerConversation": data["averageMessages"],
            "firstConversationDate": first,
            "lastConversationDate": last,
            "firstConversationAt": first,
            "lastConversationAt": last,
            "topTags": data["topTags"],
        }
    }


def conversation_started(data: Body, _: Any) -> Body:
    return {**data, "message": "Conversation created successfully"}


def conversation_updated(data: Body, sent: Any) -> Body:
    """Seed 001: the updated conversation (read at the update's position), our fields beside it."""
    conversation = with_timestamps(data.pop("conversation"))
    return {"conversation": conversation, "conversationId": str(sent.conversation_id), **data}


def conversation_deleted(data: Body, sent: Any) -> Body:
    return {"conversationId": str(sent.conversation_id), **data, "message": "Conversation deleted successfully"}


def reread_conversation(sent: Any) -> GetConversation:
    return GetConversation(conversation_id=sent.conversation_id)


class Message(MessageView):
    timestamp: datetime


class Conversation(ConversationView):
    messages: list[Message]  # type: ignore[assignment]  # (the web's message: timestamp beside createdAt)


class ConversationHit(BaseModel):
    conversationId: UUID  # noqa: N815 (seed 001's names)
    title: str
    matchedMessage: str | None  # noqa: N815 (None: the title matched)
    messageId: UUID | None  # noqa: N815
    timestamp: datetime
    snippet: str
    createdAt: datetime  # noqa: N815
    rank: int


class TopTag(BaseModel):
    tag: str
    count: int


class ConversationStatsBody(BaseModel):
    totalConversations: int  # noqa: N815
    totalMessages: int  # noqa: N815
    averageMessagesPerConversation: float  # noqa: N815
    firstConversationDate: datetime | None  # noqa: N815
    lastConversationDate: datetime | None  # noqa: N815
    firstConversationAt: datetime | None  # noqa: N815
    lastConversationAt: datetime | None  # noqa: N815
    topTags: list[TopTag]  # noqa: N815


CONVERSATIONS = "conversations"
ROUTES: tuple[HttpRoute, ...] = (
    # Seed 001's routes, its parameter names and shapes.
    HttpRoute("GET", "/api/conversations", ListConversations, "List conversations", CONVERSATIONS,
              fields=list_fields, shape=conversations_page, also_accepted={"sortBy": ["createdAt", "updatedAt"]},
              body={"conversations": list[ConversationSummaryView], "total": int, "limit": int, "offset": int,
                    "hasMore": bool}),
    HttpRoute("POST", "/api/conversations", StartConversation, "Start a conversation", CONVERSATIONS, status=201,
              shape=conversation_started,
              body={"conversationId": UUID, "title": str, "position": int | None, "message": str}),
    HttpRoute("GET", "/api/conversations/search", SearchConversations, "Search messages and titles", CONVERSATIONS,
              shape=search_results,
              body={"query": str, "results": list[ConversationHit], "total": int, "count": int}),
    HttpRoute("GET", "/api/conversations/stats", ConversationStatsQuery, "Your conversation statistics",
              CONVERSATIONS, shape=stats_shape, body={"stats": ConversationStatsBody}),
    HttpRoute("GET", "/api/conversations/{conversationId}", GetConversation, "A conversation with a page of messages",
              CONVERSATIONS, fields=message_page, flat="messages",
              shape=lambda data, _: {"conversation": with_timestamps(data)},
              body={"conversation": Conversation}),
    HttpRoute("PUT", "/api/conversations/{conversationId}", UpdateConversation, "Retitle or retag a conversation",
              CONVERSATIONS, shape=conversation_updated, reread=reread_conversation,
              body={"conversation": Conversation, "conversationId": UUID, "position": int | None}),
    HttpRoute("DELETE", "/api/conversations/{conversationId}", DeleteConversation, "Delete a conversation",
              CONVERSATIONS, shape=conversation_deleted,
              body={"conversationId": UUID, "position": int | None, "message": str}),
    HttpRoute("POST", "/api/conversations/{conversationId}/messages", AddMessage, "Add a message", CONVERSATIONS,
              status=201),
    HttpRoute("GET", "/api/conversations/{conversationId}/export", ExportConversation,
              "Download a conversation (json or markdown)", CONVERSATIONS, download=True),
    # Sessions.
    HttpRoute("GET", "/api/sessions", ListSessions, "List sessions", "sessions"),
    HttpRoute("POST", "/api/sessions", CreateSession, "Create a session", "sessions", status=201),
    HttpRoute("GET", "/api/sessions/{sessionId}", GetSession, "A session", "sessions"),
    HttpRoute("PUT", "/api/sessions/{sessionId}", UpdateSession, "Rename, describe or retag a session", "sessions"),
    HttpRoute("POST", "/api/sessions/{sessionId}/close", CloseSession, "Close a session", "sessions"),
    # Artifacts, lineage, variations.
    HttpRoute("GET", "/api/artifacts", ListArtifacts, "List artifacts", "artifacts"),
    HttpRoute("POST", "/api/artifacts", StoreArtifact, "Store a generated artifact", "artifacts", status=201,
              schemas={"layout": {"$ref": "#/components/schemas/LayoutNode"}}),
    HttpRoute("POST", "/api/artifacts/generate", GenerateArtifact, "Generate and store a layout", "artifacts",
              status=201),
    HttpRoute("GET", "/api/artifacts/search", SearchArtifacts, "Search artifacts by query text", "artifacts"),
    HttpRoute("GET", "/api/artifacts/compare", CompareArtifacts, "Compare artifacts (artifactIds=a,b,...)",
              "artifacts"),
    HttpRoute("GET", "/api/artifacts/{artifactId}", GetArtifact, "An artifact (includePreview for its previews)",
              "artifacts"),
    HttpRoute("POST", "/api/artifacts/{artifactId}/refine", RefineArtifact, "Refine an artifact into a child",
              "artifacts", status=201),
    HttpRoute("POST", "/api/artifacts/{artifactId}/tags", TagArtifact, "Tag an artifact", "artifacts"),
    HttpRoute("GET", "/api/artifacts/{artifactId}/lineage", ArtifactLineage, "Ancestors or descendants",
              "artifacts"),
    HttpRoute("GET", "/api/artifacts/{artifactId}/rag-influence", RagInfluence,
              "The RAG examples an artifact was made from", "artifacts"),
    HttpRoute("POST", "/api/variations", CreateVariations, "Generate a set of variations", "artifacts", status=201),
    HttpRoute("GET", "/api/variations/{variationSetId}", GetVariations, "A variation set and its comparison",
              "artifacts"),
    # Jobs (progress: GET /api/jobs/{jobId}/events, Server-Sent Events).
    HttpRoute("GET", "/api/jobs", ListJobs, "List generation jobs", "jobs"),
    HttpRoute("POST", "/api/jobs", RequestJob, "Request a generation job", "jobs", status=202,
              variants=("artifactType", {kind: {"options": options.model_json_schema()}  # (its keys as the seed's)
                                         for kind, options in OPTIONS.items()})),
    HttpRoute("GET", "/api/jobs/{jobId}", GetJob, "A job, its status, progress and result", "jobs"),
    # Human in the loop.
    HttpRoute("GET", "/api/hitl/runs", ListRuns, "Open checkpoints waiting for a human", "hitl"),
    HttpRoute("POST", "/api/hitl/runs", PauseRun, "Pause a run for a human", "hitl", status=201),
    HttpRoute("GET", "/api/hitl/runs/{runId}", GetRun, "A run's checkpoint", "hitl",
              shape=lambda data, _: {**data, "message": data["prompt"]},  # (seed 004's name for the prompt)
              body={**{to_camel(name): info.annotation for name, info in RunStatus.model_fields.items()},
                    "message": str}),
    HttpRoute("POST", "/api/hitl/runs/{runId}/resume", ResumeRun, "Answer a paused run", "hitl"),
    # Optimization history.
    HttpRoute("GET", "/api/optimizations", ListOptimizations, "List optimizations", "optimizations"),
    HttpRoute("GET", "/api/optimizations/compare", CompareOptimizations,
              "Compare optimizations (optimizationIds=a,b,...)", "optimizations"),
    HttpRoute("GET", "/api/optimizations/{optimizationId}", GetOptimization, "An optimization", "optimizations"),
    HttpRoute("GET", "/api/optimizations/{optimizationId}/history", OptimizationHistory,
              "Rounds and trials, a page at a time", "optimizations"),
    HttpRoute("GET", "/api/optimizations/{optimizationId}/pareto", ParetoQuery, "The Pareto front",
              "optimizations", fields=pareto_fields, undeclared=("directions",),
              schemas={"objectives": {"type": "array", "minItems": 1, "maxItems": 16, "items": OBJECTIVE,
                                      "description": "`score` or metric names, each with its direction if given;"
                                                     " default: the score"}}),
    HttpRoute("GET", "/api/optimizations/{optimizationId}/candidates/{candidateId}/lineage", CandidateLineage,
              "A candidate's ancestry", "optimizations"),
    HttpRoute("POST", "/api/trials/{trialId}/invalidate", InvalidateTrial,
              "Invalidate a trial: it stays in the history, marked, and bests leave it out", "optimizations"),
    HttpRoute("POST", "/api/trials/{trialId}/restore", RestoreTrial, "Undo a trial's invalidation", "optimizations"),
    # Seeds 002, 003 and 004 as they name them (entrypoints/gateways/seeds/).
    HttpRoute("POST", "/ai/chat", ArtifactChat, "Seed 002: ask for an artifact in words (a job)", "seeds",
              status=202, run=artifact_chat, snake=True),
    HttpRoute("GET", "/ai/artifact/{job_id}", ArtifactJob, "Seed 002: a job's status, progress and result", "seeds",
              run=artifact_job, snake=True),
    HttpRoute("GET", "/api/optimizations/{optimization_id}/result", OptimizationResultQuery,
              "Seed 003: an optimization's normalized history (OptimizationResult.history), a page at a time",
              "seeds", run=optimization_result, snake=True),
    HttpRoute("POST", "/api/hitl/{runId}/approve", Approval, "Seed 004: approve a checkpoint (edits, chatHistory)",
              "seeds", run=answer_checkpoint),
    HttpRoute("POST", "/api/hitl/{runId}/reject", Rejection, "Seed 004: reject a checkpoint (feedback, chatHistory)",
              "seeds", run=answer_checkpoint),
    HttpRoute("GET", "/api/sessions/{session_id}/messages", SessionMessages,
              "Seed 004: a session's chat history (pinned and the last hour's, by default)", "seeds",
              run=session_messages, snake=True),
    # Audit.
    HttpRoute("GET", "/api/audit/streams/{aggregateId}", AuditStream, "One aggregate's events, any version", "audit"),
    HttpRoute("GET", "/api/audit/streams/{aggregateId}/verify", AuditVerify,
              "One aggregate's hash chain recomputed, up to 1,000 events a page", "audit"),
    HttpRoute("GET", "/api/audit/timeline/{scopeId}", AuditTimeline,
              "A session's or conversation's events in log order", "audit"),
)
