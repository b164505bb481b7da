"""The MCP server (seed 000's tools and the other capabilities an agent wants), a client of
the service over NATS: over stdio it acts with CHRONICLE_TOKEN, over streamable HTTP with
each request's `Authorization: Bearer` token, which the service must have accepted before
any method is answered (401 otherwise, `initialize` included). A failure is a tool error
`code: message`."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from uuid import UUID

import orjson
from chronicle_contract.artifacts import (
    ArtifactLineage,
    CompareArtifacts,
    CreateVariations,
    DraftArtifact,
    GenerateArtifact,
    GetArtifact,
    GetVariations,
    ListArtifacts,
    RagExampleIn,
    RefineArtifact,
    SearchArtifacts,
)
from chronicle_contract.base import Command, Query
from chronicle_contract.conversations import GetConversation, SearchConversations
from chronicle_contract.errors import ChronicleError, invalid_from_validation
from chronicle_contract.hitl import GetRun, ListRuns, PauseRun, ResumeRun
from chronicle_contract.optimizations import (
    GetOptimization,
    InvalidateTrial,
    ListOptimizations,
    OptimizationHistory,
    RestoreTrial,
)
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import AnyHttpUrl, Field, ValidationError
from pydantic.fields import FieldInfo
from starlette.authentication import AuthenticationError

from entrypoints.gateways.clients import UserClients, bearer_token, bounded_token, failure_of
from entrypoints.gateways.seeds.hitl import Approval, Rejection, SessionMessages, answer_checkpoint, session_messages
from entrypoints.gateways.seeds.jobs import ArtifactChat, ArtifactJob, artifact_chat, artifact_job
from entrypoints.gateways.seeds.optimizations import OptimizationResultQuery, optimization_result

INSTRUCTIONS = (
    "Chronicle remembers every layout you generate and how it descends from others. Typical flow: "
    "generate_variations(query, count=3) -> get_artifact(id) -> refine_layout(artifact_id, refinement) -> "
    "get_history(session_id) shows the lineage (parent_id). Conversation, human-in-the-loop and "
    "optimization history tools are here too."
)
Reply = dict[str, Any]
Run = Callable[[Any, Any, str | None], Awaitable[Reply]]


class Tools:
    """What every tool shares: the caller's client, and one way to send a request."""

    def __init__(self, clients: UserClients, token: str | None):
        self.clients = clients
        self.token = token  # stdio: the one user this server acts as

    def token_of(self, ctx: Context) -> str:
        if self.token is not None:
            return self.token
        try:
            return bearer_token((ctx.headers or {}).get("authorization"))
        except ChronicleError as error:
            raise tool_error(error) from None

    async def send(self, ctx: Context, request_type: type[Command[Any]] | type[Query[Any]], run: Run | None = None,
                   **fields: Any) -> Reply:
        """The request made of `fields`, sent (or, for a seed's operation of several requests,
        `run` with it)."""
        token = self.token_of(ctx)
        try:
            request = request_type(**{k: v for k, v in fields.items() if v is not None})
        except ValidationError as error:
            raise tool_error(invalid_from_validation(error)) from None
        release = None
        try:
            client, release = await self.clients.acquire(token)
            return await (run(client, request, None) if run is not None else client.send_json(request))
        except Exception as error:  # a tool error with a code, never an internal
            raise tool_error(failure_of(error)) from None
        finally:
            if release is not None:
                release()


def tool_error(error: ChronicleError) -> ToolError:
    details = f" {orjson.dumps(error.details).decode()}" if error.details else ""
    return ToolError(f"{error.code}: {error.message}{details}")


class ServiceTokenVerifier(TokenVerifier):
    """The SDK's bearer check, answered over the bus: a token is valid when the service
    accepts a request made with it (UserClients.verify), so the gateway needs no key of its own."""

    def __init__(self, clients: UserClients) -> None:
        self.clients = clients

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            user = await self.clients.verify(bounded_token(token))
        except ChronicleError as error:
            if error.code == "unauthorized":
                return None  # (the SDK answers 401)
            raise AuthenticationError(f"{error.code}: {error.message}") from None
        except Exception as error:
            raise AuthenticationError(f"{failure_of(error).code}: the token could not be checked") from None
        return AccessToken(token=token, client_id=user, scopes=[], subject=user)


