"""NATS URLs as Chronicle's settings take them: one server, or a cluster's, comma-separated."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import Any

import nats.errors
from chronicle_contract.bus import server_urls
from nats.aio.client import Client as NATS

log = logging.getLogger(__name__)


def connect_options(url: str) -> dict[str, Any]:
    """nats.connect's `servers` and credentials for a URL that may list several servers.

    Credentials given in any one URL apply to every server, those listed and those the
    cluster tells the client about later (a node it learns of after its own died: nats-py
    sends a URL's credentials only to that URL's server)."""
    servers, user, password = [], None, None
    for server in server_urls(url):
        parts = urllib.parse.urlsplit(server)
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password) if parts.password is not None else None
        servers.append(urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
    options: dict[str, Any] = {"servers": servers}
    if user is not None and password is not None:
        options.update(user=user, password=password)
    elif user is not None:
        options["token"] = user
    return options


def without_credentials(url: str) -> str:
    """The same servers, user names and passwords left out (for logs and for users)."""
    return ",".join(connect_options(url)["servers"])


async def flushed(nc: NATS, timeout: float = 10.0) -> None:
    """Return once the server has every command written so far on `nc` (a SUB just made).

    nats-py's flush() writes its PING straight to the socket, ahead of the commands still
    queued for its flusher task: the PONG could come back before the server had the new
    subscriptions, and a service said ready while a request found no responders. The
    queued commands go out first (the flusher empties the queue in one write, within a
    turn or two of the loop), then the PING whose PONG answers for them. (Bounded: a
    connection others keep publishing on may never show an empty queue.)"""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while nc.pending_data_size > 0 and nc.is_connected and loop.time() < deadline:
        await asyncio.sleep(0)
    await nc.flush(timeout=int(timeout))


async def drain(nc: NATS) -> None:
    """Drain a connection; one that has lost its server cannot drain, and is closed."""
    try:
        await nc.drain()
    except (nats.errors.ConnectionReconnectingError, nats.errors.ConnectionClosedError):
        await nc.close()


async def nats_error(error: Exception) -> None:
    """A NATS connection's asynchronous error, as a log line (nats-py would print it raw)."""
    log.warning("nats error", extra={"error_type": type(error).__name__, "error": str(error)[:200]})
