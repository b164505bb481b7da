"""The audit's decoder port: stored events, as rows of `chronicle.events`, made readable for an
audit; and the latest snapshot's row made an aggregate. Content is opened with its owner's
key, so adapters/store/audit_decoder.py implements it with the store's own mapper."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from domain.base import Aggregate

# The columns of a stored event's row that the decoder reads.
EVENT_COLUMNS = "originator_id, originator_version, topic, state, notification_id, hash"


class EventDecoder(ABC):
    @abstractmethod
    def event(self, row: dict[str, Any]) -> Any:
        """The domain event; ErasedContent when its owner was erased."""

    @abstractmethod
    def owner_and_type(self, row: dict[str, Any]) -> tuple[str, str]:
        """A creation event's owner and aggregate type, readable even after an erasure."""

    @abstractmethod
    def described(self, row: dict[str, Any], aggregate_type: str) -> dict[str, Any]:
        """The event as an audit shows it (services' AuditEvent): decoded, or, when its owner
        was erased, the clear metadata with `erased`."""

    @abstractmethod
    def snapshot(self, row: dict[str, Any]) -> Aggregate:
        """The aggregate a snapshot's row (SNAPSHOT_COLUMNS) holds; ErasedContent when its
        owner was erased, SnapshotUnreadable when it does not fit."""
