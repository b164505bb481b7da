"""The NATS edge: one micro-service endpoint per command and query subject.

nats-py runs a subscription's callback one message at a time, so no request is awaited
there (bounded by max_in_flight): a command the bus decides alone is queued to it from the
callback, every other request is handed to a task of its own, and either is answered from
its future's done callback. That is what lets commands that arrive together reach the
group commit together.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import nats.errors
import orjson
from chronicle_contract import frames, request_ids
from chronicle_contract.base import MAX_JSON_BYTES, idempotency_key
from chronicle_contract.bus import INBOX, inbox_prefix
from chronicle_contract.errors import ChronicleError
from chronicle_contract.request_ids import request_id
from nats.aio.client import Client as NATS
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service
from pydantic import BaseModel, ValidationError

from adapters.auth import Caller, TokenAuthority
from adapters.errors import translate
from adapters.messaging.connect import flushed
from adapters.messaging.fair_share import FairShare
from adapters.messaging.flood_brake import FloodBrake
from adapters.metrics import Metrics

log = logging.getLogger(__name__)

QUEUE_GROUP = "chronicle"
Action = Callable[[str, Any, str | None], Coroutine[Any, Any, dict[str, Any]]]
Submit = Callable[[str, Any, str | None], asyncio.Future[dict[str, Any]]]


@dataclass(frozen=True)
class Route:
    subject: str
    model: type[BaseModel]
    reply: type[BaseModel]  # what `action`'s data must validate as (checked when check_replies is on)
    action: Action  # (user_id, request, idempotency_key) -> reply data
    # The same as `action` without awaiting, for a command queued to the bus as it comes:
    # its reply is sent from its future's callback, with no task per request (a task, its
    # coroutines and their resumption cost the service ~5 µs of an add_message's ~80).
    submit: Submit | None = None


def envelope_ok(data: Any) -> bytes:
    return orjson.dumps({"ok": True, "data": data}, option=orjson.OPT_NON_STR_KEYS)


def envelope_error(error: ChronicleError) -> bytes:
    return orjson.dumps({"ok": False, "error": error.to_wire()})


def parse(model: type[BaseModel], data: bytes, context: dict[str, Any] | None = None) -> BaseModel:
    # pydantic's own JSON parser keeps big integers exact (orjson would turn them into
    # floats), so the model's validators can refuse them instead of storing a changed value.
    # Strict: each JSON value as its own type (lax mode takes 1 or "yes" for true, true for
    # 1.0, "5" or 5.0 for 5); a JSON integer is still a number, a string still a UUID or time.
    try:
        return model.model_validate_json(data if data.strip() else b"{}", strict=True, context=context)
    except ValidationError as error:
        raise translate(error) from None


async def respond(nc: NATS, request: Request, body: bytes, rid: str) -> None:
    """The reply, on the request's reply subject, naming the request's id: Request.respond
    with its header framed by chronicle_contract.frames."""
    reply = request._msg.reply  # (nats.micro keeps the reply subject private)
    await frames.publish(nc, reply, body, reply_header(rid))


def reply_header(rid: str) -> bytes:
    return frames.header_section(frames.header_line(request_ids.HEADER, rid))


def check_reply(route: Route, data: Any) -> None:
    """The data a handler answered must be what the contract promises: a reply that breaks
    it is a bug, answered `internal` (and logged) rather than sent."""
    try:  # as the wire carries it: some replies hold pre-encoded JSON (orjson.Fragment)
        route.reply.model_validate_json(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS))
    except ValidationError as error:
        fields = [".".join(str(part) for part in e["loc"]) for e in error.errors(include_input=False)]
        log.error("reply breaks its contract", extra={"subject": route.subject, "fields": fields})
        raise ChronicleError("internal", f"the reply of {route.subject} breaks its contract") from None


class NatsService:
    def __init__(
        self,
        nc: NATS,
        routes: list[Route],
        authority: TokenAuthority,
        *,
        name: str = "chronicle",
        version: str = "0.1.0",
        max_in_flight: int = 2048,
        check_replies: bool = False,
        scoped_inboxes: bool = False,
        fair_share: FairShare | None = None,
        flood_brake: FloodBrake | None = None,
        max_json_bytes: int | None = None,
        metrics: Metrics | None = None,
    ):
        self.nc = nc
        # What the request models' validators are told (clients/python/chronicle_contract/base.py).
        self.validation_context = {MAX_JSON_BYTES: max_json_bytes} if max_json_bytes else None
        self.routes = routes
        self.authority = authority
        self.name = name
        self.version = version
        self.max_in_flight = max_in_flight
        self.check_replies = check_replies
        # On a bus where each user receives only on their own inbox (auth callout), a request
        # must ask for its reply there: a token someone holds without being able to receive
        # as its user gets them nothing, and nobody has replies sent into another's inbox.
        self.scoped_inboxes = scoped_inboxes
        self.fair_share = fair_share
        self.flood_brake = flood_brake  # told of each refusal of a known caller
        self.in_flight: set[asyncio.Future[Any]] = set()  # handling tasks, and commands' futures
        self.unanswered = 0  # requests whose reply subject was not their caller's inbox
        self.service: Service | None = None
        self.metrics = metrics
        if metrics is not None:  # read when scraped: nothing to record per request
            metrics.in_flight.set_function(lambda: len(self.in_flight))

    async def start(self) -> None:
        self.service = await add_service(
            self.nc, name=self.name, version=self.version, description="Chronicle commands and queries",
            queue_group=QUEUE_GROUP,
        )
        for route in self.routes:
            await self.service.add_endpoint(
                name=route.subject.replace(".", "_"),
                subject=route.subject,
                handler=self._dispatcher(route),
                queue_group=QUEUE_GROUP,
                metadata={"request": route.model.__name__, "reply": route.reply.__name__},
            )
        # A round trip: the server has every subscription before anyone is told we are ready.
        await flushed(self.nc)

    async def stop(self) -> None:
        """Stop taking requests, answer those already delivered, then let them all finish.

        Service.stop() would unsubscribe, dropping requests already delivered to this
        process but not yet dispatched; draining each endpoint's subscription answers them.
        The service's own $SRV subscriptions go when the connection drains.
        """
        if self.service is not None:
            for endpoint in self.service._endpoints:  # nats.micro has no public drain
                if endpoint._subscription is not None:
                    with contextlib.suppress(nats.errors.Error):
                        await endpoint._subscription.drain()
        while self.in_flight:
            await asyncio.gather(*self.in_flight, return_exceptions=True)

    def _dispatcher(self, route: Route) -> Callable[[Request], Awaitable[None]]:
        action = getattr(route.model, "action", route.subject)

        async def dispatch(request: Request) -> None:
            # Every refusal that needs no work is decided here, in the subscription's own
            # callback: no task, no handler, no database connection, and the user's budgets
            # counted before the payload is decoded. A flood of requests refused this way
            # costs a few microseconds each (./dev bench edges).
            addressee = self._addressee(route, action, request)
            if addressee is None:  # no reply may be sent at all
                return
            user: Caller | None = None
            entered = False  # (counted in flight: left once, here on refusal or when handled)
            try:
                if isinstance(addressee, ChronicleError):
                    raise addressee
                user = addressee
                if len(self.in_flight) >= self.max_in_flight:
                    if self.metrics is not None:
                        self.metrics.refused("instance")
                    user = None  # (everyone's requests at once, not this caller's: not counted against them)
                    raise ChronicleError("rate_limited", "too many requests in flight; retry shortly")
                if self.fair_share is not None:
                    # In flight first: a request refused there spends none of the user's budgets.
                    self.fair_share.enter(user, action)
                    entered = True
                    self.fair_share.admit(user, action)
                payload = parse(route.model, request.data, self.validation_context)
            except Exception as error:
                if entered and self.fair_share is not None and user is not None:
                    self.fair_share.leave(user, action)
                if self.flood_brake is not None and user is not None:
                    self.flood_brake.refused(user)
                await self._refuse(route, request, translate(error))
                return
            self._take(route, action, request, user, payload)

        return dispatch

    def _take(self, route: Route, action: str, request: Request, user: Caller, payload: BaseModel) -> None:
        """An admitted request handed on: a command queued to the bus, any other request to a
        task of its own; `_answer` replies once that future is settled."""
        started = time.perf_counter()
        rid = request_id(request.headers)
        context = contextvars.copy_context()  # (the handler's and the answer's log lines carry the request's id)
        context.run(request_ids.current.set, rid)
        reply: asyncio.Future[dict[str, Any]]
        try:
            key = idempotency_key((request.headers or {}).get("Idempotency-Key"))
            if route.submit is not None:
                reply = route.submit(user, payload, key)
            else:
                reply = asyncio.create_task(route.action(user, payload, key), context=context)
        except Exception as error:  # (refused before it was handed on: answered as it would be after)
            reply = asyncio.get_running_loop().create_future()
            reply.set_exception(error)
        self.in_flight.add(reply)
        reply.add_done_callback(
            functools.partial(self._answer, route, action, request, user, rid, started), context=context
        )

    def _answer(
        self, route: Route, action: str, request: Request, user: Caller, rid: str, started: float,
        reply: asyncio.Future[dict[str, Any]],
    ) -> None:
        self.in_flight.discard(reply)
        code = "ok"
        try:
            data = reply.result()
            if self.check_replies:
                check_reply(route, data)
            body = envelope_ok(data)
        except BaseException as error:  # every failure leaves as one envelope (a cancelled bus too)
            failure = translate(error) if isinstance(error, Exception) else ChronicleError("unavailable", "stopping")
            code = failure.code
            body = envelope_error(failure)
        finally:
            if self.fair_share is not None:
                self.fair_share.leave(user, action)
        try:
            frames.publish_nowait(self.nc, request._msg.reply, body, reply_header(rid))
        except Exception as error:
            log.warning("reply not sent", extra={"subject": route.subject, "error_type": type(error).__name__})
        self._answered(route, code, started)

    def _addressee(self, route: Route, action: str, request: Request) -> Caller | ChronicleError | None:
        """Who asked (or why they cannot be served), or None: no reply may be sent at all.

        On a scoped bus a reply goes only to the asker's own inbox. A request naming any
        other reply subject gets no answer, not even a refusal (the service would be
        publishing where its asker may not: another user's inbox or signals, a stream's
        subject), and counts against its asker's budget. A request without a valid token
        has no known asker: its refusal goes only to a user's inbox, never elsewhere."""
        try:
            user = self.authority.user_of(request.headers)
        except ChronicleError as refused:
            reply = request._msg.reply or ""  # (nats.micro keeps the reply subject private)
            return refused if not self.scoped_inboxes or reply.startswith(INBOX + ".") else None
        if self.scoped_inboxes and not (request._msg.reply or "").startswith(inbox_prefix(user) + "."):
            self.unanswered += 1
            if self.flood_brake is not None:
                self.flood_brake.refused(user)
            if self.fair_share is not None:
                with contextlib.suppress(ChronicleError):  # (past the budget already: nothing more to take)
                    self.fair_share.admit(user, action)
            if self.metrics is not None:
                self.metrics.answered(route.subject, "unanswered", None)
            log.debug("request not answered: its reply subject is not its caller's inbox", extra={"subject": route.subject})
            return None
        return user

    async def _refuse(self, route: Route, request: Request, error: ChronicleError) -> None:
        """Answer a request refused before it was handled (counted, not timed)."""
        try:
            await respond(self.nc, request, envelope_error(error), request_id(request.headers))
        except Exception as failure:
            log.warning("reply not sent", extra={"subject": route.subject, "error_type": type(failure).__name__})
        if self.metrics is not None:
            self.metrics.answered(route.subject, error.code, None)

    def _answered(self, route: Route, code: str, started: float) -> None:
        seconds = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.answered(route.subject, code, seconds)
        # Every request at debug; what failed on the server's side at info, to be found by its id.
        log.log(
            logging.INFO if code in ("unavailable", "internal") else logging.DEBUG,
            "request",
            extra={"subject": route.subject, "code": code, "ms": round(seconds * 1000, 2)},
        )
