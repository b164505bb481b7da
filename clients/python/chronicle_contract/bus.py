"""Who may do what on the NATS bus: each user's own inbox and signal subjects, and the
permissions a user's connection is granted (the auth callout hands them to the server).

A user id may hold characters a subject cannot (dots, spaces, wildcards), so subjects name
a user by their scope: a digest of the id, the same on the client and the service.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from chronicle_contract.events import FEED_ROLE, events_stream

INBOX = "_INBOX"
SCOPE_BYTES = 20


def server_urls(url: str) -> list[str]:
    """A NATS URL as the settings take it, one server or a cluster's comma-separated
    (`nats://a:4222,nats://b:4222`), as the list nats-py takes (it reads a string as one URL)."""
    urls = [part.strip() for part in url.split(",") if part.strip()]
    if not urls:
        raise ValueError("a NATS URL names no server")
    return urls


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
    """A user's connection: requests to the service's command and query subjects (and
    service discovery), replies on its own inbox, its own signals; nothing else. It cannot
    subscribe to the service's subjects (so it cannot answer them), publish a signal, or
    reach the JetStream API (streams, consumers, buckets, object stores). A token with the
    `feed` role (a system following every user's events: a warehouse loader, a notifier)
    may also read the event feed's stream through consumers of its own; it can publish
    nothing to the stream and reach no other."""
    publish = [f"{prefix}.cmd.>", f"{prefix}.query.>", "$SRV.>"]
    if FEED_ROLE in getattr(user_id, "roles", ()):  # (the callout passes the Caller, who carries the roles)
        publish += feed_api(prefix)
    return {
        "pub": {"allow": publish},
        "sub": {"allow": [f"{inbox_prefix(user_id)}.>", f"{signals_prefix(prefix, user_id)}.>"]},
    }


def feed_api(prefix: str) -> list[str]:
    """The JetStream API a feed follower uses: the stream's info and single messages (to find
    where a position starts), its consumers (create, look up, pull from, delete), its acks."""
    stream = events_stream(prefix)
    consumers = [f"$JS.API.CONSUMER.{verb}.{stream}.>" for verb in ("CREATE", "DURABLE.CREATE", "INFO", "DELETE", "MSG.NEXT")]
    return [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}", *consumers, f"$JS.ACK.{stream}.>"]
