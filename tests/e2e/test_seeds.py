"""Seeds 002, 003 and 004 over real HTTP and the official MCP client's tools: each document's
routes, fields, status values, defaults and messages as it writes them (docs/seeds.md)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.mcp import streamable_http_app
from tests.conftest import ClientFactory
from tests.e2e.test_mcp import error_text, result
from tests.waiting import eventually

STATUSES = {"pending", "planning", "generating", "validating", "completed", "failed"}  # seed 002's states


@pytest.fixture
async def web(gateway: HttpServer, authority: TokenAuthority) -> AsyncIterator[httpx.AsyncClient]:
    token = authority.issue(f"seed-{uuid.uuid4().hex[:10]}")
    async with httpx.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=30) as client:
        yield client


async def test_seed_002_artifact_job_asked_in_words_and_polled(web: httpx.AsyncClient) -> None:
    session = str(uuid.uuid4())
    await web.post("/api/conversations", json={"title": "Biology", "sessionId": session})
    # The seed's request and reply, field by field.
    created = await web.post("/ai/chat", json={"message": "Create a quiz on photosynthesis", "session_id": session})
    assert created.status_code == 202, created.text
    body = created.json()
    assert body["type"] == "artifact_job_created" and body["artifact_type"] == "quiz"
    assert body["status"] in STATUSES and body["session_id"] == session
    job = body["job_id"]
    assert body["message"] == f"Artifact generation job created. Job ID: {job}"

    async def polled() -> dict[str, Any]:
        reply = await web.get(f"/ai/artifact/{job}")
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    first = await polled()
    assert {"job_id", "status", "progress", "artifact_type", "created_at", "updated_at", "result"} <= set(first)
    assert first["job_id"] == job and first["artifact_type"] == "quiz" and first["status"] in STATUSES
    done: dict[str, Any] = {}

    async def completed() -> bool:
        done.update(await polled())
        return done["status"] in ("completed", "failed")

    await eventually(completed, "the job to end")
    assert done["status"] == "completed" and done["progress"] == 100  # seed 002: completed, 100%
    assert len(done["result"]["questions"]) == 5  # the seed's default num_questions
    assert set(done["result"]["questions"][0]) >= {"question", "options", "correct_answer", "explanation"}
    assert done["created_at"] <= done["updated_at"]

    # Idempotency: the same request while its job is active answers that job; once it is
    # completed, a new one.
    again = (await web.post("/ai/chat", json={"message": "Create a quiz on photosynthesis",
                                              "session_id": session})).json()
    assert again["job_id"] != job and again["type"] == "artifact_job_created"
    # The type given beside the words, and words naming none.
    named = (await web.post("/ai/chat", json={"message": "Photosynthesis, please", "artifact_type": "summary",
                                              "options": {"key_points": 3}})).json()
    assert named["artifact_type"] == "summary"
    vague = await web.post("/ai/chat", json={"message": "Hello there"})
    assert vague.status_code == 400
    (detail,) = vague.json()["error"]["details"]
    assert (detail["field"], detail["rule"]) == ("message", "artifact_intent")
    assert (await web.get(f"/ai/artifact/{uuid.uuid4()}")).status_code == 404
    assert (await web.post("/ai/chat", json={"message": "A settings PAGE"})).json()["artifact_type"] == "layout"
    unnamed = await web.post("/ai/chat", json={"message": "A quiz", "options": {"num_questions": 3}})
    assert unnamed.status_code == 400 and unnamed.json()["error"]["details"][0]["rule"] == "needs_artifact_type"


async def test_seed_003_optimization_result_history(web: httpx.AsyncClient, connect: ClientFactory,
                                                    authority: TokenAuthority) -> None:
    user = f"opt-{uuid.uuid4().hex[:10]}"
    client = await connect(user)
    web.headers["Authorization"] = f"Bearer {authority.issue(user)}"
    started = await client.optimizations.start(name="prompt search", optimizer="evo")
    first = await client.optimizations.start_round(started.optimization_id, extras={"population": 2})
    candidate = {"id": "c1", "candidate": {"messages": [{"role": "system", "content": "Be brief."}]}}
    await client.optimizations.record_trial(first.round_id, candidate=candidate, score=0.5,
                                            metrics={"primary": 0.5, "length": 12}, dataset="dev",
                                            extras={"origin": "fresh", "parents": []})
    await client.optimizations.record_trial(first.round_id, candidate={"id": "c2"}, score=0.75,
                                            extras={"origin": "mutation", "parents": ["c1"], "ops": ["swap"]})
    ended = await client.optimizations.end_round(first.round_id, stop_reason="budget",
                                                 extras={"pareto_front": [{"id": "c2", "metrics": {"primary": 0.75}}]})
    # (written by another connection: the read waits for that write's position)
    reply = await web.get(f"/api/optimizations/{started.optimization_id}/result",
                          params={"min_position": ended.position})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    (round_,) = body["history"]
    assert body["history"] == body["rounds"] and body["optimization_id"] == str(started.optimization_id)
    # OptimizerRound, as seed 003's nested types name it.
    assert {"round_index", "trials", "candidates", "best_score", "best_candidate", "stop_reason", "stopped",
            "best_so_far", "timestamp", "extra"} <= set(round_)
    assert (round_["round_index"], round_["best_score"], round_["stop_reason"], round_["stopped"]) == (0, 0.75,
                                                                                                      "budget", True)
    assert round_["best_so_far"] == 0.75 and round_["best_candidate"] == {"id": "c2"}
    assert round_["extra"]["population"] == 2 and round_["extra"]["pareto_front"][0]["id"] == "c2"
    # OptimizerTrial.
    trial = round_["trials"][0]
    assert {"trial_index", "score", "candidate", "metrics", "dataset", "extra", "timestamp"} <= set(trial)
    assert (trial["trial_index"], trial["score"], trial["dataset"]) == (0, 0.5, "dev")
    assert trial["candidate"] == candidate and trial["metrics"] == {"primary": 0.5, "length": 12}
    assert round_["trials"][1]["extra"] == {"origin": "mutation", "parents": ["c1"], "ops": ["swap"]}


async def pause(web: httpx.AsyncClient, conversation: str, step: str) -> str:
    paused = await web.post("/api/hitl/runs", json={
        "conversationId": conversation, "step": step, "checkpointType": "error_recovery",
        "prompt": "The aspect ratio was refused: which one do you want?", "conversationMode": True,
        "data": {"error_type": "validation", "current_form_values": {"aspect_ratio": "match_input_img"}},
    })
    assert paused.status_code == 201, paused.text
    return str(paused.json()["runId"])


async def test_seed_004_checkpoint_approved_and_rejected_with_chat_history(web: httpx.AsyncClient) -> None:
    session = str(uuid.uuid4())
    conversation = (await web.post("/api/conversations", json={"title": "Sunset", "sessionId": session})).json()[
        "conversationId"]
    await web.post(f"/api/conversations/{conversation}/messages",
                   json={"role": "user", "content": "Create a 1:1 sunset image"})
    run = await pause(web, conversation, "api_call")

    # GET /api/sessions/:sessionId/messages: {success, messages, count}, each row as the seed's
    # ChatHistoryClient reads it (sender, content, created_at).
    history = (await web.get(f"/api/sessions/{session}/messages")).json()
    assert history["success"] is True and history["count"] == len(history["messages"]) >= 1
    first = history["messages"][0]
    assert (first["sender"], first["content"]) == ("user", "Create a 1:1 sunset image")
    assert {"role", "timestamp", "created_at", "pinned"} <= set(first) and first["timestamp"] == first["created_at"]
    assert (await web.get(f"/api/sessions/{uuid.uuid4()}/messages")).status_code == 404
    elsewhere = await web.post(f"/api/hitl/{run}/approve", json={"sessionId": str(uuid.uuid4())})
    assert elsewhere.status_code == 409 and elsewhere.json()["error"]["details"][0]["field"] == "sessionId"

    # The checkpoint's step is checked when given.
    wrong = await web.post(f"/api/hitl/{run}/approve", json={"approved": True, "step": "planning"})
    assert wrong.status_code == 409 and wrong.json()["error"]["details"][0]["field"] == "step"
    # The seed's HITLApproval with chatHistory (Approach B): the turn the conversation lacks is added.
    approved = await web.post(f"/api/hitl/{run}/approve", json={
        "approved": True, "edits": {"aspect_ratio": "1:1"}, "step": "api_call", "sessionId": session,
        "chatHistory": [{"role": "user", "content": "Create a 1:1 sunset image"},
                        {"role": "user", "content": "Use 1:1 ratio"}],
    })
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert (body["success"], body["runId"], body["approved"], body["status"], body["addedMessages"]) == (
        True, run, True, "resumed", 1)
    turns = [(t["role"], t["content"]) for t in body["chatHistory"]]
    assert turns.count(("user", "Create a 1:1 sunset image")) == 1 and ("user", "Use 1:1 ratio") in turns
    assert all(t["timestamp"] for t in body["chatHistory"])
    status = (await web.get(f"/api/hitl/runs/{run}")).json()
    assert (status["status"], status["approved"], status["edits"]) == ("resumed", True, {"aspect_ratio": "1:1"})
    # The checkpoint as the seed's pause response names it: step, message, checkpoint type, conversation mode, data.
    assert (status["step"], status["checkpointType"], status["conversationMode"]) == ("api_call", "error_recovery", True)
    assert status["message"] == status["prompt"] == "The aspect ratio was refused: which one do you want?"
    assert status["data"]["current_form_values"] == {"aspect_ratio": "match_input_img"}

    rejected_run = await pause(web, conversation, "api_call")
    rejected = (await web.post(f"/api/hitl/{rejected_run}/reject", json={"feedback": "Fix it"})).json()
    assert (rejected["approved"], rejected["status"], rejected["addedMessages"]) == (False, "resumed", 0)
    assert (await web.get(f"/api/hitl/runs/{rejected_run}")).json()["approved"] is False

    missing = await web.post(f"/api/hitl/run-{uuid.uuid4().hex}/approve", json={"approved": True})
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "HITL run not found"  # seed 004's words


async def test_seeds_002_003_004_as_mcp_tools(chronicle: Chronicle, authority: TokenAuthority,
                                              web: httpx.AsyncClient, connect: ClientFactory) -> None:
    """The same operations through the official MCP client, their results in the seeds' snake_case."""
    user = f"agent-{uuid.uuid4().hex[:10]}"
    token = authority.issue(user)
    web.headers["Authorization"] = f"Bearer {token}"
    conversation = (await web.post("/api/conversations", json={"title": "Sunset"})).json()["conversationId"]
    run = await pause(web, conversation, "api_call")
    started = await (await connect(user)).optimizations.start(name="search", optimizer="random")
    optimization, written = started.optimization_id, started.position
    # (written over other connections: read once at their positions, so they are projected)
    await web.get(f"/api/optimizations/{optimization}", params={"minPosition": written})
    assert (await web.get(f"/api/hitl/runs/{run}")).json()["status"] == "paused"
    app = streamable_http_app(chronicle.nats_url, chronicle.settings.subject_prefix)
    server = await HttpServer(app, "127.0.0.1", free_port()).start()
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
                Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"create_artifact_job", "get_artifact_job", "get_optimization_result", "approve_checkpoint",
                    "reject_checkpoint", "get_session_messages"} <= names
            job = result(await client.call_tool("create_artifact_job", {"message": "Summarize photosynthesis"}))
            assert (job["type"], job["artifact_type"]) == ("artifact_job_created", "summary")
            assert job["message"] == f"Artifact generation job created. Job ID: {job['job_id']}"
            polled = result(await client.call_tool("get_artifact_job", {"job_id": job["job_id"]}))
            assert polled["job_id"] == job["job_id"] and polled["status"] in STATUSES
            answered = result(await client.call_tool("approve_checkpoint", {
                "run_id": run, "edits": {"aspect_ratio": "1:1"},
                "chat_history": [{"role": "user", "content": "Use 1:1 ratio"}]}))
            assert (answered["approved"], answered["status"], answered["added_messages"]) == (True, "resumed", 1)
            assert {"role": "user", "content": "Use 1:1 ratio"}.items() <= answered["chat_history"][-1].items()
            history = result(await client.call_tool("get_optimization_result", {"optimization_id": str(optimization)}))
            assert history["history"] == [] and history["optimization_id"] == str(optimization)
            refused = await client.call_tool("reject_checkpoint", {"run_id": run, "chatHistory": []})
            assert error_text(refused).startswith("invalid: unknown argument: chatHistory")
    finally:
        await server.stop()
