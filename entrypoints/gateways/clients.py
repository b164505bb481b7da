"""The gateway's NATS connections: one per user, opened with the first token that user
sends and shared by all of that user's tokens, so a user reaches the service as
themselves (the bus admits the connection by a token of theirs and sends their replies to
their own inbox) and no user's tokens, however many, take another user's place. Each
request still carries its own token and the service checks it, so a forged token that
names a user gets nothing through that user's connection. The idle ones are closed, the
oldest first.

A bus with the auth callout closes a connection when the token that opened it expires.
So a connection rolls over: once its token is near its expiry, a request of the same
user whose token expires later opens the user's next connection with it (in the
background: the request goes on over the current one); new requests go to the new one,
and the old one closes when the last request or stream on it ends. Streams move over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from chronicle_client import ChronicleClient
from chronicle_client.transport import token_claims, token_subject
from chronicle_contract.errors import ChronicleError, invalid_from_validation
from chronicle_contract.jobs import GetJob
from pydantic import ValidationError

log = logging.getLogger(__name__)

MAX_TOKEN = 8 * 1024  # characters of a bearer token; a JWT is a few hundred
MAX_REMEMBERED = 10_000  # refused tokens, and verified ones, kept at most
MAX_CONNECTING = 16  # connects (each an auth callout) at once; more wait their turn
REFUSED_SECONDS = 60.0
VERIFIED_SECONDS = 60.0  # (the service still checks each request's token, expiry included)
# A user's connection rolls over to a later token this long before its own token expires
# (or halfway through that token's life, if sooner): what is in flight on the old one has
# that long to finish, well over a request's timeout.
RENEW_BEFORE = 60.0


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <JWT>` header, bounded before it costs anything."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ChronicleError("unauthorized", "send Authorization: Bearer <token>")
    return bounded_token(token)


def bounded_token(token: str) -> str:
    """A bearer token no longer than MAX_TOKEN printable ASCII characters."""
    if len(token) > MAX_TOKEN or not token.isascii() or not token.isprintable():
        raise ChronicleError("unauthorized", f"the bearer token must be at most {MAX_TOKEN} printable ASCII characters")
    return token


def user_of(token: str) -> str:
    """The user a token names, unchecked (the bus and the service check it)."""
    user = token_subject(token)
    if user is None:  # not a JWT naming a user: no need to ask the bus
        raise ChronicleError("unauthorized", "the bearer token is not a JWT with a subject")
    return user


def claimed_expiry(token: str) -> float:
    """When a token says it expires (epoch seconds), unchecked: infinity for a token without
    `exp`, 0 for one whose `exp` is no usable number (never rolled over to; the bus refuses it)."""
    claims = token_claims(token)
    if "exp" not in claims:
        return math.inf
    exp = claims["exp"]
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return 0.0
    try:
        expiry = float(exp)
    except OverflowError:
        return 0.0
    return expiry if math.isfinite(expiry) else 0.0


def forget_expired(remembered: dict[str, float], cap: int) -> None:
    """Keep a token -> until map under `cap`: the expired go first, then the oldest."""
    if len(remembered) <= cap:
        return
    now = time.monotonic()
    for token in [t for t, until in remembered.items() if until <= now]:
        del remembered[token]
    while len(remembered) > cap:
        del remembered[next(iter(remembered))]


UNREACHABLE = (nats.errors.NoRespondersError, nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError,
               nats.errors.StaleConnectionError)


def failure_of(error: BaseException) -> ChronicleError:
    """What a gateway's caller is told of a failure on the way to the service (never its internals)."""
    if isinstance(error, ChronicleError):
        return error
    if isinstance(error, ValidationError):
        return invalid_from_validation(error)
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return ChronicleError("unavailable", "the service did not answer in time; retry shortly")
    if isinstance(error, UNREACHABLE):
        return ChronicleError("unavailable", "the service cannot be reached; retry shortly")
    log.error("gateway request failed", extra={"error_type": type(error).__name__})
    return ChronicleError("internal", "the gateway failed to handle this request")


@dataclass(eq=False)
class Held:
    client: ChronicleClient  # the one that opened the user's connection (with the token it rolled over to last)
    used: float  # when last released (monotonic seconds)
    leases: int = 0  # requests and streams using it now: it is neither swept nor evicted meanwhile
    position: int | None = None  # the furthest log position the user's requests saw: their reads include it
    expires: float = math.inf  # when the token that opened it expires (epoch seconds, as claimed): the bus closes it then
    opened: float = 0.0  # when it was opened (epoch seconds)
    successor: Held | None = None  # the user's connection that took over from this one
    moved: asyncio.Event = field(default_factory=asyncio.Event)  # set when replaced or lost: streams move

    def renew_at(self, renew_before: float) -> float:
        """From when a later token of the user's opens the next connection (epoch seconds)."""
        return self.expires - min(renew_before, (self.expires - self.opened) / 2)

    def latest(self) -> Held:
        held = self
        while held.successor is not None:
            held = held.successor
        return held


