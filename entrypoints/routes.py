"""The subject table: every capability's dispatch table turned into NATS endpoints.

A request model names its action and reply (chronicle_contract); its capability's
dispatch.py binds it to what serves it. Nothing here lists a subject by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from chronicle_contract.base import Command, Request

from adapters.messaging.nats_service import Action, Route
from services.artifacts import dispatch as artifacts
from services.audit import dispatch as audit
from services.conversations import dispatch as conversations
from services.hitl import dispatch as hitl
from services.jobs import dispatch as jobs
from services.optimizations import dispatch as optimizations
from services.ports.positions import Positions
from services.runtime.command_bus import CommandBus
from services.runtime.dispatch import Decide, Entry, Internal, Read, Routes, Serve
from services.runtime.replies import wire
from services.sessions import dispatch as sessions
from services.users import dispatch as users

# What NATS serves, capability by capability (the order endpoints are registered in).
ROUTES: tuple[Routes, ...] = (
    sessions.ROUTES,
    conversations.ROUTES,
    hitl.ROUTES,
    optimizations.ROUTES,
    artifacts.ROUTES,
    jobs.ROUTES,
    audit.ROUTES,
    users.ROUTES,
)
INTERNAL: tuple[Internal, ...] = (hitl.INTERNAL, artifacts.INTERNAL, jobs.INTERNAL, audit.INTERNAL, users.INTERNAL)


def command_handlers() -> dict[type[Command[Any]], Decide[Any, Any]]:
    """Every command the bus decides, by request type: those NATS sends straight to it and
    those the service issues itself."""
    return {entry.request: entry for table in (*ROUTES, *INTERNAL) for entry in table if isinstance(entry, Decide)}


def subject(prefix: str, request_type: type[Request[Any]]) -> str:
    kind = "cmd" if issubclass(request_type, Command) else "query"
    return f"{prefix}.{kind}.{request_type.action}"


def routes(
    prefix: str,
    bus: CommandBus,
    positions: Positions,
    wait_timeout: float,
    services: Mapping[type, object],
    tables: Iterable[Routes] = ROUTES,
) -> list[Route]:
    """One route per entry of the tables; `services` holds the instances that Read and
    Serve handlers are methods of (or take first), by type."""

    def action(entry: Entry) -> Action:
        if isinstance(entry, Read):
            reader, read, reads = services[entry.on], entry.handler, list(entry.reads)

            async def run_read(user: str, request: Any, _: str | None) -> dict[str, Any]:
                await positions.wait_for(reads, request.min_position, wait_timeout)
                return wire(await read(reader, user, request))

            return run_read
        if isinstance(entry, Serve):
            service, serve = services[entry.on], entry.handler

            async def run_served(user: str, request: Any, key: str | None) -> dict[str, Any]:
                return wire(await serve(service, user, request, key))

            return run_served

        async def run_command(user: str, request: Any, key: str | None) -> dict[str, Any]:
            return await bus.execute(request, str(user), key)

        return run_command

    def submit(user: str, request: Any, key: str | None) -> asyncio.Future[dict[str, Any]]:
        return bus.submit(request, str(user), key)

    return [
        Route(subject(prefix, entry.request), entry.request, entry.request.reply, action(entry),
              submit if isinstance(entry, Decide) else None)
        for table in tables
        for entry in table
    ]
