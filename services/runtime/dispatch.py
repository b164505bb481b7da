"""The words a capability's dispatch table is written in: for each request type, what serves it.

A request model declares its action and reply (clients/python/chronicle_contract/base.py); its capability's
`dispatch.py` maps the type to one of three kinds of handler, and entrypoints/routes.py turns
every table into NATS endpoints:

    ROUTES: Routes = {
        StartConversation: commands.start_conversation,       # decided by the command bus
        ListConversations: Read(queries.list_conversations, reads=("history",)),
        GenerateArtifact: Serve(Generating.generate, on=Generating),  # slow work, then the bus
    }
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from chronicle_contract.base import Command, Request

from services.ports.read_models import Queries
from services.runtime.unit_of_work import UnitOfWork

Reply = dict[str, Any]
# Runs in the bus's writer thread on cached aggregates; never saves (the bus does).
Decide = Callable[[Any, UnitOfWork], Reply]


@dataclass(frozen=True)
class Read:
    """A query over read models: `handler(reader, user, request)`, once the read models in
    `reads` include the request's `min_position`. `on` is the reader's type (its instance
    comes from the composition root)."""

    handler: Callable[[Any, str, Any], Awaitable[Reply]]
    reads: tuple[str, ...]
    on: type = Queries


@dataclass(frozen=True)
class Serve:
    """A command that does slow work before the bus stores its outcome (a generator call, an
    upload, a retrieval) or that checks more than a token: `handler(service, user, request,
    idempotency_key)`, a method of `on`, whose instance comes from the composition root."""

    handler: Callable[[Any, str, Any, str | None], Awaitable[Reply]]
    on: type


Handler = Decide | Read | Serve
Routes = dict[type[Request[Any]], Handler]  # what the NATS endpoints serve
Internal = dict[type[Command[Any]], Decide]  # commands the service issues itself