def build_server(clients: UserClients, token: str | None = None, verifier: TokenVerifier | None = None) -> MCPServer:
    """Over stdio, `token` is the one user the tools act as; over HTTP, `verifier` checks each
    request's bearer token before the SDK answers it."""
    tools = Tools(clients, token)
    # The SDK requires an issuer URL with its auth settings; it is read only by OAuth routes,
    # which this server does not serve (tokens come from Chronicle's own authority).
    auth = AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None) if verifier else None
    server = ChronicleMCP("chronicle", instructions=INSTRUCTIONS, version="1", token_verifier=verifier, auth=auth)

    @server.tool()
    async def generate_layout(
        ctx: Context,
        query: Annotated[str, Field(description="what the layout should be, in words")],
        model: str | None = None,
        temperature: Annotated[float, Field(ge=0, le=2)] = 0.7,
        session_id: Annotated[UUID | None, Field(description="default: your current session")] = None,
        parent_id: Annotated[UUID | None, Field(description="the artifact this one descends from")] = None,
        tags: list[str] | None = None,
        provider: Annotated[str, Field(description="the DSL provider hint, recorded with the layout")] = "d2",
        include_rag: Annotated[
            bool, Field(description="record the RAG examples it was made from (false: none are linked)")
        ] = True,
        rag_examples: Annotated[list[RagExampleIn] | None, Field(description="examples it was made from")] = None,
        persist: Annotated[bool, Field(description="store it in the history (false: only return it)")] = True,
    ) -> Reply:
        """Generate a UI layout from a description and (unless persist=false) store it in the
        history. Returns artifact_id (None when not stored), layout, draft, stats, rag_examples."""
        examples = (rag_examples or []) if include_rag else []
        if not persist:
            made = await tools.send(ctx, DraftArtifact, query=query, model=model, temperature=temperature,
                                    provider=provider)
            return {"artifact_id": None, **made, "rag_examples": [e.model_dump() for e in examples]}
        made = await tools.send(
            ctx, GenerateArtifact, query=query, model=model, temperature=temperature, session_id=session_id,
            parent_id=parent_id, tags=tags, rag_examples=examples, provider=provider,
        )
        return {
            "artifact_id": made["artifact_id"], "session_id": made["session_id"], "parent_id": made["parent_id"],
            "layout": made["layout"], "draft": made["draft"], "stats": made["stats"], "provider": provider,
            "rag_examples": [e.model_dump() for e in examples],
        }

    @server.tool()
    async def generate_variations(
        ctx: Context,
        query: str,
        count: Annotated[int, Field(ge=1, le=10)] = 3,
        temperature_range: Annotated[
            tuple[float, float] | None, Field(description="[low, high], spread over the count; default [0.5, 1.0]")
        ] = None,
        base_artifact_id: Annotated[UUID | None, Field(description="vary this artifact instead of starting anew")] = None,
        session_id: UUID | None = None,
        tags: list[str] | None = None,
    ) -> Reply:
        """Generate `count` variations of a layout as one variation set. Returns
        variation_set_id, artifacts (id, variation_index, temperature, draft, layout),
        diversity_score, rankings (criterion -> artifact ids, best first) and a comparison
        (pairwise structure similarity and shared component types)."""
        made = await tools.send(
            ctx, CreateVariations, query=query, count=count, temperature_range=temperature_range,
            base_artifact_id=base_artifact_id, session_id=session_id, tags=tags,
        )
        stored = [m for m in made["members"] if m["artifact_id"] is not None]
        artifacts = []
        for member in stored:
            found = await tools.send(ctx, GetArtifact, artifact_id=member["artifact_id"])
            artifacts.append({
                "id": member["artifact_id"], "artifact_id": member["artifact_id"], "variation_index": member["index"],
                "temperature": member["temperature"], "draft": found["draft"], "layout": found["layout"],
            })
        pairs = (await tools.send(ctx, CompareArtifacts, artifact_ids=[m["artifact_id"] for m in stored])
                 if len(stored) > 1 else {"artifacts": [], "pairs": []})
        by_index = {m["index"]: m["artifact_id"] for m in stored}
        rankings = {criterion: [by_index[i] for i in order if i in by_index]
                    for criterion, order in made["rankings"].items()}
        return {
            "variation_set_id": made["variation_set_id"],
            "session_id": made["session_id"],
            "artifacts": artifacts,
            "diversity_score": made["diversity"],
            "rankings": rankings,
            "failed": [m for m in made["members"] if m["artifact_id"] is None],
            "comparison": pairs,
        }

    @server.tool()
    async def get_history(
        ctx: Context,
        session_id: UUID | None = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        query: Annotated[
            str | None, Field(description="search the history: by words and by meaning (misspelt or reworded still finds)")
        ] = None,
        offset: Annotated[int, Field(ge=0, le=100_000)] = 0,
    ) -> Reply:
        """Your stored layouts, newest first (one session's, or all), each with parent_id and
        generation so the lineage shows; with `query`, the best matches instead. Returns
        artifacts and total_count."""
        if query:
            found = await tools.send(ctx, SearchArtifacts, q=query, limit=limit)
            return {"artifacts": found["items"], "total_count": len(found["items"]), "query": query}
        page = await tools.send(ctx, ListArtifacts, session_id=session_id, limit=limit, offset=offset)
        return {"artifacts": page["items"], "total_count": page["total"],
                "has_more": offset + len(page["items"]) < page["total"]}

    @server.tool()
    async def get_artifact(
        ctx: Context,
        artifact_id: UUID,
        include_preview: Annotated[bool, Field(description="inline its cached previews (base64)")] = False,
    ) -> Reply:
        """One stored layout: its layout, draft, stats, RAG examples and its lineage (ancestors
        nearest first, descendants), previews when asked."""
        artifact = await tools.send(ctx, GetArtifact, artifact_id=artifact_id, include_preview=include_preview)
        lineage = await tools.send(ctx, ArtifactLineage, artifact_id=artifact_id, direction="both", depth=50)
        # Seed 000's previews: style -> the image (base64 here; null unless include_preview);
        # each one's format, size and hash beside it.
        previews = {preview["style"]: preview.get("data") for preview in artifact["previews"]}
        return {"artifact_id": artifact["id"], **artifact, "previews": previews, "preview_details": artifact["previews"],
                "lineage": {"ancestors": lineage["ancestors"], "descendants": lineage["descendants"]}}

    @server.tool()
    async def refine_layout(
        ctx: Context,
        artifact_id: UUID,
        refinement: Annotated[str, Field(description="what to change, in words")],
        preserve_structure: bool = True,
        model: str | None = None,
        temperature: Annotated[float, Field(ge=0, le=2)] = 0.7,
    ) -> Reply:
        """Refine a stored layout into a new one whose parent it is. Returns artifact_id,
        parent_id, layout, draft, stats."""
        made = await tools.send(
            ctx, RefineArtifact, artifact_id=artifact_id, refinement=refinement,
            preserve_structure=preserve_structure, model=model, temperature=temperature,
        )
        return {key: made[key] for key in ("artifact_id", "parent_id", "session_id", "generation", "layout",
                                           "draft", "stats")}

    @server.tool()
    async def compare_layouts(ctx: Context, artifact_ids: Annotated[list[UUID], Field(min_length=2, max_length=10)]) -> Reply:
        """Compare 2 to 10 stored layouts: size and depth of each, and for each pair the
        structure similarity and the component types they share or not."""
        return await tools.send(ctx, CompareArtifacts, artifact_ids=artifact_ids)

    for name, request_type, description in EXTRA_TOOLS:
        server.add_tool(request_tool(tools, request_type), name=name, description=description)
    for name, request_type, run, description in SEED_TOOLS:
        server.add_tool(request_tool(tools, request_type, run), name=name, description=description)
    server.close_arguments()
    return server


