"""The relay port: what a capability publishes when some of its events commit.

The capability says which event classes it relays and what each becomes on the bus; the
adapter (adapters/read_side/relay.py) reads them from the log after the commit, at least
once, and learns whose aggregate each event is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

# What the command bus tells its listeners after each commit, on its writer thread: the
# (position, event, owner) of every event saved, owner being the user whose aggregate it
# is (None for the system's), so a fast path need not ask the log.
Committed = list[tuple[int, Any, str | None]]


class Relay(ABC):
    """Subclasses set `name` (their position in the log is tracked under it) and `relayed`
    (the event classes they publish)."""

    name: ClassVar[str]
    relayed: ClassVar[tuple[type, ...]]

    @abstractmethod
    async def publish(self, position: int, event: Any, owner: str) -> None:
        """Publish what this committed event, at this log position, of this owner's aggregate becomes."""
