"""`chronicle mcp` driven by the MCP SDK's own client, over stdio and streamable HTTP,
against a running Chronicle: seed 000's flow, schemas, and tool errors."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.mcp import streamable_http_app

SEED_TOOLS = {"generate_layout", "generate_variations", "get_history", "get_artifact", "refine_layout", "compare_layouts"}


def result(called: Any) -> dict[str, Any]:
    assert not called.is_error, called.content
    return dict(called.structured_content)


def error_text(called: Any) -> str:
    """A tool error's `code: message` (the SDK puts "Error executing tool NAME: " before it)."""
    assert called.is_error
    text = " ".join(part.text for part in called.content)
    assert text.startswith("Error executing tool "), text
    return text.split(": ", 1)[1]


@pytest.fixture
async def mcp_http(chronicle: Chronicle) -> AsyncIterator[str]:
    app = streamable_http_app(chronicle.nats_url, chronicle.settings.subject_prefix)
    server = await HttpServer(app, "127.0.0.1", free_port()).start()
    yield f"{server.url}/mcp"
    await server.stop()


def stdio_server(chronicle: Chronicle, token: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    env.update({"CHRONICLE_NATS_URL": chronicle.nats_url, "CHRONICLE_TOKEN": token,
                "CHRONICLE_SUBJECT_PREFIX": chronicle.settings.subject_prefix})
    return StdioServerParameters(command=sys.executable, args=["-m", "entrypoints.cli", "mcp"], env=env)


async def seed_flow(client: Client) -> None:
    """Seed 000's flow: three variations, pick the second, refine it, the history shows the lineage."""
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert SEED_TOOLS <= set(listed)
    # Seed 000's generate_layout, argument by argument with its defaults.
    generate = listed["generate_layout"].input_schema
    assert generate["required"] == ["query"] and generate["additionalProperties"] is False
    seed_defaults = {"model": None, "temperature": 0.7, "provider": "d2", "include_rag": True, "session_id": None,
                     "parent_id": None, "tags": None, "persist": True}
    assert {name: generate["properties"][name].get("default") for name in seed_defaults} == seed_defaults
    variations = listed["generate_variations"].input_schema["properties"]
    assert (variations["count"]["default"], variations["temperature_range"]["default"]) == (3, None)
    assert {"base_artifact_id", "query"} <= set(variations)
    assert listed["get_history"].input_schema["properties"]["limit"]["default"] == 20
    assert listed["refine_layout"].input_schema["properties"]["preserve_structure"]["default"] is True
    assert listed["get_artifact"].input_schema["properties"]["include_preview"]["default"] is False
    assert "description" in listed["search_conversations"].model_dump() and listed["search_conversations"].description
    assert listed["invalidate_trial"].input_schema["required"] == ["trial_id", "reason"]

    # The seed's example: three variations at temperatures 0.5, 0.75, 1.0, ranked by artifact id.
    made = result(await client.call_tool("generate_variations", {"query": "settings page with toggles", "count": 3}))
    assert set(made) >= {"variation_set_id", "artifacts", "diversity_score", "rankings"}
    assert [(a["variation_index"], a["temperature"]) for a in made["artifacts"]] == [(0, 0.5), (1, 0.75), (2, 1.0)]
    assert all({"id", "draft", "temperature"} <= set(a) for a in made["artifacts"])
    ids = {a["id"] for a in made["artifacts"]}
    assert {"complexity", "depth"} <= set(made["rankings"])
    assert all(sorted(ranked) == sorted(ids) for ranked in made["rankings"].values())
    assert 0 <= made["diversity_score"] <= 1 and len(made["comparison"]["pairs"]) == 3
    second = made["artifacts"][1]["id"]

    refined = result(await client.call_tool(
        "refine_layout", {"artifact_id": second, "refinement": "add a header section at the top"}))
    assert refined["parent_id"] == second and refined["artifact_id"] != second
    assert set(refined) >= {"layout", "draft", "stats"}

    history = result(await client.call_tool("get_history", {"limit": 10}))
    assert history["total_count"] == 4
    by_id = {a["id"]: a for a in history["artifacts"]}
    assert by_id[refined["artifact_id"]]["parent_id"] == second
    assert by_id[refined["artifact_id"]]["generation"] == by_id[second]["generation"] + 1

    shown = result(await client.call_tool("get_artifact", {"artifact_id": refined["artifact_id"]}))
    assert [a["id"] for a in shown["lineage"]["ancestors"]] == [second]
    assert shown["layout"] == refined["layout"] and "stats" in shown and shown["previews"] == {}

    draft = result(await client.call_tool("generate_layout", {"query": "login form", "persist": False}))
    assert draft["artifact_id"] is None and draft["layout"]
    example = {"id": "corpus-7", "score": 0.9}
    stored = result(await client.call_tool("generate_layout", {"query": "login form", "tags": ["auth"],
                                                               "provider": "plantuml", "rag_examples": [example]}))
    assert set(stored) >= {"artifact_id", "layout", "draft", "stats", "rag_examples"}
    assert [e["id"] for e in stored["rag_examples"]] == ["corpus-7"] and stored["provider"] == "plantuml"
    assert result(await client.call_tool("get_artifact", {"artifact_id": stored["artifact_id"]}))["provider"] == "plantuml"
    without = result(await client.call_tool("generate_layout", {"query": "login form", "include_rag": False,
                                                                "persist": False, "rag_examples": [example]}))
    assert without["rag_examples"] == []
    assert result(await client.call_tool("get_history", {"limit": 10}))["total_count"] == 5  # the draft was not stored
    compared = result(await client.call_tool("compare_layouts", {"artifact_ids": [second, stored["artifact_id"]]}))
    assert len(compared["pairs"]) == 1


async def test_seed_000_flow_over_stdio(chronicle: Chronicle, authority: TokenAuthority) -> None:
    token = authority.issue(f"mcp-{uuid.uuid4().hex[:8]}")
    async with Client(stdio_server(chronicle, token), read_timeout_seconds=60) as client:
        await seed_flow(client)
        foreign = str(uuid.uuid4())
        text = error_text(await client.call_tool("get_artifact", {"artifact_id": foreign}))
        assert text.startswith("not_found: artifact") and foreign in text
        text = error_text(await client.call_tool("generate_variations", {"query": "x", "count": 11}))
        assert text.startswith("invalid: invalid request: count") and "pydantic" not in text
        # An argument no tool declares is refused by name, before anything is generated.
        text = error_text(await client.call_tool("generate_layout", {"query": "x", "colour": "red"}))
        assert text.startswith("invalid: unknown argument: colour")
        assert result(await client.call_tool("get_history", {}))["total_count"] == 5


async def test_seed_000_flow_over_http_each_request_as_its_token(
    chronicle: Chronicle, authority: TokenAuthority, mcp_http: str
) -> None:
    alice, bob = (authority.issue(f"{name}-{uuid.uuid4().hex[:8]}") for name in ("alice", "bob"))
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice}"}) as http:
        async with Client(streamable_http_client(mcp_http, http_client=http)) as client:
            await seed_flow(client)
            mine = result(await client.call_tool("get_history", {"limit": 1}))["artifacts"][0]["id"]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bob}"}) as http:
        async with Client(streamable_http_client(mcp_http, http_client=http)) as client:
            # Alice's artifact is bob's tool error, in the same words as a missing one.
            text = error_text(await client.call_tool("get_artifact", {"artifact_id": mine}))
            assert text.startswith(f"not_found: artifact {mine} not found")
            assert result(await client.call_tool("get_history", {}))["total_count"] == 0
    # (Without a valid token nothing is answered, initialize included: tests/e2e/test_gateway_edges.py.)
    # A conversation tool derived from its request model answers too.
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice}"}) as http:
        async with Client(streamable_http_client(mcp_http, http_client=http)) as client:
            found = result(await client.call_tool("search_conversations", {"q": "nothing-matches-this"}))
            assert found["items"] == [] and json.dumps(found)
