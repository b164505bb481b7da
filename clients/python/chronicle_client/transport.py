"""The transport under every side of the client: requests, replies and errors over NATS."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import gc
import itertools
import weakref
from collections.abc import Iterator
from typing import Any, Generic, Self, TypeVar, cast

import nats
import nats.errors
import orjson
from chronicle_contract import frames, request_ids
from chronicle_contract.base import Command, Query, Reply
from chronicle_contract.bus import inbox_prefix, server_urls
from chronicle_contract.errors import ChronicleError, invalid_from_validation
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import BaseModel, ValidationError

R = TypeVar("R", bound=Reply)
M = TypeVar("M", bound=BaseModel)
# Bytes from which a reply's objects skip the young collections (collector_paused), about
# 150 trials of a history page; for less, moving them would save less than it costs.
PROMOTED_REPLY = 64 * 1024


def token_claims(token: str) -> dict[str, Any]:
    """A bearer JWT's claims, read without checking them (the service does); empty when it
    holds none (the service will refuse it)."""
    try:
        payload = token.split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def token_subject(token: str) -> str | None:
    """The user a bearer JWT names (its `sub`), unchecked; None when it names none."""
    subject = token_claims(token).get("sub")
    return subject if isinstance(subject, str) else None


def build(model: type[M], /, **fields: Any) -> M:
    """Validate a request locally; a bad field fails exactly as the service would say."""
    try:
        return model(**fields)
    except ValidationError as error:
        raise invalid_from_validation(error) from None


class Envelope(BaseModel, Generic[R]):
    """A reply as the wire carries it."""

    ok: bool
    data: R | None = None
    error: dict[str, Any] | None = None


@functools.cache
def envelope_of(reply: type[R]) -> type[Envelope[R]]:
    """The envelope of one reply model, made once (`Envelope[reply]` looks its
    parametrization up through typing's generics on every use: ~3.5 µs a request)."""
    return Envelope[reply]  # type: ignore[valid-type]  # (a model given at run time)


@contextlib.contextmanager
def collector_paused(*, promote: bool = True) -> Iterator[None]:
    """No cyclic garbage collection meanwhile, and what the block made goes straight to the
    collector's oldest generation. A big reply (a history page: thousands of models and
    dicts, none in a cycle: JSON cannot make one) would otherwise set off dozens of
    collections that walk the objects made so far, often a full one that walks the whole
    heap (measured: 110 of a 100 x 100 history's client CPU ms, 68 without); and once
    resumed, the young collections would still walk what the page left two or three times
    (measured: another 15 ms of client CPU per history). The young generations are
    collected first, so what is moved unexamined is what the block made (and whatever
    another thread made meanwhile); only a full collection walks it, as it walks any old
    object. With `promote=False`, or where objects are frozen by someone else (gc.freeze,
    before a fork: gc.unfreeze would release them), the collector is only paused."""
    if not gc.isenabled():  # the caller runs the collector itself
        yield
        return
    move = promote and gc.get_freeze_count() == 0  # (get_freeze_count walks what is frozen)
    if move:
        gc.collect(1)
    gc.disable()
    try:
        yield
    except BaseException:  # an error's traceback may well be in a cycle: the collector sees it as usual
        gc.enable()
        raise
    if move:
        gc.freeze()  # every tracked object to the permanent generation (the young ones are the block's)
        gc.unfreeze()  # and back, all into the oldest
    gc.enable()


NO_RESPONDERS = "503"  # the status of the server's answer to a request nobody serves


class Replies:
    """Every request's reply on one NATS connection, through one subscription of its own
    under the connection's inbox prefix (a bus that scopes inboxes lets it through), each
    awaited on a future. nats-py's `request` makes a fresh id, a done callback and an
    `asyncio.wait_for` for every call: against a bare responder with 100 requests in
    flight, 47 µs of the client's CPU a request, against 31 with these.

    Deadlines share one timer, set for the earliest: a timer per request is a heap entry
    whose every push and pop compares handles in Python, several times a request."""

    def __init__(self, base: str):
        self.base = base  # <the connection's inbox prefix>.<a unique id>; (no reference to the
        # connection itself: it keys these in a weak dictionary, see replies_of)
        self.waiting: dict[str, asyncio.Future[Msg]] = {}
        self._deadlines: dict[str, float] = {}  # token -> the loop's time its request gives up
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")  # when that timer fires
        self._tokens = itertools.count()
        self._subscribed = False
        self._subscribing = asyncio.Lock()

    async def request(self, nc: NATS, subject: str, payload: bytes, *, timeout: float, headers: bytes) -> Msg:
        """The reply to one request on `nc`, the connection these are for, with `headers`
        (a section chronicle_contract.frames framed); raises nats.errors.TimeoutError or
        NoRespondersError as nats-py's own request does."""
        if not self._subscribed:
            async with self._subscribing:
                if not self._subscribed:  # (sent before the first request: the server sees it first)
                    await nc.subscribe(f"{self.base}.*", cb=self._arrived)
                    self._subscribed = True
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Msg] = loop.create_future()
        self.waiting[token] = reply
        deadline = self._deadlines[token] = loop.time() + timeout
        if deadline < self._timer_at:  # (rarely: only a shorter timeout than those waiting)
            self._set_timer(loop, deadline)
        try:
            await frames.publish(nc, subject, payload, headers, reply=f"{self.base}.{token}")
            msg = await reply
        finally:
            del self.waiting[token], self._deadlines[token]
        if msg.headers and msg.headers.get("Status") == NO_RESPONDERS:
            raise nats.errors.NoRespondersError
        return msg

    def _set_timer(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = loop.call_at(at, self._expire, loop), at

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail every request past its deadline; the timer again for the earliest left."""
        self._timer, self._timer_at = None, float("inf")
        now = loop.time()
        for token, deadline in list(self._deadlines.items()):
            reply = self.waiting[token]
            if deadline <= now:
                if not reply.done():
                    reply.set_exception(nats.errors.TimeoutError)
            elif deadline < self._timer_at:
                self._timer_at = deadline
        if self._timer_at != float("inf"):
            self._timer = loop.call_at(self._timer_at, self._expire, loop)

    async def _arrived(self, msg: Msg) -> None:
        reply = self.waiting.get(msg.subject[len(self.base) + 1:])
        if reply is not None and not reply.done():
            reply.set_result(msg)


_replies: weakref.WeakKeyDictionary[NATS, Replies] = weakref.WeakKeyDictionary()


def replies_of(nc: NATS) -> Replies:
    """The connection's Replies (every Transport on it shares them)."""
    replies = _replies.get(nc)
    if replies is None:
        replies = _replies[nc] = Replies(nc.new_inbox())
    return replies


def failure(error: dict[str, Any], request_id: str | None = None) -> ChronicleError:
    failed = ChronicleError(error.get("code", "internal"), error.get("message", ""), error.get("details"))
    failed.request_id = request_id
    return failed


class Transport:
    """One bearer token's requests over one NATS connection: subjects, headers, envelopes, positions."""

    build = staticmethod(build)

    def __init__(self, nc: NATS, token: str, *, prefix: str = "chronicle", timeout: float = 10.0):
        self.nc = nc
        self.token = token  # (its Authorization line framed once: the setter below)
        self.prefix = prefix
        self.timeout = timeout
        self.last_position: int | None = None
        self._owns_connection = False

    @property
    def token(self) -> str:
        """The bearer token every request carries."""
        return self._token

    @token.setter
    def token(self, token: str) -> None:
        self._token = token
        self._authorization = frames.header_line("Authorization", f"Bearer {token}")  # (on every request: framed once)

    @property
    def user(self) -> str | None:
        """The user the token names (unchecked: the service checks it)."""
        return token_subject(self.token)

    @classmethod
    async def connect(
        cls, url: str, token: str, *, nats_options: dict[str, Any] | None = None, **kwargs: Any
    ) -> Self:
        """Connect to NATS at `url` with the bearer token as the NATS token (a NATS that
        Chronicle secures admits the connection by it), receiving replies under the token's
        user's own inbox prefix; `nats_options` go to nats.connect (e.g. reconnect_time_wait)."""
        user = token_subject(token)
        options = {"token": token, **({"inbox_prefix": inbox_prefix(user)} if user else {}), **(nats_options or {})}
        client = cls(await nats.connect(server_urls(url), **options), token, **kwargs)
        client._owns_connection = True
        return client

    async def close(self) -> None:
        if self._owns_connection:
            # Drain when connected so replies in flight arrive; otherwise just let go.
            await (self.nc.drain() if self.nc.is_connected else self.nc.close())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, subject: str, body: bytes, idempotency_key: str | None = None) -> tuple[bytes, str]:
        """The reply's bytes and the request's id. A request carries a `Request-Id`: the one
        set for the caller's context (`request_ids.current`, e.g. a gateway's own request),
        else a new one; the service logs under it, and a ChronicleError from it names it."""
        rid = request_ids.current.get() or request_ids.request_id(None)
        lines = [self._authorization, frames.header_line(request_ids.HEADER, rid)]
        if idempotency_key:
            lines.append(frames.header_line("Idempotency-Key", idempotency_key))
        headers = frames.header_section(*lines)
        msg = await replies_of(self.nc).request(
            self.nc, f"{self.prefix}.{subject}", body, timeout=self.timeout, headers=headers
        )
        return msg.data, rid

    async def request(
        self, subject: str, payload: dict[str, Any], *, idempotency_key: str | None = None
    ) -> Any:
        """Send one request; return the reply's data or raise ChronicleError."""
        data, rid = await self._send(subject, orjson.dumps(payload), idempotency_key)
        reply = orjson.loads(data)
        if not reply.get("ok"):
            raise failure(reply.get("error") or {}, rid)
        return reply["data"]

    async def command(self, request: Command[R], idempotency_key: str | None = None) -> R:
        """Send a command; its subject and reply model are the request type's own. Written
        and read as JSON by pydantic in one pass each (no dict in between: ~2 µs less an
        add_message than dumping to a dict for orjson, and loading the reply for the model)."""
        body = type(request).__pydantic_serializer__.to_json(request, exclude_unset=True)
        return await self._command(type(request), body, idempotency_key)

    async def command_payload(
        self, request_type: type[Command[R]], payload: dict[str, Any], idempotency_key: str | None = None
    ) -> R:
        """A command whose payload is already validated and in its wire form."""
        return await self._command(request_type, orjson.dumps(payload), idempotency_key)

    async def _command(self, request_type: type[Command[R]], body: bytes, idempotency_key: str | None) -> R:
        data, rid = await self._send(f"cmd.{request_type.action}", body, idempotency_key)
        envelope = envelope_of(request_type.reply).model_validate_json(data)
        if not envelope.ok or envelope.data is None:
            raise failure(envelope.error or {}, rid)
        self.observed(getattr(envelope.data, "position", None))
        return cast(R, envelope.data)

    def observed(self, position: int | None) -> None:
        """Reads from now on include this log position (a write's, or a signal's)."""
        if position is not None and (self.last_position is None or position > self.last_position):
            self.last_position = position

    async def query(self, request: Query[R]) -> R:
        # Validated straight from the reply's bytes (pydantic's JSON parser): a history page
        # of a thousand trials is parsed once, not by orjson and then again by pydantic.
        data, rid = await self._send(f"query.{request.action}", orjson.dumps(self._query_payload(request)))
        with collector_paused(promote=len(data) >= PROMOTED_REPLY):
            envelope = envelope_of(request.reply).model_validate_json(data)
        if not envelope.ok or envelope.data is None:
            raise failure(envelope.error or {}, rid)
        return cast(R, envelope.data)

    async def query_json(self, request: Query[Any]) -> dict[str, Any]:
        """A query's reply data as plain JSON values, for bulk replies that a caller reads as
        dicts (a history's rounds): parsed by orjson, without building a model per item."""
        data, rid = await self._send(f"query.{request.action}", orjson.dumps(self._query_payload(request)))
        with collector_paused(promote=len(data) >= PROMOTED_REPLY):
            reply = orjson.loads(data)
        if not reply.get("ok") or reply.get("data") is None:
            raise failure(reply.get("error") or {}, rid)
        return cast(dict[str, Any], reply["data"])

    async def send_json(self, request: Command[Any] | Query[Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """Any request, its reply data as plain JSON values (for a gateway that re-shapes it);
        a command's position is remembered, a query reads this client's own writes."""
        if isinstance(request, Query):
            return await self.query_json(request)
        payload = request.model_dump(mode="json", exclude_unset=True)
        data = await self.request(f"cmd.{request.action}", payload, idempotency_key=idempotency_key)
        self.observed(data.get("position"))
        return cast(dict[str, Any], data)

    def _query_payload(self, request: Query[Any]) -> dict[str, Any]:
        payload = request.model_dump(mode="json", exclude_unset=True)
        if request.min_position is None and self.last_position is not None:
            payload["min_position"] = self.last_position
        return payload
