"""The REST API over real HTTP against a running Chronicle: seed 001's routes and shapes field
by field, status codes, the export download, CORS, idempotency, job progress as SSE, load."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from chronicle_contract.errors import ChronicleError

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.http_server import HttpServer
from tests.conftest import make_settings
from tests.e2e.conftest import serve_rest
from tests.servers import TestServers

Http = Callable[..., httpx.AsyncClient]
SUMMARY = {"id", "title", "tags", "sessionId", "messageCount", "firstMessage", "createdAt", "updatedAt"}
MESSAGE = {"id", "role", "content", "metadata", "pinned", "messageType", "createdAt", "timestamp"}


@pytest.fixture
async def http(gateway: HttpServer, authority: TokenAuthority) -> AsyncIterator[Http]:
    """`http(user=None)`: an HTTP client with that user's token (a fresh user by default)."""
    opened: list[httpx.AsyncClient] = []

    def make(user: str | None = None, token: str | None = None) -> httpx.AsyncClient:
        token = token or authority.issue(user or f"web-{uuid.uuid4().hex[:10]}")
        client = httpx.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        opened.append(client)
        return client

    yield make
    for client in opened:
        await client.aclose()


async def test_seed_001_routes_and_shapes(http: Http) -> None:
    web = http()
    session = str(uuid.uuid4())  # made by the front end, as seed 001's client does
    seed_body = {"title": "Trip to Lisbon", "tags": ["travel", "plans"], "sessionId": session,
                 "documentContext": {"filename": "lisbon.pdf"}, "embeddingProvider": "llama"}
    started = await web.post("/api/conversations", json=seed_body)
    assert started.status_code == 201, started.text
    body = started.json()
    assert set(body) == {"success", "conversationId", "message", "title", "position"} and body["success"] is True
    assert body["message"] == "Conversation created successfully"
    conversation = body["conversationId"]
    for content in ("Where should we eat in Alfama?", "Try the grilled sardines", "And a pastel de nata"):
        added = await web.post(f"/api/conversations/{conversation}/messages",
                               json={"role": "user", "content": content, "metadata": {"client_ref": 7}})
        assert added.status_code == 201 and added.json()["conversationId"] == conversation
        assert set(added.json()) == {"success", "conversationId", "messageId", "title", "position"}
    # The same front-end session joins the next conversation; the seed's other providers are taken.
    second = await web.post("/api/conversations", json={"title": "Work", "tags": ["work"], "sessionId": session,
                                                         "embeddingProvider": "gemini"})
    assert second.status_code == 201, second.text
    refused = await web.post("/api/conversations", json={"title": "x", "embeddingProvider": "openai"})
    assert refused.status_code == 400 and refused.json()["error"]["details"][0]["field"] == "embeddingProvider"

    listed = (await web.get("/api/conversations", params={"tags": "travel,plans", "sortBy": "createdAt",
                                                          "order": "asc", "limit": 10, "offset": 0})).json()
    assert set(listed) == {"success", "conversations", "total", "limit", "offset", "hasMore"}
    assert listed["total"] == 1 and listed["hasMore"] is False
    (summary,) = listed["conversations"]
    assert set(summary) == SUMMARY and summary["sessionId"] == session
    assert summary["messageCount"] == 3 and summary["firstMessage"] == "Where should we eat in Alfama?"
    assert (await web.get("/api/conversations", params={"limit": 1})).json()["hasMore"] is True
    # The seed's default sort: created_at, newest first (the first one was written to last).
    default = (await web.get("/api/conversations")).json()["conversations"]
    assert [c["title"] for c in default] == ["Work", "Trip to Lisbon"]
    seed_spelling = (await web.get("/api/conversations", params={"sortBy": "created_at", "order": "asc"})).json()
    assert [c["title"] for c in seed_spelling["conversations"]] == ["Trip to Lisbon", "Work"]

    got = (await web.get(f"/api/conversations/{conversation}")).json()
    assert set(got) == {"success", "conversation"}
    shown = got["conversation"]
    assert SUMMARY <= set(shown) and {"messages", "nextCursor", "documentContext", "embeddingProvider"} <= set(shown)
    assert (shown["documentContext"], shown["embeddingProvider"]) == ({"filename": "lisbon.pdf"}, "llama")
    assert [set(m) for m in shown["messages"]] == [MESSAGE] * 3
    assert all(m["timestamp"] == m["createdAt"] for m in shown["messages"])
    assert shown["messages"][0]["metadata"] == {"client_ref": 7}  # free JSON keeps its own keys
    page = (await web.get(f"/api/conversations/{conversation}", params={"limit": 2, "order": "newest"})).json()
    # the newest two, shown oldest first
    assert [m["content"] for m in page["conversation"]["messages"]] == ["Try the grilled sardines", "And a pastel de nata"]
    assert page["conversation"]["nextCursor"]

    # Two messages match: one result for the conversation, its best.
    await web.post(f"/api/conversations/{conversation}/messages", json={"role": "agent", "content": "sardines again"})
    found = (await web.get("/api/conversations/search", params={"q": "sardines"})).json()
    assert set(found) == {"success", "query", "results", "total", "count"} and found["total"] == 1
    (hit,) = found["results"]
    assert set(hit) == {"conversationId", "title", "matchedMessage", "messageId", "timestamp", "snippet",
                        "createdAt", "rank"}
    assert hit["conversationId"] == conversation and "<mark>sardines</mark>" in hit["matchedMessage"]
    assert hit["messageId"] in {m["id"] for m in (await web.get(f"/api/conversations/{conversation}")).json()[
        "conversation"]["messages"]}

    stats = (await web.get("/api/conversations/stats")).json()["stats"]
    assert {"totalConversations", "totalMessages", "averageMessagesPerConversation", "firstConversationDate",
            "lastConversationDate", "topTags"} <= set(stats)
    assert (stats["totalConversations"], stats["totalMessages"], stats["averageMessagesPerConversation"]) == (2, 4, 2.0)
    assert stats["firstConversationDate"] <= stats["lastConversationDate"]
    assert {"tag": "travel", "count": 1} in stats["topTags"]

    updated = await web.put(f"/api/conversations/{conversation}", json={"title": "Lisbon", "tags": ["travel"]})
    assert updated.status_code == 200 and updated.json()["conversationId"] == conversation
    assert updated.json()["conversation"]["title"] == "Lisbon" and updated.json()["conversation"]["tags"] == ["travel"]
    assert len(updated.json()["conversation"]["messages"]) == 4 and isinstance(updated.json()["position"], int)
    assert (await web.get(f"/api/conversations/{conversation}")).json()["conversation"]["title"] == "Lisbon"

    for fmt, media, suffix in (("json", "application/json", "json"), ("markdown", "text/markdown", "md")):
        exported = await web.get(f"/api/conversations/{conversation}/export", params={"format": fmt})
        assert exported.status_code == 200 and exported.headers["content-type"].startswith(media)
        assert exported.headers["content-disposition"] == f'attachment; filename="conversation-{conversation}.{suffix}"'
        assert "pastel de nata" in exported.text
    document = orjson.loads((await web.get(f"/api/conversations/{conversation}/export")).content)
    assert {"sessionId", "documentContext", "embeddingProvider", "messageCount", "createdAt"} <= set(document)
    assert len(document["messages"]) == 4 and {"messageType", "timestamp"} <= set(document["messages"][0])
    assert document["messages"][0]["metadata"] == {"client_ref": 7}

    deleted = await web.delete(f"/api/conversations/{conversation}")
    assert deleted.status_code == 200 and deleted.json()["conversationId"] == conversation
    assert deleted.json()["message"] == "Conversation deleted successfully"
    gone = await web.get(f"/api/conversations/{conversation}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert gone.json()["error"]["message"] == "Conversation not found or access denied"


async def test_a_front_end_session_id_is_its_users_own(http: Http) -> None:
    alice, bob = http(), http()
    session = str(uuid.uuid4())
    assert (await alice.post("/api/conversations", json={"title": "a", "sessionId": session})).status_code == 201
    # Bob cannot join alice's session, nor learn more of it than of one that never existed.
    joined = await bob.post("/api/conversations", json={"title": "b", "sessionId": session})
    assert joined.status_code == 404 and joined.json()["error"]["code"] == "not_found"
    assert (await bob.get("/api/conversations")).json()["total"] == 0
    assert (await bob.get(f"/api/sessions/{session}")).status_code == 404
    mine = (await alice.get(f"/api/sessions/{session}")).json()
    assert mine["id"] == session and mine["conversationCount"] == 1


async def test_a_requests_min_position_is_its_own(http: Http) -> None:
    web = http()
    conversation = (await web.post("/api/conversations", json={"title": "x"})).json()["conversationId"]
    far = await web.get(f"/api/conversations/{conversation}/export", params={"minPosition": 2**62})
    # (beyond anything the store committed: a conflict with its state, named, not a wait)
    assert far.status_code == 409 and far.json()["error"]["details"][0]["field"] == "minPosition"
    assert far.json()["error"]["details"][0]["rule"] == "committed"
    # Nothing of that position stays behind for the next requests (they have none of their own).
    assert (await web.get("/api/jobs")).status_code == 200
    assert (await web.post("/api/conversations", json={"title": "y"})).status_code == 201


async def test_status_codes_and_the_error_envelope(http: Http, chronicle: Chronicle) -> None:
    alice, bob = http(), http()
    conversation = (await alice.post("/api/conversations", json={"title": "mine"})).json()["conversationId"]

    def error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
        assert response.status_code == status, response.text
        body = response.json()
        assert body["success"] is False and body["error"]["code"] == code and body["error"]["message"]
        return dict(body["error"])

    invalid = error(await alice.get("/api/conversations", params={"limit": 500}), 400, "invalid")
    assert invalid["details"][0]["field"] == "limit"
    invalid = error(await alice.get("/api/conversations", params={"sortBy": "color"}), 400, "invalid")
    assert invalid["details"][0]["field"] == "sortBy"  # named as the web names it
    error(await alice.post("/api/conversations", json={"title": "x", "colour": "red"}), 400, "invalid")
    error(await alice.post("/api/conversations", content=b"{not json"), 400, "invalid")
    error(await alice.post(f"/api/conversations/{conversation}/messages", json={"role": "robot", "content": "x"}),
          400, "invalid")
    error(await alice.get("/api/conversations/not-a-uuid"), 400, "invalid")
    # A number given as true or false (pydantic would take it as 1 or 0), and nothing generated.
    generated = await alice.get("/api/artifacts")
    invalid = error(await alice.post("/api/artifacts/generate", json={"query": "a poster", "temperature": False}),
                    400, "invalid")
    assert (invalid["details"][0]["field"], invalid["details"][0]["rule"]) == ("temperature", "number_type")
    assert (await alice.get("/api/artifacts")).json() == generated.json()
    # Another user's conversation is as missing as one that never existed.
    foreign = error(await bob.get(f"/api/conversations/{conversation}"), 404, "not_found")
    missing = error(await bob.get(f"/api/conversations/{uuid.uuid4()}"), 404, "not_found")
    assert foreign == missing and foreign["message"] == "Conversation not found or access denied"  # seed 001's words
    error(await bob.delete(f"/api/conversations/{conversation}"), 404, "not_found")
    async with httpx.AsyncClient(base_url=str(alice.base_url)) as anonymous:
        error(await anonymous.get("/api/conversations"), 401, "unauthorized")
        error(await anonymous.get("/api/conversations", headers={"Authorization": "Bearer not.a.token"}), 401,
              "unauthorized")
        error(await anonymous.get("/api/conversations", headers={"Authorization": "Basic abc"}), 401, "unauthorized")
    run = str(uuid.uuid4())
    paused = await alice.post("/api/hitl/runs", json={"conversationId": conversation, "runId": run,
                                                       "step": "review", "checkpointType": "approval", "prompt": "ok?"})
    assert paused.status_code == 201, paused.text
    assert (await alice.post(f"/api/hitl/runs/{run}/resume", json={"approved": True})).status_code == 200
    error(await alice.post(f"/api/hitl/runs/{run}/resume", json={"approved": True}), 409, "conflict")


async def test_rate_limited_is_429_with_retry_after(servers: TestServers, authority: TokenAuthority, tmp_path: Path) -> None:
    with servers.fresh_database() as url:
        settings = make_settings(url, servers.nats_url, tmp_path).model_copy(update={"limit_requests_per_minute": 3})
        limited = await bootstrap(settings)
        assert limited.engine is not None and await asyncio.to_thread(limited.engine.wait_prepared, 120)
        server = await serve_rest(limited.nats_url, settings.subject_prefix)
        try:
            headers = {"Authorization": f"Bearer {authority.issue('hasty')}"}
            async with httpx.AsyncClient(base_url=server.url, headers=headers) as web:
                statuses = [(await web.get("/api/sessions")).status_code for _ in range(5)]
                refused = await web.get("/api/sessions")
            assert statuses[:3] == [200, 200, 200] and refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1 and refused.json()["error"]["code"] == "rate_limited"
        finally:
            await server.stop()
            await limited.stop()


async def test_no_service_is_503(chronicle: Chronicle, authority: TokenAuthority) -> None:
    server = await serve_rest(chronicle.nats_url, f"nobody{uuid.uuid4().hex[:8]}")
    try:
        headers = {"Authorization": f"Bearer {authority.issue('someone')}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as web:
            answer = await web.get("/api/conversations")
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "unavailable"
    finally:
        await server.stop()


async def test_idempotency_key_is_honoured(http: Http) -> None:
    web = http()
    key = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
    first = (await web.post("/api/conversations", json={"title": "once"}, headers=key)).json()
    again = (await web.post("/api/conversations", json={"title": "once"}, headers=key)).json()
    assert first == again
    assert (await web.get("/api/conversations")).json()["total"] == 1
    too_long = await web.post("/api/conversations", json={"title": "x"}, headers={"Idempotency-Key": "k" * 300})
    assert too_long.status_code == 400 and too_long.json()["error"]["details"][0]["field"] == "Idempotency-Key"


async def test_cors_lets_a_front_end_on_another_origin_call(http: Http) -> None:
    web = http()
    preflight = await web.options("/api/conversations", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,idempotency-key"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert {"authorization", "content-type", "idempotency-key"} <= {
        h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    listed = await web.get("/api/conversations", headers={"Origin": "http://localhost:5173"})
    assert listed.headers["access-control-allow-origin"] == "*"


async def test_openapi_and_docs_come_from_the_models(http: Http) -> None:
    web = http()
    document = (await web.get("/openapi.json")).json()
    listing = document["paths"]["/api/conversations"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"limit", "offset", "tags", "sortBy", "order"}
    assert set(listing["responses"]) >= {"200", "400", "401", "404", "409", "429", "503"}
    add = document["paths"]["/api/conversations/{conversationId}/messages"]["post"]["requestBody"]
    assert set(add["content"]["application/json"]["schema"]["properties"]) >= {"role", "content", "metadata", "messageType"}
    assert "/api/jobs/{jobId}/events" in document["paths"] and "/api/artifacts/{artifactId}/lineage" in document["paths"]
    assert (await web.get("/docs")).status_code == 200 and (await web.get("/redoc")).status_code == 200


async def test_the_openapi_document_says_what_the_gateway_does(http: Http) -> None:
    web = http()
    paths = (await web.get("/openapi.json")).json()["paths"]
    one = paths["/api/conversations/{conversationId}"]["get"]["parameters"]
    assert {p["name"]: p["schema"].get("format") for p in one if p["in"] == "path"} == {"conversationId": "uuid"}
    assert {"limit", "order", "cursor"} <= {p["name"] for p in one} and "messages" not in {p["name"] for p in one}
    (sort,) = [p for p in paths["/api/conversations"]["get"]["parameters"] if p["name"] == "sortBy"]
    assert {"created_at", "createdAt", "updated_at", "updatedAt", "title"} == set(sort["schema"]["enum"])
    assert sort["schema"]["default"] == "created_at"
    assert {"400", "401", "404", "503"} <= set(paths["/api/jobs/{jobId}/events"]["get"]["responses"])

    # An undeclared method: 405 naming the path's methods, also where a path looks like an id.
    for method, path in (("PATCH", "/api/conversations"), ("PUT", "/api/conversations/search")):
        answer = await web.request(method, path)
        assert answer.status_code == 405 and answer.json()["error"]["code"] == "invalid"
        assert "GET" in answer.headers["allow"] and method not in answer.headers["allow"]
    conversation = (await web.post("/api/conversations", json={"title": "x"})).json()["conversationId"]
    # 0 is no boolean in a JSON body.
    paused = await web.post("/api/hitl/runs", json={"conversationId": conversation, "step": "s", "checkpointType": "c",
                                                    "prompt": "ok?", "conversationMode": 0})
    assert paused.status_code == 400 and paused.json()["error"]["details"][0]["field"] == "conversationMode"
    # Every declared field is there, a no-op's position too.
    unchanged = (await web.put(f"/api/conversations/{conversation}", json={})).json()
    assert "position" in unchanged and unchanged["conversation"]["title"] == "x"
    session = (await web.post("/api/sessions", json={"name": "s"})).json()["sessionId"]
    assert set((await web.post(f"/api/sessions/{session}/close")).json()) >= {"success", "position"}
    # A cursor of the declared shape that this service never gave names no page: 404, not 400.
    assert (await web.get("/api/conversations", params={"cursor": "0"})).status_code == 404
    # An object parameter is JSON in the query string, as declared.
    pareto = await web.get(f"/api/optimizations/{uuid.uuid4()}/pareto", params={"directions": '{"score": "maximize"}'})
    assert pareto.status_code == 404, pareto.text


async def test_other_capabilities_in_the_same_style(http: Http) -> None:
    web = http()
    generated = await web.post("/api/artifacts/generate", json={"query": "dashboard with charts", "tags": ["ui"]})
    assert generated.status_code == 201, generated.text
    artifact = generated.json()["artifactId"]
    refined = (await web.post(f"/api/artifacts/{artifact}/refine", json={"refinement": "add a sidebar"})).json()
    lineage = (await web.get(f"/api/artifacts/{refined['artifactId']}/lineage", params={"direction": "ancestors"})).json()
    assert [a["id"] for a in lineage["ancestors"]] == [artifact]
    listed = (await web.get("/api/artifacts", params={"tags": "ui"})).json()
    assert listed["total"] == 2 and {"parentId", "variationSetId"} <= set(listed["items"][0])
    shown = (await web.get(f"/api/artifacts/{artifact}", params={"includePreview": "true"})).json()
    assert shown["layout"] and "componentTypes" in shown
    variations = (await web.post("/api/variations", json={"query": "pricing page", "count": 2})).json()
    assert len((await web.get(f"/api/variations/{variations['variationSetId']}")).json()["members"]) == 2
    ids = ",".join(m["artifactId"] for m in variations["members"])
    assert len((await web.get("/api/artifacts/compare", params={"artifactIds": ids})).json()["pairs"]) == 1
    assert (await web.get("/api/hitl/runs")).json()["items"] == []
    assert (await web.get("/api/optimizations")).json()["total"] == 0
    someone_elses = f"/api/trials/{uuid.uuid4()}/invalidate"
    assert (await web.post(someone_elses, json={"reason": "scored on a leaked test set"})).status_code == 404
    assert (await web.post(someone_elses, json={})).json()["error"]["details"][0]["field"] == "reason"
    timeline = await web.get(f"/api/audit/stream/{artifact}")
    assert timeline.status_code == 404  # (no such route)
    stream = (await web.get(f"/api/audit/streams/{artifact}")).json()
    assert stream["events"][0]["version"] == 1
    chain = (await web.get(f"/api/audit/streams/{artifact}/verify", params={"limit": 1})).json()
    assert chain == {"success": True, "aggregateId": artifact, "eventsChecked": 1, "intact": True, "breaks": [],
                     "throughVersion": 1, "nextAfterVersion": 1 if len(stream["events"]) > 1 else None}
    too_many = await web.get(f"/api/audit/streams/{artifact}/verify", params={"limit": 1001})
    assert too_many.status_code == 400 and too_many.json()["error"]["details"][0]["field"] == "limit"
    assert (await http().get(f"/api/audit/streams/{artifact}/verify")).status_code == 404  # another user's


async def test_job_progress_as_server_sent_events(http: Http) -> None:
    web = http()
    requested = (await web.post("/api/jobs", json={"content": "Photosynthesis turns light into sugar.",
                                                   "artifactType": "summary"})).json()
    events: list[tuple[str, dict[str, Any]]] = []
    async with web.stream("GET", f"/api/jobs/{requested['jobId']}/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        kind = ""
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((kind, orjson.loads(line[6:])))
    assert events[0][0] == "job" and events[-1][0] == "job"
    assert events[-1][1]["status"] == "completed" and events[-1][1]["progress"] == 100
    progress = [e["progress"] for kind, e in events if kind == "progress"]
    assert progress == sorted(progress)


async def test_twenty_users_two_thousand_requests_lose_nothing(http: Http) -> None:
    users = [http() for _ in range(20)]

    async def one_user(web: httpx.AsyncClient) -> tuple[str, int]:
        conversation = (await web.post("/api/conversations", json={"title": "load"})).json()["conversationId"]
        statuses = [
            (await web.post(f"/api/conversations/{conversation}/messages", json={"role": "user", "content": f"m{i}"})).status_code
            if i % 2 == 0 else (await web.get(f"/api/conversations/{conversation}", params={"limit": 5})).status_code
            for i in range(99)
        ]
        assert set(statuses) == {200, 201}, statuses
        return conversation, statuses.count(201)

    results = await asyncio.gather(*(one_user(web) for web in users))
    for web, (conversation, added) in zip(users, results, strict=True):
        shown = (await web.get(f"/api/conversations/{conversation}")).json()["conversation"]
        assert shown["messageCount"] == added == 50
        assert [m["content"] for m in shown["messages"]] == [f"m{i}" for i in range(0, 99, 2)]


async def test_what_an_attacker_sends_is_refused_before_it_costs_anything(http: Http) -> None:
    alice, bob = http(), http()
    mine = (await alice.post("/api/conversations", json={"title": "alice"})).json()["conversationId"]
    other = (await alice.post("/api/conversations", json={"title": "also alice"})).json()["conversationId"]

    def refused(response: httpx.Response, status: int = 400, code: str = "invalid") -> str:
        assert response.status_code == status, response.text
        assert response.json()["success"] is False and response.json()["error"]["code"] == code
        return str(response.json()["error"]["message"])

    # The path's id cannot be overridden by the same field under its other name.
    assert "given twice" in refused(await alice.delete(
        f"/api/conversations/{mine}", params={"conversationId": mine, "conversation_id": other}))
    refused(await alice.put(f"/api/conversations/{mine}", json={"conversation_id": other, "title": "x"}))
    assert (await alice.get(f"/api/conversations/{other}")).json()["conversation"]["title"] == "also alice"
    # Too big, too deep, or no token: refused without the body being read or kept.
    reader, writer = await asyncio.open_connection(alice.base_url.host, alice.base_url.port)
    writer.write(f"POST /api/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: {alice.headers['authorization']}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {10**9}\r\n\r\n".encode())  # and no body
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    assert head.startswith(b"HTTP/1.1 400 ")  # answered from the declared length, nothing read

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(3_000):
            yield b" " * 1024

    assert "at most" in refused(await alice.post("/api/conversations", content=endless()))
    deep = {"role": "user", "content": "x", "metadata": {"a": orjson.loads("[" * 300 + "]" * 300)}}
    assert "deeper" in refused(await alice.post(f"/api/conversations/{mine}/messages", json=deep))
    async with httpx.AsyncClient(base_url=str(alice.base_url)) as anonymous:
        refused(await anonymous.post("/api/conversations", content=endless()), 401, "unauthorized")
    # Unknown routes and methods answer in the envelope too.
    refused(await bob.get("/api/nothing-here"), 404, "not_found")
    refused(await bob.patch("/api/conversations"), 405, "invalid")


async def test_a_connection_in_use_is_never_closed_under_its_user(chronicle: Chronicle, authority: TokenAuthority) -> None:
    clients = UserClients(chronicle.nats_url, chronicle.settings.subject_prefix, max_open=1)
    try:
        with pytest.raises(ChronicleError) as not_a_jwt:
            await clients.acquire("garbage")
        assert not_a_jwt.value.code == "unauthorized" and len(clients) == 0
        alice, release_alice = await clients.acquire(authority.issue("alice-held"))
        with pytest.raises(ChronicleError) as full:
            await clients.acquire(authority.issue("bob-waits"))
        assert full.value.code == "unavailable" and not alice.nc.is_closed
        release_alice()
        bob, release_bob = await clients.acquire(authority.issue("bob-waits"))
        release_bob()
        assert len(clients) == 1 and not bob.nc.is_closed
    finally:
        await clients.close()


async def test_a_huge_header_sent_slowly_is_cut_off(gateway: HttpServer, http: Http) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", int(gateway.url.rsplit(":", 1)[1]))
    writer.write(b"GET /api/conversations HTTP/1.1\r\nHost: x\r\nX-Padding: ")
    for _ in range(260):  # just past 256 KiB of one header, a KiB at a time; then wait for the answer
        writer.write(b"a" * 1024)
        await writer.drain()
    answer = await asyncio.wait_for(reader.read(200), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert (await http().get("/api/conversations")).status_code == 200  # everyone else is served
