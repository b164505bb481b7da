"""Parking: an event a consumer (a read model, a relay) cannot take is set aside, recorded, and passed.

Only the event's position, topic and the kind of failure are recorded, never its content
(infra/migrations/0008_parked.sql); `projections status` and the metrics show them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.sql import SQL

from adapters.read_side.tracking import SET_TRACKING
from adapters.store.postgres import PostgresTarget
from projections.view import Projection

if TYPE_CHECKING:
    from adapters.read_side.batcher import Batcher

log = logging.getLogger(__name__)

PARK = SQL(
    "INSERT INTO chronicle.parked (consumer, position, topic, error) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (consumer, position) DO NOTHING"
)
# The next event a projection wants, past its position.
NEXT_WANTED = SQL(
    "SELECT e.notification_id, e.topic FROM chronicle.projections p JOIN chronicle.events e"
    " ON e.notification_id > p.position AND e.topic = ANY(%(topics)s)"
    " WHERE p.name = %(name)s ORDER BY e.notification_id LIMIT 1"
)
ATTEMPTS = 3  # times one event is tried on its own before it is parked


def failure_kind(error: BaseException) -> str:
    """What went wrong, for a parked item: the exception's type and SQLSTATE, never its
    message (which may quote the content)."""
    state = getattr(error, "sqlstate", None)
    return f"{type(error).__name__}" + (f" (SQLSTATE {state})" if state else "")


@dataclass(frozen=True)
class ParkedCount:
    consumer: str
    count: int
    last_position: int
    last_error: str


def parked(target: PostgresTarget) -> list[ParkedCount]:
    """How many items each consumer set aside, and its latest."""
    with target.connect(autocommit=True) as conn:
        return parked_on(conn)


def parked_on(conn: psycopg.Connection) -> list[ParkedCount]:
    rows = conn.execute(
        "SELECT DISTINCT ON (consumer) consumer, count(*) OVER (PARTITION BY consumer), position, error"
        " FROM chronicle.parked ORDER BY consumer, position DESC"
    ).fetchall()
    return [ParkedCount(*row) for row in rows]


def passing_errors(projection: Projection[Any]) -> tuple[type[BaseException], ...]:
    """Failures that are not the event's: the connection's, and what the projection says is transient."""
    return (psycopg.OperationalError, psycopg.InterfaceError, *projection.transient_errors)


def apply_isolating(conn: psycopg.Connection, batcher: Batcher, up_to: int | None = None) -> int:
    """Apply a batch's worth of events one at a time; the one that fails ATTEMPTS times on
    its own is parked (recorded, and the position moved past it), so the read model goes on
    past an event it cannot apply. Returns the events applied or parked."""
    projection = batcher.projection
    passing = passing_errors(projection)
    done = 0
    while done < batcher.batch_size:
        for _ in range(ATTEMPTS):
            try:
                count, _ = batcher.apply_batch(conn, up_to, limit=1)
                break
            except passing:
                raise
            except Exception as error:
                failure = error
        else:
            park(conn, batcher, failure)
            count = 1
        if count == 0:
            break  # caught up
        done += count
    return done


def park(conn: psycopg.Connection, batcher: Batcher, failure: Exception) -> None:
    """Set aside the next event the batcher wants, recorded under the projection's name."""
    name = batcher.projection.name
    with conn.transaction():
        row = conn.execute(NEXT_WANTED, {"name": batcher.tracking_name, "topics": batcher.topics}).fetchone()
        if row is None:
            return
        position, topic = row
        conn.execute(PARK, (name, position, topic, failure_kind(failure)))
        conn.execute(SET_TRACKING, (position, batcher.projection.version, batcher.tracking_name))
    log.error("event parked: the read model cannot apply it",
              extra={"projection": name, "position": position, "topic": topic, "error_type": failure_kind(failure)})
