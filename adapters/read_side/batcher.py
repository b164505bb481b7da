"""Batcher: one projection's events applied a batch per transaction, with its tracking position."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from eventsourcing.persistence import StoredEvent

from adapters.read_side.tracking import ADD_TRACKING, NEXT_EVENTS, PROGRESS_CHANNEL, SET_TRACKING_AND_NOTIFY
from adapters.read_side.view import postgres_view
from adapters.store.keys import KeyRing
from adapters.store.mapper import ErasedContent, PydanticMapper
from projections.view import Projection


class Batcher:
    """Applies one projection's events in batches, tracked under `tracking_name`."""

    def __init__(self, projection: Projection[Any], tracking_name: str, batch_size: int, keys: KeyRing | None = None):
        self.projection = projection
        self.view = postgres_view(projection)
        self.tracking_name = tracking_name
        self.batch_size = batch_size
        self.mapper = PydanticMapper(keys=keys)
        if keys is not None:
            self.view.use_keys(keys)
        self.topics = projection.topics()

    def ensure_tracking(self, conn: psycopg.Connection) -> None:
        conn.execute(ADD_TRACKING, (self.tracking_name, self.projection.version))

    def apply_batch(self, conn: psycopg.Connection, up_to: int | None = None, limit: int | None = None) -> tuple[int, int]:
        """Apply the next batch (of `limit` events, else the batch size) in its own
        transaction; return (events applied, new position)."""
        with conn.transaction():
            return self.apply_batch_in(conn, up_to, limit)

    def apply_batch_in(self, conn: psycopg.Connection, up_to: int | None = None, limit: int | None = None) -> tuple[int, int]:
        limit = limit or self.batch_size
        with conn.cursor() as cur:
            found = cur.execute(
                NEXT_EVENTS,
                {"name": self.tracking_name, "up_to": up_to, "topics": self.topics, "limit": limit},
                prepare=True,
                binary=True,
            ).fetchall()
            assert found, f"no tracking row for {self.tracking_name}"
            position, head = found[0][0], found[0][1]
            if head <= position:
                return 0, position
            events = [row[2:] for row in found if row[2] is not None]
            batch = self.view.begin(cur)

            def apply(_: object, event: Any, notification_id: int) -> None:
                self.projection.apply(event, notification_id)

            apply_rows(self.mapper, events, lambda notification_id, topic: (self,), apply)
            batch.flush()
            new_position = reached_position(events, limit, head)
            cur.execute(
                SET_TRACKING_AND_NOTIFY,
                {
                    "position": new_position,
                    "version": self.projection.version,
                    "name": self.tracking_name,
                    "channel": PROGRESS_CHANNEL,
                },
                prepare=True,
            )
            return len(events), new_position


Reader = TypeVar("Reader")


def apply_rows(
    mapper: PydanticMapper,
    rows: Sequence[Sequence[Any]],
    readers: Callable[[int, str], Sequence[Reader]],
    apply: Callable[[Reader, Any, int], None],
) -> None:
    """Each (notification id, originator id, version, topic, state) row decoded once, if any
    reader wants it, and applied by each of them; an event whose owner was erased is skipped:
    nothing of it belongs in a read model."""
    for notification_id, originator_id, version, topic, state in rows:
        wanting = readers(notification_id, topic)
        if not wanting:
            continue
        try:
            event = mapper.to_domain_event(StoredEvent(originator_id, version, topic, state))
        except ErasedContent:
            continue
        for reader in wanting:
            apply(reader, event, notification_id)


def reached_position(rows: Sequence[Sequence[Any]], batch_size: int, head: int) -> int:
    """A full batch ends at its last event; a short one means nothing else wanted exists up to head."""
    return int(rows[-1][0]) if len(rows) == batch_size else head