@dataclass(frozen=True)
class Lease:
    """A client sending with one token over its user's connection, until `release()`.
    `moved` is set when that connection was replaced by a later token's or lost: a stream
    takes a new lease (with its own token) and carries on there."""

    client: ChronicleClient
    release: Callable[[], None]
    moved: asyncio.Event


class UserClients:
    """`client, release = await clients.acquire(token)`: a client sending with that token over
    its user's connection, connected once; call `release()` when done with it. At most
    `max_open` users' connections stay open: a new user then takes the place of the least
    recently used idle one, or is answered `unavailable` when all are in use; one idle for
    `idle_seconds` is closed by `sweep()`. A connection that is lost is closed, and the
    user's next request connects again; one whose token is within `renew_before` seconds
    of its expiry rolls over to a later token of the user's (the module's docstring).
    `await clients.verify(token)` asks the service whether a token is valid where nothing
    else would be sent with it (MCP's initialize)."""

    def __init__(
        self, nats_url: str, prefix: str, *, timeout: float = 10.0, max_open: int = 1000, idle_seconds: float = 300.0,
        renew_before: float = RENEW_BEFORE,
    ) -> None:
        self.nats_url = nats_url
        self.prefix = prefix
        self.timeout = timeout
        self.max_open = max_open
        self.idle_seconds = idle_seconds
        self.renew_before = renew_before
        self.rolled_over = 0  # connections replaced by a later token's before theirs expired
        self._open: OrderedDict[str, Held] = OrderedDict()  # by user
        self._connecting: dict[str, asyncio.Future[Held]] = {}  # by user
        self._refused: dict[str, float] = {}  # token -> until when it is refused without asking the bus
        self._verified: dict[str, float] = {}  # token -> until when it is taken as valid without asking again
        self._first_connects = asyncio.Semaphore(MAX_CONNECTING)
        self._rolling: dict[str, asyncio.Task[None]] = {}  # by user: the next connection being opened
        self._retiring: set[Held] = set()  # replaced, closed when their last lease is released
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._open)

    async def acquire(self, token: str) -> tuple[ChronicleClient, Callable[[], None]]:
        lease = await self.lease(token)
        return lease.client, lease.release

    async def lease(self, token: str) -> Lease:
        held = await self._held(user_of(token), token)
        held.leases += 1
        # A client of this token's own over the shared connection: its requests carry this
        # token; it reads from where the user's earlier requests left off (read-your-writes
        # across requests, as one client per token did), and hands back what it saw.
        client = ChronicleClient(held.client.nc, token, prefix=self.prefix, timeout=self.timeout)
        client.observed(held.position)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                held.leases -= 1
                held.used = time.monotonic()
                latest = held.latest()  # (the connection may have rolled over meanwhile)
                if client.last_position is not None and (latest.position or 0) < client.last_position:
                    latest.position = client.last_position
                if held in self._retiring and held.leases == 0:
                    self._retiring.discard(held)
                    self._close_later(held)

        return Lease(client, release, held.moved)

    async def verify(self, token: str) -> str:
        """The user a token names once the service has accepted a request made with it (a
        look-up of a job that does not exist: one indexed read), remembered for
        VERIFIED_SECONDS; ChronicleError unauthorized when refused. (A bus that admits
        connections without credentials proves nothing by admitting one.)"""
        user = user_of(token)
        now = time.monotonic()
        if self._verified.get(token, 0.0) > now:
            return user
        if self._refused.get(token, 0.0) > now:
            raise ChronicleError("unauthorized", "the service refused this token")
        client, release = await self.acquire(token)
        try:
            await client.send_json(GetJob(job_id=uuid.uuid4()))
        except ChronicleError as error:
            if error.code == "unauthorized":
                self._refuse(token)
            if error.code != "not_found":  # (not_found: the service took the token and looked)
                raise
        finally:
            release()
        self._verified[token] = time.monotonic() + VERIFIED_SECONDS
        forget_expired(self._verified, MAX_REMEMBERED)
        return user

    async def _held(self, user: str, token: str) -> Held:
        while True:
            found = self._open.get(user)
            if found is not None and not found.client.nc.is_closed:
                self._open.move_to_end(user)
                self._roll_over_if_due(user, found, token)
                return found
            if found is not None:
                del self._open[user]
            pending = self._connecting.get(user)
            if pending is None:
                break
            try:  # another request of this user is connecting: share it
                return await asyncio.shield(pending)
            except ChronicleError as error:
                if error.code != "unauthorized":
                    raise  # (its token was refused, not necessarily this one: try this one)
        self._make_room()
        future: asyncio.Future[Held] = asyncio.get_running_loop().create_future()
        self._connecting[user] = future
        try:
            held = await self._connect(token)
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # (retrieved: a request that did not share it must not warn)
            raise
        finally:
            del self._connecting[user]
        future.set_result(held)
        self._open[user] = held
        return held

    def _roll_over_if_due(self, user: str, held: Held, token: str) -> None:
        """Open the user's next connection with this token when the current one's expires
        soon and this one later (one at a time; the request goes on over the current one)."""
        if user in self._rolling or held.expires == math.inf or time.time() < held.renew_at(self.renew_before):
            return
        if claimed_expiry(token) <= held.expires or self._refused.get(token, 0.0) > time.monotonic():
            return
        self._rolling[user] = asyncio.get_running_loop().create_task(self._roll_over(user, held, token))

    async def _roll_over(self, user: str, old: Held, token: str) -> None:
        try:
            new = await self._connect(token)
        except Exception as error:  # (refused, or the bus unreachable: the current one serves on; a later token tries again)
            if not isinstance(error, ChronicleError):
                log.warning("rolling a user's NATS connection over failed", extra={"error_type": type(error).__name__})
            return
        finally:
            del self._rolling[user]
        if self._open.get(user) is not old:  # lost and connected again meanwhile, or closed: not needed
            with contextlib.suppress(Exception):
                await new.client.close()
            return
        new.position = old.position
        self._open[user] = new
        old.successor = new
        self.rolled_over += 1
        self._retire(old)

    def _retire(self, held: Held) -> None:
        """A connection no longer given out: closed now if unused, else by its last release."""
        held.moved.set()
        if held.leases == 0:
            self._close_later(held)
        else:
            self._retiring.add(held)

    def _close_later(self, held: Held) -> None:
        task = asyncio.get_running_loop().create_task(self._quietly_close(held))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _quietly_close(held: Held) -> None:
        with contextlib.suppress(Exception):
            await held.client.close()

    def _make_room(self) -> None:
        """Close the least recently used idle connection when the gateway holds max_open."""
        if len(self._open) + len(self._connecting) < self.max_open:
            return
        idle = next((user for user, held in self._open.items() if held.leases == 0), None)
        if idle is None:
            raise ChronicleError("unavailable", "the gateway is at its connection limit; retry shortly")
        asyncio.get_running_loop().create_task(self._open.pop(idle).client.close())

    async def _connect(self, token: str) -> Held:
        moved = asyncio.Event()
        async with self._first_connects:
            client = await self._attempt(token, moved)
        return Held(client, time.monotonic(), expires=claimed_expiry(token), opened=time.time(), moved=moved)

    async def _attempt(self, token: str, moved: asyncio.Event) -> ChronicleClient:
        refused_until = self._refused.get(token)
        if refused_until is not None and refused_until > time.monotonic():
            raise ChronicleError("unauthorized", "the bus refused this token")
        errors: list[BaseException] = []

        async def noted(error: BaseException) -> None:  # (nats-py logs each failure with a traceback otherwise)
            errors[:] = [*errors[-4:], error]  # a refusal may be followed by the socket's reset

        async def lost() -> None:  # (streams on it move to the user's next connection)
            moved.set()

        # One attempt: a refused or unreachable connect fails at once, and a lost connection
        # is closed (the user's next request connects again) rather than retried here.
        # (allow_reconnect=False alone does not end a first connect: nats-py still tries each
        # refusing server max_reconnect_attempts times, reconnect_time_wait apart: 60 x 2 s.)
        options: dict[str, Any] = {"connect_timeout": 2, "allow_reconnect": False, "max_reconnect_attempts": 1,
                                   "reconnect_time_wait": 0.1, "error_cb": noted, "closed_cb": lost}
        try:
            return await ChronicleClient.connect(
                self.nats_url, token, prefix=self.prefix, timeout=self.timeout, nats_options=options
            )
        except (TimeoutError, nats.errors.Error, OSError) as error:
            if any("authorization" in str(e).lower() for e in (error, *errors)):
                self._refuse(token)
                raise ChronicleError("unauthorized", "the bus refused this token") from None
            log.warning("connecting a user to NATS failed", extra={"error_type": type(error).__name__})
            raise ChronicleError("unavailable", "the message bus cannot be reached; retry shortly") from None

    def _refuse(self, token: str) -> None:
        """Remember a refused token for a while, so repeating it costs the bus nothing."""
        self._refused[token] = time.monotonic() + REFUSED_SECONDS
        forget_expired(self._refused, MAX_REMEMBERED)

    async def sweep(self) -> None:
        """Close the connections idle (no lease) for longer than idle_seconds, and lost ones."""
        now = time.monotonic()
        for user, held in list(self._open.items()):
            if held.client.nc.is_closed or (held.leases == 0 and now - held.used > self.idle_seconds):
                del self._open[user]
                with contextlib.suppress(Exception):
                    await held.client.close()
        for held in [held for held in self._retiring if held.client.nc.is_closed]:
            self._retiring.discard(held)

    async def close(self) -> None:
        rolling = list(self._rolling.values())
        for task in rolling:
            task.cancel()
        await asyncio.gather(*rolling, *self._closing, return_exceptions=True)
        while self._open:
            _, held = self._open.popitem()
            await self._quietly_close(held)
        while self._retiring:
            await self._quietly_close(self._retiring.pop())