class ChronicleMCP(MCPServer):
    """The SDK's server, with its arguments checked as the service checks a request: an
    argument no tool declares is refused by name, and a refusal is worded `invalid: ...`
    with the fields and rules (not pydantic's own text)."""

    def close_arguments(self) -> None:
        for tool in self._tool_manager.list_tools():
            tool.parameters["additionalProperties"] = False  # (the listed schema says so too)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            checked_arguments(name, tool.fn_metadata, arguments)
        return await super().call_tool(name, arguments, context)


def checked_arguments(name: str, metadata: Any, arguments: dict[str, Any]) -> None:
    declared = {field.alias or key for key, field in metadata.arg_model.model_fields.items()}
    unknown = sorted(set(arguments) - declared)
    try:
        if unknown:
            message = f"unknown argument{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
            raise ChronicleError("invalid", message, [{"field": key, "rule": "unknown", "message": "not an argument of "
                                                       + name} for key in unknown])
        metadata.validate_arguments(arguments)
    except ValidationError as error:
        raise ToolError(f"Error executing tool {name}: {tool_error(invalid_from_validation(error))}") from None
    except ChronicleError as error:
        raise ToolError(f"Error executing tool {name}: {tool_error(error)}") from None


EXTRA_TOOLS: tuple[tuple[str, type[Command[Any]] | type[Query[Any]], str], ...] = (
    ("get_variation_set", GetVariations, "A variation set: its members, diversity and rankings."),
    ("search_conversations", SearchConversations,
     "Search your conversations' messages and titles by words and by meaning, best first, with snippets."),
    ("get_conversation", GetConversation, "A conversation and one page of its messages (messages: limit, order, cursor)."),
    ("list_paused_runs", ListRuns, "Human-in-the-loop checkpoints waiting for an answer, oldest first."),
    ("get_run", GetRun, "A human-in-the-loop run: its checkpoint, prompt and whether it was answered."),
    ("pause_for_human", PauseRun,
     "Pause a run at a checkpoint for a human to approve or edit (the conversation carries the history)."),
    ("resume_run", ResumeRun, "Answer a paused run: approved, optional edits and feedback."),
    ("list_optimizations", ListOptimizations, "Your optimization runs, newest first."),
    ("get_optimization", GetOptimization, "An optimization run: best score so far, rounds, trials, stop reason."),
    ("get_optimization_history", OptimizationHistory,
     "An optimization's rounds and trials with candidates, a page at a time (after_round / after_trial)."),
    ("invalidate_trial", InvalidateTrial,
     "Mark a trial unsound (e.g. scored on a leaked test set): it stays in the history, and bests leave it out."),
    ("restore_trial", RestoreTrial, "Undo a trial's invalidation: it counts again."),
)


