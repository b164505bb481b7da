"""Seeds 002, 003 and 004 as their documents name them, served by the REST and MCP gateways
(docs/seeds.md): each operation is made of the contract's own requests, none is a new
capability; a route's `run` sends them."""

from __future__ import annotations

from typing import Any

Data = dict[str, Any]  # a reply's data, in the bus's (snake_case) names
