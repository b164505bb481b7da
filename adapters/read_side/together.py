"""One pass for several projections: each event read and decoded once, applied by every one that wants it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg

from adapters.read_side.batcher import Batcher, apply_rows, reached_position
from adapters.read_side.tracking import NEXT_EVENTS_OF_ALL, PROGRESS_CHANNEL, SET_TRACKINGS_AND_NOTIFY


def apply_together(
    conn: psycopg.Connection, batchers: list[Batcher], batch_size: int, up_to: int | None = None
) -> tuple[int, Counter[str]]:
    """The next batch of events any of the batchers wants (up to the log's head, or `up_to`),
    each decoded once and applied by every batcher that wants it and has not seen it; their
    rows and tracking positions go in the connection's current transaction. Returns the
    events read and the events each batcher (by tracking name) applied. A batcher without a
    tracking row gets one, and then nothing is applied this time."""
    applied: Counter[str] = Counter()
    names = [b.tracking_name for b in batchers]
    topics = {b.tracking_name: frozenset(b.topics) for b in batchers}
    with conn.cursor() as cur:
        found = cur.execute(
            NEXT_EVENTS_OF_ALL,
            {"names": names, "topics": sorted(set().union(*topics.values())), "limit": batch_size, "up_to": up_to},
            prepare=True,
            binary=True,  # (each event's state as it is: not written out and parsed again as hex)
        ).fetchall()
        tracked, positions, head = found[0][0] or [], found[0][1] or [], found[0][2]
        position = dict(zip(tracked, positions, strict=True))
        missing = [b for b in batchers if b.tracking_name not in position]
        for batcher in missing:  # a tracking row not there yet (first start)
            batcher.ensure_tracking(conn)
        if missing:
            return 0, applied
        events = [row[3:] for row in found if row[3] is not None]
        wanting = [b for b in batchers if position[b.tracking_name] < head]
        if not wanting:
            return 0, applied
        batches = [b.view.begin(cur) for b in wanting]

        def readers(notification_id: int, topic: str) -> list[Batcher]:
            return [b for b in wanting if topic in topics[b.tracking_name] and notification_id > position[b.tracking_name]]

        def apply(batcher: Batcher, event: Any, notification_id: int) -> None:
            batcher.projection.apply(event, notification_id)
            applied[batcher.tracking_name] += 1

        apply_rows(wanting[0].mapper, events, readers, apply)
        for batch in batches:
            batch.flush()
        reached = reached_position(events, batch_size, head)
        cur.execute(
            SET_TRACKINGS_AND_NOTIFY,
            {
                "names": [b.tracking_name for b in wanting],
                "positions": [max(position[b.tracking_name], reached) for b in wanting],
                "versions": [b.projection.version for b in wanting],
                "channel": PROGRESS_CHANNEL,
            },
            prepare=True,
        )
        return len(events), applied
