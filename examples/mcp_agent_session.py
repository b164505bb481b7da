"""Seed 000's story as an agent lives it: an MCP session with `chronicle mcp` over stdio (the
official `mcp` SDK's client, as a desktop agent connects). The agent asks for three
variations of a layout, picks the second, refines it, and finds the lineage in its history.

Run it beside a running service (`chronicle mcp` finds the local one by itself):

    ./dev serve &
    CHRONICLE_TOKEN=$(./dev chronicle token alice) ./dev python examples/mcp_agent_session.py

The variables it is given (CHRONICLE_TOKEN; CHRONICLE_DATA_DIR or CHRONICLE_NATS_URL for a
service elsewhere) go to `chronicle mcp` as a desktop MCP configuration's `env` would.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPOSITORY = Path(__file__).resolve().parent.parent


def chronicle_mcp() -> StdioServerParameters:
    """The command a desktop MCP configuration names: the project's `chronicle mcp`."""
    installed = Path(sys.executable).parent / "chronicle"
    command, args = (str(installed), ["mcp"]) if installed.exists() else (sys.executable, ["-m", "entrypoints.cli", "mcp"])
    return StdioServerParameters(command=command, args=args, env=dict(os.environ), cwd=REPOSITORY)


def result(called: Any) -> dict[str, Any]:
    if called.is_error:
        sys.exit(" ".join(part.text for part in called.content))
    return dict(called.structured_content)


async def main() -> None:
    if not os.environ.get("CHRONICLE_TOKEN"):
        sys.exit("set CHRONICLE_TOKEN (CHRONICLE_TOKEN=$(./dev chronicle token alice))")
    async with Client(chronicle_mcp(), read_timeout_seconds=60) as agent:
        tools = sorted(tool.name for tool in (await agent.list_tools()).tools)
        print(f"{len(tools)} tools, among them: {', '.join(t for t in tools if t in SEED_TOOLS)}")

        made = result(await agent.call_tool("generate_variations", {"query": "settings page with toggles", "count": 3}))
        print(f"variation set {made['variation_set_id']}: diversity {made['diversity_score']:.2f}")
        for artifact in made["artifacts"]:
            print(f"  #{artifact['variation_index']} {artifact['id']}")
        second = made["artifacts"][1]["id"]

        picked = result(await agent.call_tool("get_artifact", {"artifact_id": second}))
        print(f"picked #1: {picked['query']!r}, {picked['stats']['tokens']} tokens")

        refined = result(await agent.call_tool(
            "refine_layout", {"artifact_id": second, "refinement": "add a header section at the top"}))
        print(f"refined {refined['artifact_id']} from {refined['parent_id']}")

        compared = result(await agent.call_tool("compare_layouts", {"artifact_ids": [second, refined["artifact_id"]]}))
        print(f"compared: {len(compared['pairs'])} pair(s)")

        history = result(await agent.call_tool("get_history", {"limit": 10}))
        print(f"history: {history['total_count']} artifacts")
        for artifact in history["artifacts"]:
            parent = f" <- {artifact['parent_id']}" if artifact["parent_id"] else ""
            print(f"  gen {artifact['generation']} {artifact['id']}{parent}")


SEED_TOOLS = ("generate_layout", "generate_variations", "get_history", "get_artifact", "refine_layout", "compare_layouts")

if __name__ == "__main__":
    asyncio.run(main())
