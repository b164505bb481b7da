"""Request ids: one per request, the client's own when it sends a usable `Request-Id`
header, else made here; set for the request's task (and what it starts) so that every log
line written while handling it carries it (entrypoints/logs.py), and sent back in
the reply's `Request-Id` header, so a caller can quote it and an operator find its lines."""

from __future__ import annotations

import os
import re
from contextvars import ContextVar

HEADER = "Request-Id"
USABLE = re.compile(r"[A-Za-z0-9._:-]{1,64}")  # what a client may choose (no spaces, no control bytes)

current: ContextVar[str | None] = ContextVar("request_id", default=None)


def request_id(headers: dict[str, str] | None) -> str:
    """The client's id when it is usable, else a new one."""
    given = (headers or {}).get(HEADER)
    # (8 random bytes as hex: what uuid4().hex[:16] gave, at a third of its cost, which a
    # flood of refused requests each without an id pays)
    return given if given is not None and USABLE.fullmatch(given) else os.urandom(8).hex()
