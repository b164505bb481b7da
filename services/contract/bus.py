"""Who may do what on the NATS bus: each user's own inbox and signal subjects, and the
permissions a user's connection is granted (the auth callout hands them to the server).

A user id may hold characters a subject cannot (dots, spaces, wildcards), so subjects name
a user by their scope: a digest of the id, the same on the client and the service.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

INBOX = "_INBOX"
SCOPE_BYTES = 20


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


def user_permissions(prefix: str, user_id: str) -> dict[str, Any]:
    """A user's connection: requests to the service's command and query subjects (and
    service discovery), replies on its own inbox, its own signals; nothing else. It cannot
    subscribe to the service's subjects (so it cannot answer them), publish a signal, or
    reach the JetStream API (streams, consumers, buckets, object stores)."""
    return {
        "pub": {"allow": [f"{prefix}.cmd.>", f"{prefix}.query.>", "$SRV.>"]},
        "sub": {"allow": [f"{inbox_prefix(user_id)}.>", f"{signals_prefix(prefix, user_id)}.>"]},
    }
