"""The gateway's NATS connections: one per bearer token, opened on its first request and
reused, so each user reaches the service as themselves (the bus admits them by their token
and sends their replies to their own inbox); the idle ones are closed, the oldest first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

import nats.errors

from services.client.connection import ChronicleClient
from services.contract.errors import ChronicleError

log = logging.getLogger(__name__)

MAX_TOKEN = 8 * 1024  # characters of a bearer token; a JWT is a few hundred
MAX_REFUSED = 10_000
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


class UserClients:
    """`await clients.get(token)`: that token's client, connected once. At most `max_open`
    stay open; one idle for `idle_seconds` is closed by `sweep()`."""

    def __init__(
        self, nats_url: str, prefix: str, *, timeout: float = 10.0, max_open: int = 1000, idle_seconds: float = 300.0
    ):
        self.nats_url = nats_url
        self.prefix = prefix
        self.timeout = timeout
        self.max_open = max_open
        self.idle_seconds = idle_seconds
        self._open: OrderedDict[str, tuple[ChronicleClient, float]] = OrderedDict()
        self._connecting: dict[str, asyncio.Future[ChronicleClient]] = {}
        self._refused: dict[str, float] = {}  # token -> until when it is refused without asking the bus

    def __len__(self) -> int:
        return len(self._open)

    async def get(self, token: str) -> ChronicleClient:
        found = self._open.get(token)
        if found is not None and not found[0].nc.is_closed:
            self._open[token] = (found[0], time.monotonic())
            self._open.move_to_end(token)
            return found[0]
        pending = self._connecting.get(token)
        if pending is not None:  # another request of this token is connecting: share it
            return await asyncio.shield(pending)
        future: asyncio.Future[ChronicleClient] = asyncio.get_running_loop().create_future()
        self._connecting[token] = future
        try:
            client = await self._connect(token)
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # (retrieved: a request that did not share it must not warn)
            raise
        finally:
            del self._connecting[token]
        future.set_result(client)
        self._open[token] = (client, time.monotonic())
        while len(self._open) > self.max_open:
            _, (oldest, _) = self._open.popitem(last=False)
            asyncio.get_running_loop().create_task(oldest.close())
        return client

    async def _connect(self, token: str) -> ChronicleClient:
        refused_until = self._refused.get(token)
        if refused_until is not None and refused_until > time.monotonic():
            raise ChronicleError("unauthorized", "the bus refused this token")
        errors: list[BaseException] = []

        async def noted(error: BaseException) -> None:  # (nats-py logs each failure with a traceback otherwise)
            errors[:] = [*errors[-4:], error]  # a refusal may be followed by the socket's reset

        # A refused or unreachable first connect fails within a second; once connected, a
        # lost connection is retried briefly, then closed, and the next request reconnects.
        options: dict[str, Any] = {"connect_timeout": 2, "allow_reconnect": True, "max_reconnect_attempts": 2,
                                   "reconnect_time_wait": 0.2, "error_cb": noted}
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
        """Close the connections idle for longer than idle_seconds."""
        now = time.monotonic()
        for token, (client, used) in list(self._open.items()):
            if now - used > self.idle_seconds or client.nc.is_closed:
                del self._open[token]
                with contextlib.suppress(Exception):
                    await client.close()

    async def close(self) -> None:
        while self._open:
            _, (client, _) = self._open.popitem()
            with contextlib.suppress(Exception):
                await client.close()
