"""The snapshot port: what the snapshot taker (services/runtime/snapshots.py) asks of the store.

An aggregate's state is captured on the writer thread, which owns the aggregate; sealing it
with the owner's key and saving it happen on the taker's own thread. adapters/store/snapshots.py
implements it on `chronicle.snapshots`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from domain.base import Aggregate

SNAPSHOT_COLUMNS = "originator_id, originator_version, topic, state, modified_on"  # a stored snapshot's row


class SnapshotUnreadable(Exception):
    """The snapshot cannot be restored: load the whole stream instead."""


@dataclass(frozen=True)
class Captured:
    """An aggregate's state taken at a version, not yet sealed (safe to hand to another thread)."""

    originator_id: UUID
    originator_version: int
    topic: str
    owner: str
    schema: str
    content: bytes  # the State model's JSON
    created_on: datetime
    modified_on: datetime


@dataclass(frozen=True)
class StoredSnapshot:
    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes
    modified_on: datetime


class SnapshotWriter(ABC):
    @abstractmethod
    def capture(self, aggregate: Aggregate) -> Captured:
        """Raises domain.snapshot.Unsnapshottable or pydantic's ValidationError."""

    @abstractmethod
    def seal(self, captured: Captured) -> StoredSnapshot:
        """Raises UserErased when the owner was erased meanwhile."""

    @abstractmethod
    def save(self, snapshots: Sequence[StoredSnapshot], keep: int = 0) -> None:
        """Insert (an existing version stays as it is), then keep only the latest `keep` (0: all)."""
