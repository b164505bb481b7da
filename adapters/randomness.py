"""Random bytes and ids for the writer's hot path, drawn from the OS a block at a time.

`os.urandom` lets go of the GIL around each getrandom(2) call. On the writer thread that
was two calls a command (a new id, a content nonce), ~200 a group commit at 100 in flight,
each a chance for the event loop to take the GIL and the writer to wait for it back (a
group commit 0.4-7% shorter without them: docs/performance.md, 11-28e). Here a thread
draws `BLOCK` bytes at once and slices them: the same OS generator's output, each byte
handed out once. Each thread slices a block of its own, and a forked child starts with
none of its parent's (whose unused bytes the parent will still hand out).
"""

from __future__ import annotations

import os
import threading
from uuid import UUID

BLOCK = 4096  # bytes drawn from the OS at once, per thread


class _Drawn(threading.local):
    block = b""
    used = 0


_drawn = _Drawn()


def _forget_drawn() -> None:
    global _drawn
    _drawn = _Drawn()


os.register_at_fork(after_in_child=_forget_drawn)


def random_bytes(n: int) -> bytes:
    """`n` bytes from the OS's cryptographic generator, as `os.urandom(n)` gives them."""
    drawn = _drawn
    start = drawn.used
    if start + n > len(drawn.block):
        if n > BLOCK:
            return os.urandom(n)
        drawn.block, start = os.urandom(BLOCK), 0
    drawn.used = start + n
    return drawn.block[start:start + n]


def uuid4() -> UUID:
    """A random (version 4) UUID, as `uuid.uuid4()` makes it."""
    return UUID(bytes=random_bytes(16), version=4)
