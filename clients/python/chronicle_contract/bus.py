"""Who may do what on the NATS bus: each user's own inbox and signal subjects, and the
permissions a user's connection is granted (the auth callout hands them to the server).

A user id may hold characters a subject cannot (dots, spaces, wildcards), so subjects name
a user by their scope: a digest of the id, the same on the client and the service.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from chronicle_contract.events import FEED_ROLE, events_stream

INBOX = "_INBOX"
SCOPE_BYTES = 20
# A feed token names the durables its holder keeps in this claim: NATS permissions match
# whole subject tokens, never a prefix of one, so the consumer names a connection may use
# must be known, and listed, when it connects.
DURABLES_CLAIM = "durables"
MAX_DURABLES = 8
DURABLE_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
LIVE_CONSUMERS = 4  # follows without a durable a feed user may run at once


def server_urls(url: str) -> list[str]:
    """A NATS URL as the settings take it, one server or a cluster's comma-separated
    (`nats://a:4222,nats://b:4222`), as the list nats-py takes (it reads a string as one URL)."""
    urls = [part.strip() for part in url.split(",") if part.strip()]
    if not urls:
        raise ValueError("a NATS URL names no server")
    return urls


@functools.lru_cache(maxsize=16_384)  # (every request names its asker's inbox: ~40 µs each, uncached)
def user_scope(user_id: str) -> str:
    """The subject token naming a user: base32 of a SHA-256 prefix, lower case, no padding."""
    digest = hashlib.sha256(b"chronicle-user\0" + user_id.encode()).digest()[:SCOPE_BYTES]
    return base64.b32encode(digest).decode().lower()


def inbox_prefix(user_id: str) -> str:
    """Where the user's replies arrive: their client creates its inboxes under it."""
    return f"{INBOX}.{user_scope(user_id)}"


def signals_prefix(prefix: str, user_id: str) -> str:
    """The subjects the service tells one user about their runs and jobs on."""
    return f"{prefix}.signals.{user_scope(user_id)}"


def usage_subject(prefix: str) -> str:
    """Where the service's instances tell each other what their users spent of the per-user
    limits (adapters/messaging/usage_sync.py). Service-only: no user's connection may publish
    or subscribe there (a forged report could lock a user out; a read one tells who is busy)."""
    return f"{prefix}.internal.usage"


def user_permissions(prefix: str, user_id: str) -> dict[str, Any]:
    """A user's connection: requests to the service's command and query subjects, replies
    on its own inbox, its own signals; nothing else. It cannot subscribe to the service's
    subjects (so it cannot answer them), publish a signal, or reach the JetStream API
    (streams, consumers, buckets, object stores). Nor service discovery (`$SRV.>`): its
    answers went to whatever reply subject a request named, and `$SRV.STATS` counts every
    user's requests; the service's own identities and operators still use it. A token with the
    `feed` role (a system following every user's events: a warehouse loader, a notifier)
    may also read the event feed's stream through consumers of its own (`feed_consumer`);
    it can publish nothing to the stream and reach no other consumer."""
    publish = [f"{prefix}.cmd.>", f"{prefix}.query.>"]
    if FEED_ROLE in getattr(user_id, "roles", ()):  # (the callout passes the Caller, who carries the roles)
        publish += feed_api(prefix, user_id, getattr(user_id, "durables", ()))
    return {
        "pub": {"allow": publish},
        "sub": {"allow": [f"{inbox_prefix(user_id)}.>", f"{signals_prefix(prefix, user_id)}.>"]},
    }


def feed_consumer(user_id: str, durable: str | None, live: int = 0) -> str:
    """The name of a feed user's consumer: their durable `durable`, or, without one, their
    `live`-th follow (0 .. LIVE_CONSUMERS - 1). Each carries the user's scope, so no two
    users' names meet and no feed token reaches another's consumers."""
    scope = user_scope(user_id)
    return f"{scope}-d-{durable}" if durable is not None else f"{scope}-l{live}"


def feed_api(prefix: str, user_id: str, durables: Iterable[str]) -> list[str]:
    """The JetStream API a feed follower uses: the stream's info and single messages (to find
    where a position starts), and its own consumers only (create, look up, pull from,
    delete, ack): those its token names and its live follows'."""
    stream = events_stream(prefix)
    names = [feed_consumer(user_id, name) for name in durables]
    names += [feed_consumer(user_id, None, live) for live in range(LIVE_CONSUMERS)]
    api = f"$JS.API.CONSUMER.{{}}.{stream}.{{}}"
    consumers = [
        subject
        for name in names
        for subject in (
            api.format("CREATE", name), api.format("CREATE", name) + ".>",  # (with a filter subject)
            api.format("INFO", name), api.format("DELETE", name), api.format("MSG.NEXT", name),
            f"$JS.ACK.{stream}.{name}.>",
        )
    ]
    return [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}", *consumers]
