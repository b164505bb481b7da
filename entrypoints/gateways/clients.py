"""The gateway's NATS connections: one per bearer token, opened on its first request and
reused, so each user reaches the service as themselves (the bus admits them by their token
and sends their replies to their own inbox); the idle ones are closed, the oldest first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
from chronicle_client import ChronicleClient
from chronicle_client.transport import token_subject
from chronicle_contract.errors import ChronicleError, invalid_from_validation
from pydantic import ValidationError

log = logging.getLogger(__name__)

MAX_TOKEN = 8 * 1024  # characters of a bearer token; a JWT is a few hundred
MAX_REFUSED = 10_000
MAX_CONNECTING = 16  # first connects (each an auth callout) at once; more wait their turn
REFUSED_SECONDS = 60.0


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <JWT>` header, bounded before it costs anything."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ChronicleError("unauthorized", "send Authorization: Bearer <token>")
    if len(token) > MAX_TOKEN or not token.isascii() or not token.isprintable():
        raise ChronicleError("unauthorized", f"the bearer token must be at most {MAX_TOKEN} printable ASCII characters")
    return token


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
    client: ChronicleClient
    used: float  # when last released (monotonic seconds)
    leases: int = 0  # requests and streams using it now: it is neither swept nor evicted meanwhile


class UserClients:
    """`client, release = await clients.acquire(token)`: that token's client, connected once;
    call `release()` when done with it. At most `max_open` stay open: a new token then takes
    the place of the least recently used idle one, or is answered `unavailable` when all are
    in use; one idle for `idle_seconds` is closed by `sweep()`. A connection that is lost is
    closed, and the token's next request connects again."""

    def __init__(
        self, nats_url: str, prefix: str, *, timeout: float = 10.0, max_open: int = 1000, idle_seconds: float = 300.0
    ):
        self.nats_url = nats_url
        self.prefix = prefix
        self.timeout = timeout
        self.max_open = max_open
        self.idle_seconds = idle_seconds
        self._open: OrderedDict[str, Held] = OrderedDict()
        self._connecting: dict[str, asyncio.Future[Held]] = {}
        self._refused: dict[str, float] = {}  # token -> until when it is refused without asking the bus
        self._first_connects = asyncio.Semaphore(MAX_CONNECTING)

    def __len__(self) -> int:
        return len(self._open)

    async def acquire(self, token: str) -> tuple[ChronicleClient, Callable[[], None]]:
        held = await self._held(token)
        held.leases += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                held.leases -= 1
                held.used = time.monotonic()

        return held.client, release

    async def _held(self, token: str) -> Held:
        found = self._open.get(token)
        if found is not None and not found.client.nc.is_closed:
            self._open.move_to_end(token)
            return found
        if found is not None:
            del self._open[token]
        pending = self._connecting.get(token)
        if pending is not None:  # another request of this token is connecting: share it
            return await asyncio.shield(pending)
        if token_subject(token) is None:  # not a JWT naming a user: no need to ask the bus
            raise ChronicleError("unauthorized", "the bearer token is not a JWT with a subject")
        self._make_room()
        future: asyncio.Future[Held] = asyncio.get_running_loop().create_future()
        self._connecting[token] = future
        try:
            async with self._first_connects:
                held = Held(await self._connect(token), time.monotonic())
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # (retrieved: a request that did not share it must not warn)
            raise
        finally:
            del self._connecting[token]
        future.set_result(held)
        self._open[token] = held
        return held

    def _make_room(self) -> None:
        """Close the least recently used idle connection when the gateway holds max_open."""
        if len(self._open) + len(self._connecting) < self.max_open:
            return
        idle = next((token for token, held in self._open.items() if held.leases == 0), None)
        if idle is None:
            raise ChronicleError("unavailable", "the gateway is at its connection limit; retry shortly")
        asyncio.get_running_loop().create_task(self._open.pop(idle).client.close())

    async def _connect(self, token: str) -> ChronicleClient:
        refused_until = self._refused.get(token)
        if refused_until is not None and refused_until > time.monotonic():
            raise ChronicleError("unauthorized", "the bus refused this token")
        errors: list[BaseException] = []

        async def noted(error: BaseException) -> None:  # (nats-py logs each failure with a traceback otherwise)
            errors[:] = [*errors[-4:], error]  # a refusal may be followed by the socket's reset

        # One attempt: a refused or unreachable connect fails at once, and a lost connection
        # is closed (the token's next request connects again) rather than retried here.
        options: dict[str, Any] = {"connect_timeout": 2, "allow_reconnect": False, "error_cb": noted}
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
        if len(self._refused) >= MAX_REFUSED:
            now = time.monotonic()
            self._refused = {t: until for t, until in self._refused.items() if until > now}
            while len(self._refused) >= MAX_REFUSED:
                del self._refused[next(iter(self._refused))]
        self._refused[token] = time.monotonic() + REFUSED_SECONDS

    async def sweep(self) -> None:
        """Close the connections idle (no lease) for longer than idle_seconds, and lost ones."""
        now = time.monotonic()
        for token, held in list(self._open.items()):
            if held.client.nc.is_closed or (held.leases == 0 and now - held.used > self.idle_seconds):
                del self._open[token]
                with contextlib.suppress(Exception):
                    await held.client.close()

    async def close(self) -> None:
        while self._open:
            _, held = self._open.popitem()
            with contextlib.suppress(Exception):
                await held.client.close()
