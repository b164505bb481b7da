"""Stored events for an audit: decoded with the store's mapper, or, when their owner was erased,
the clear metadata that survives; the audit's snapshots restored by the snapshot codec."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from adapters.store.mapper import PydanticMapper
from adapters.store.snapshots import SnapshotCodec, stored_snapshot
from domain.base import Aggregate
from services.ports.audit import EventDecoder
from services.ports.event_store import ErasedContent
from services.ports.keys import KeyRing


def stored(row: dict[str, Any]) -> StoredEvent:
    return StoredEvent(row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"]))


class Decoder(EventDecoder):
    """Events for an audit: decoded, or, when their owner was erased, the clear metadata."""

    def __init__(self, keys: KeyRing | None) -> None:
        self.mapper = PydanticMapper(keys=keys)
        self.snapshots = SnapshotCodec(self.mapper)

    def event(self, row: dict[str, Any]) -> Any:
        """The domain event; raises ErasedContent."""
        return self.mapper.to_domain_event(stored(row))

    def owner_and_type(self, row: dict[str, Any]) -> tuple[str, str]:
        """A creation event's owner and aggregate type, readable even after an erasure."""
        envelope = self.mapper.envelope(stored(row))
        return envelope["owner"], envelope["originator_topic"].rpartition(":")[2]

    def opened(self, originator_id: UUID, version: int, state: bytes) -> tuple[str, dict[str, Any], bytes | None, bool]:
        """An event's timestamp, its other clear fields, its content unsealed (the JSON it
        was sealed as; None when nothing was sealed or its owner was erased), and whether
        its owner was erased. The stored JSON as it is, not re-serialised through the
        event model: an export of millions of events spends its time here."""
        clear = self.mapper.stored_json(state)
        timestamp = clear.pop("timestamp")
        try:
            return timestamp, clear, self.mapper.take_content(clear, originator_id, version), False
        except ErasedContent:
            return timestamp, clear, None, True

    def described(self, row: dict[str, Any], aggregate_type: str) -> dict[str, Any]:
        timestamp, clear, content, erased = self.opened(row["originator_id"], row["originator_version"], bytes(row["state"]))
        return {
            "aggregate_id": row["originator_id"],
            "aggregate_type": aggregate_type,
            "version": row["originator_version"],
            "position": row["notification_id"],
            "type": row["topic"].rpartition(":")[2],
            "timestamp": timestamp,
            "payload": clear if content is None else {**clear, **orjson.loads(content)},
            "erased": erased,
            "hash": bytes(row["hash"]).hex() if row.get("hash") is not None else None,
        }

    def snapshot(self, row: dict[str, Any]) -> Aggregate:
        return self.snapshots.decode(stored_snapshot(row))
