"""The read-your-writes port: a query waits until the read models it names include a log position."""

from __future__ import annotations

from abc import ABC, abstractmethod


class Positions(ABC):
    @abstractmethod
    async def wait_for(self, names: list[str], position: int | None, timeout: float) -> None:
        """Return once every read model named has applied the log up to `position` (None:
        at once); raise ChronicleError(unavailable) when that does not happen in `timeout`
        seconds or the database is unreachable; ChronicleError(conflict) for a position beyond
        the last committed event, which no wait would reach."""
