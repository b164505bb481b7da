"""The words a capability's dispatch table is written in: each request type, what serves it, and what it answers.

A request model declares its action and reply (clients/python/chronicle_contract/base.py); its
capability's `dispatch.py` binds it to a handler that returns that reply, in one of three
kinds of entry, and entrypoints/routes.py turns every table into NATS endpoints:

    ROUTES = (
        Decide(StartConversation, commands.start_conversation),  # decided by the command bus
        Read(ListConversations, queries.list_conversations, reads=("history",)),
        Serve(GenerateArtifact, Generating.generate, on=Generating),  # slow work, then the bus
    )

Each entry is a `Handler[Request, Reply]`: the type checker infers both from the request
model and the handler's signature, so an entry that hands `AddMessage` the handler of
`DeleteConversation` is a type error (tests/unit/test_dispatch.py runs mypy on one). A
table is left unannotated: as `Routes` (entries of `Any`), mypy would infer each entry from
that and check nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar, overload

from chronicle_contract.base import Command, Query, Reply, Request

from services.ports.read_models import Queries
from services.runtime.replies import Answer, wire
from services.runtime.unit_of_work import UnitOfWork

RequestT = TypeVar("RequestT", bound=Request[Any])
CommandT = TypeVar("CommandT", bound=Command[Any])
QueryT = TypeVar("QueryT", bound=Query[Any])
ReplyT = TypeVar("ReplyT", bound=Reply)
OnT = TypeVar("OnT")

@dataclass(frozen=True)
class Handler(Generic[RequestT, ReplyT]):
    """One entry of a table: `request` and what serves it, answering `ReplyT`."""

    request: type[RequestT]


@dataclass(frozen=True)
class Decide(Handler[CommandT, ReplyT]):
    """A command the bus decides: `handler(command, unit_of_work)`, run in its writer thread
    on cached aggregates; it never saves (the bus does)."""

    handler: Callable[[CommandT, UnitOfWork], ReplyT]

    def __call__(self, command: CommandT, uow: UnitOfWork) -> dict[str, Any]:
        """What the bus runs: the reply as the wire carries it (the bus adds `position`)."""
        return wire(self.handler(command, uow))


@dataclass(frozen=True, init=False)
class Read(Handler[QueryT, ReplyT], Generic[OnT, QueryT, ReplyT]):
    """A query over read models: `handler(reader, user, request)`, once the read models in
    `reads` include the request's `min_position`. `on` is the reader's type (its instance
    comes from the composition root): `Queries` unless named."""

    handler: Callable[[OnT, str, QueryT], Awaitable[Answer[ReplyT]]]
    reads: tuple[str, ...]
    on: type[OnT]

    @overload
    def __init__(
        self: Read[Queries, QueryT, ReplyT],
        request: type[QueryT],
        handler: Callable[[Queries, str, QueryT], Awaitable[Answer[ReplyT]]],
        *,
        reads: tuple[str, ...],
    ) -> None: ...

    @overload
    def __init__(
        self,
        request: type[QueryT],
        handler: Callable[[OnT, str, QueryT], Awaitable[Answer[ReplyT]]],
        *,
        reads: tuple[str, ...],
        on: type[OnT],
    ) -> None: ...

    def __init__(self, request: Any, handler: Any, *, reads: tuple[str, ...], on: Any = Queries) -> None:
        for name, value in (("request", request), ("handler", handler), ("reads", reads), ("on", on)):
            object.__setattr__(self, name, value)  # (frozen)


@dataclass(frozen=True)
class Serve(Handler[RequestT, ReplyT], Generic[OnT, RequestT, ReplyT]):
    """A command that does slow work before the bus stores its outcome (a generator call, an
    upload, a retrieval) or that checks more than a token: `handler(service, user, request,
    idempotency_key)`, a method of `on`, whose instance comes from the composition root."""

    handler: Callable[[OnT, str, RequestT, str | None], Awaitable[Answer[ReplyT]]]
    on: type[OnT]


Entry: TypeAlias = Decide[Any, Any] | Read[Any, Any, Any] | Serve[Any, Any, Any]
Routes: TypeAlias = tuple[Entry, ...]  # what the NATS endpoints serve
Internal: TypeAlias = tuple[Decide[Any, Any], ...]  # commands the service issues itself
