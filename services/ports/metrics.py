"""The metrics port: what the command bus records about its group commits (adapters/metrics.py
keeps them as Prometheus instruments). Each call is one cached instrument's update: it sits
on the writer thread, once per batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable


class CommitMetrics(ABC):
    @abstractmethod
    def watch_queue(self, size: Callable[[], int]) -> None:
        """`size()` is the number of commands waiting for a commit, read when scraped."""

    @abstractmethod
    def committed(self, commands: int, seconds: float) -> None:
        """One group commit of `commands` took `seconds`."""

    @abstractmethod
    def conflicted(self) -> None:
        """A group commit is decided again: another writer saved first."""
