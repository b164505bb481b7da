"""The gateway's NATS connections: one per user, opened with the first token that user
sends and shared by all of that user's tokens, so a user reaches the service as
themselves (the bus admits the connection by a token of theirs and sends their replies to
their own inbox) and no user's tokens, however many, take another user's place. Each
request still carries its own token and the service checks it, so a forged token that
names a user gets nothing through that user's connection. The idle ones are closed, the
oldest first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
from chronicle_client import ChronicleClient
from chronicle_client.transport import token_subject
from chronicle_contract.errors import ChronicleError, invalid_from_validation
from chronicle_contract.jobs import GetJob
from pydantic import ValidationError

log = logging.getLogger(__name__)

MAX_TOKEN = 8 * 1024  # characters of a bearer token; a JWT is a few hundred
MAX_REMEMBERED = 10_000  # refused tokens, and verified ones, kept at most
MAX_CONNECTING = 16  # connects (each an auth callout) at once; more wait their turn
REFUSED_SECONDS = 60.0
VERIFIED_SECONDS = 60.0  # (the service still checks each request's token, expiry included)


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


@dataclass
class Held:
    client: ChronicleClient  # the one that opened the user's connection (with the first token seen)
    used: float  # when last released (monotonic seconds)
    leases: int = 0  # requests and streams using it now: it is neither swept nor evicted meanwhile
    position: int | None = None  # the furthest log position the user's requests saw: their reads include it


class UserClients:
    """`client, release = await clients.acquire(token)`: a client sending with that token over
    its user's connection, connected once; call `release()` when done with it. At most
    `max_open` users' connections stay open: a new user then takes the place of the least
    recently used idle one, or is answered `unavailable` when all are in use; one idle for
    `idle_seconds` is closed by `sweep()`. A connection that is lost is closed, and the
    user's next request connects again. `await clients.verify(token)` asks the service
    whether a token is valid where nothing else would be sent with it (MCP's initialize)."""

    def __init__(
        self, nats_url: str, prefix: str, *, timeout: float = 10.0, max_open: int = 1000, idle_seconds: float = 300.0
    ) -> None:
        self.nats_url = nats_url
        self.prefix = prefix
        self.timeout = timeout
        self.max_open = max_open
        self.idle_seconds = idle_seconds
        self._open: OrderedDict[str, Held] = OrderedDict()  # by user
        self._connecting: dict[str, asyncio.Future[Held]] = {}  # by user
        self._refused: dict[str, float] = {}  # token -> until when it is refused without asking the bus
        self._verified: dict[str, float] = {}  # token -> until when it is taken as valid without asking again
        self._first_connects = asyncio.Semaphore(MAX_CONNECTING)

    def __len__(self) -> int:
        return len(self._open)

    async def acquire(self, token: str) -> tuple[ChronicleClient, Callable[[], None]]:
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
                if client.last_position is not None and (held.position or 0) < client.last_position:
                    held.position = client.last_position

        return client, release

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
            held = Held(await self._connect(token), time.monotonic())
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # (retrieved: a request that did not share it must not warn)
            raise
        finally:
            del self._connecting[user]
        future.set_result(held)
        self._open[user] = held
        return held

    def _make_room(self) -> None:
        """Close the least recently used idle connection when the gateway holds max_open."""
        if len(self._open) + len(self._connecting) < self.max_open:
            return
        idle = next((user for user, held in self._open.items() if held.leases == 0), None)
        if idle is None:
            raise ChronicleError("unavailable", "the gateway is at its connection limit; retry shortly")
        asyncio.get_running_loop().create_task(self._open.pop(idle).client.close())

    async def _connect(self, token: str) -> ChronicleClient:
        async with self._first_connects:
            return await self._attempt(token)

    async def _attempt(self, token: str) -> ChronicleClient:
        refused_until = self._refused.get(token)
        if refused_until is not None and refused_until > time.monotonic():
            raise ChronicleError("unauthorized", "the bus refused this token")
        errors: list[BaseException] = []

        async def noted(error: BaseException) -> None:  # (nats-py logs each failure with a traceback otherwise)
            errors[:] = [*errors[-4:], error]  # a refusal may be followed by the socket's reset

        # One attempt: a refused or unreachable connect fails at once, and a lost connection
        # is closed (the user's next request connects again) rather than retried here.
        # (allow_reconnect=False alone does not end a first connect: nats-py still tries each
        # refusing server max_reconnect_attempts times, reconnect_time_wait apart: 60 x 2 s.)
        options: dict[str, Any] = {"connect_timeout": 2, "allow_reconnect": False, "max_reconnect_attempts": 1,
                                   "reconnect_time_wait": 0.1, "error_cb": noted}
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

    async def close(self) -> None:
        while self._open:
            _, held = self._open.popitem()
            with contextlib.suppress(Exception):
                await held.client.close()