# Seeds 002, 003 and 004's operations (entrypoints/gateways/seeds/), their names as the seeds write them.
SEED_TOOLS: tuple[tuple[str, type[Command[Any]] | type[Query[Any]], Run, str], ...] = (
    ("create_artifact_job", ArtifactChat, artifact_chat,
     "Seed 002: ask for an artifact (quiz, summary, layout) in words; returns type artifact_job_created, job_id, "
     "status, artifact_type, message. The same request while its job is active returns that job."),
    ("get_artifact_job", ArtifactJob, artifact_job,
     "Seed 002: a job's status (pending, planning, generating, validating, completed, failed), progress, "
     "artifact_type, plan, result, created_at, updated_at."),
    ("get_optimization_result", OptimizationResultQuery, optimization_result,
     "Seed 003: an optimization's history as OptimizationResult.history (round_index, trials, candidates, "
     "best_score, best_candidate, stop_reason, stopped, best_so_far, timestamp, extra), a page at a time."),
    ("approve_checkpoint", Approval, answer_checkpoint,
     "Seed 004: approve a paused run's checkpoint with edits; chat_history turns the conversation lacks are "
     "added first; returns the chat_history the orchestrator reads."),
    ("reject_checkpoint", Rejection, answer_checkpoint,
     "Seed 004: reject a paused run's checkpoint (feedback, chat_history as approve_checkpoint)."),
    ("get_session_messages", SessionMessages, session_messages,
     "Seed 004: a session's chat history, oldest first: pinned messages and the last hour's by default."),
)


def with_default(info: FieldInfo) -> FieldInfo:
    """A field as a tool's parameter takes it: a default made by a factory (`empty_object`)
    given as the value itself, since a parameter's default sits beside its annotation."""
    if info.default_factory is None:
        return info
    plain = copy.copy(info)
    plain.default, plain.default_factory = info.get_default(call_default_factory=True), None
    return plain


def request_tool(
    tools: Tools, request_type: type[Command[Any]] | type[Query[Any]], run: Run | None = None,
) -> Callable[..., Awaitable[Reply]]:
    """A tool whose parameters are the request model's own fields (its JSON schema)."""
    fields = {name: with_default(info) for name, info in request_type.model_fields.items() if name != "min_position"}

    async def call(ctx: Context, **arguments: Any) -> Reply:
        return await tools.send(ctx, request_type, run, **arguments)

    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)] + [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[info.annotation, info],
            default=inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True),
        )
        for name, info in fields.items()
    ]
    call.__signature__ = inspect.Signature(parameters, return_annotation=Reply)  # type: ignore[attr-defined]
    call.__annotations__ = {"ctx": Context, **{p.name: p.annotation for p in parameters[1:]}, "return": Reply}
    call.__name__ = request_type.__name__
    return call


def run_stdio(settings: Any) -> None:
    """`chronicle mcp`: a desktop agent starts it and talks over stdin/stdout, as CHRONICLE_TOKEN's user."""
    if not settings.nats_url or settings.token is None:
        raise SystemExit("chronicle mcp: set CHRONICLE_TOKEN (`chronicle token USER` makes one)")
    clients = UserClients(settings.nats_url, settings.subject_prefix)
    build_server(clients, settings.token.get_secret_value()).run("stdio")


def streamable_http_app(nats_url: str, prefix: str, host: str = "127.0.0.1") -> Any:
    """`chronicle mcp --http`: streamable HTTP at /mcp, each request acting as its bearer token's
    user; `host` is where it listens (the SDK then accepts that Host header; on loopback only
    loopback names, against DNS rebinding)."""
    # Stateless: a request carries its own token, and no session outlives it.
    clients = UserClients(nats_url, prefix)
    return build_server(clients, verifier=ServiceTokenVerifier(clients)).streamable_http_app(stateless_http=True, host=host)
