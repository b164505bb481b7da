"""The tracking rows: each read model's and relay's position in the log, and the statements that move them.

A read model's rows and its position commit in one transaction, so a crash never
double-applies or skips an event; the tracking row is locked for each batch, so two
engines (or an engine and a rebuild) serialise instead of racing. Each move is announced
on PROGRESS_CHANNEL ("name:position[,name:position...]") for read-your-writes waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.sql import SQL

from adapters.store.postgres import PostgresTarget
from projections.view import Projection

PROGRESS_CHANNEL = "chronicle_projections"

# One round trip for a batch's input: lock the tracking row, read the log's head and the
# next events of this projection's types. A read model is derived, so its transactions
# need not wait for the disk: a crash loses rows and position together, re-applied later.
NEXT_EVENTS = SQL(
    "WITH tracking AS (SELECT position FROM chronicle.projections WHERE name = %(name)s FOR UPDATE),"
    " head AS (SELECT coalesce(%(up_to)s::bigint, max(notification_id), 0) AS head FROM chronicle.events),"
    " no_fsync AS (SELECT set_config('synchronous_commit', 'off', true))"
    " SELECT tracking.position, head.head, e.notification_id, e.originator_id, e.originator_version, e.topic,"
    " e.state FROM tracking CROSS JOIN head CROSS JOIN no_fsync LEFT JOIN LATERAL ("
    "  SELECT * FROM chronicle.events ev WHERE ev.notification_id > tracking.position"
    "  AND ev.notification_id <= head.head AND (%(topics)s::text[] IS NULL OR ev.topic = ANY(%(topics)s))"
    "  ORDER BY ev.notification_id LIMIT %(limit)s) e ON true"
)  # (topics NULL: every event, for the event feed)
SET_TRACKING_AND_NOTIFY = SQL(
    "UPDATE chronicle.projections SET position = %(position)s, version = %(version)s, updated_at = now()"
    " WHERE name = %(name)s RETURNING pg_notify(%(channel)s, name || ':' || position)"
)
# The same for every live projection at once: lock their tracking rows (in name order, so
# two engines cannot deadlock) and read the next events any of them wants after the
# lowest position (up to the head, or to `up_to`: a rebuild's end).
NEXT_EVENTS_OF_ALL = SQL(
    "WITH tracking AS (SELECT name, position FROM chronicle.projections WHERE name = ANY(%(names)s)"
    "  ORDER BY name FOR UPDATE),"
    " low AS (SELECT coalesce(min(position), 0) AS position, array_agg(name) AS names,"
    "  array_agg(position) AS positions FROM tracking),"
    " head AS (SELECT coalesce(%(up_to)s::bigint, max(notification_id), 0) AS head FROM chronicle.events),"
    " no_fsync AS (SELECT set_config('synchronous_commit', 'off', true))"
    " SELECT low.names, low.positions, head.head, e.notification_id, e.originator_id, e.originator_version,"
    " e.topic, e.state FROM low CROSS JOIN head CROSS JOIN no_fsync LEFT JOIN LATERAL ("
    "  SELECT * FROM chronicle.events ev WHERE ev.notification_id > low.position"
    "  AND ev.notification_id <= head.head AND ev.topic = ANY(%(topics)s)"
    "  ORDER BY ev.notification_id LIMIT %(limit)s) e ON true"
)
# One notification for the lot, "name:position,name:position" (a listener pays per
# notification, and a batch moves every read model at once).
SET_TRACKINGS_AND_NOTIFY = SQL(
    "WITH moved AS (UPDATE chronicle.projections p SET position = d.position, version = d.version, updated_at = now()"
    " FROM unnest(%(names)s::text[], %(positions)s::bigint[], %(versions)s::int[]) AS d(name, position, version)"
    " WHERE p.name = d.name AND (p.position, p.version) IS DISTINCT FROM (d.position, d.version)"
    " RETURNING p.name, p.position)"
    " SELECT pg_notify(%(channel)s, string_agg(name || ':' || position, ',')) FROM moved HAVING count(*) > 0"
)
HEAD = SQL("SELECT coalesce(max(notification_id), 0) FROM chronicle.events")
LOCK_TRACKING = SQL("SELECT position, version FROM chronicle.projections WHERE name = %s FOR UPDATE")
SET_TRACKING = SQL(
    "UPDATE chronicle.projections SET position = %s, version = %s, updated_at = now() WHERE name = %s"
)
ADD_TRACKING = SQL(
    "INSERT INTO chronicle.projections (name, position, version) VALUES (%s, 0, %s) ON CONFLICT (name) DO NOTHING"
)



@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    position: int
    head: int
    version: int
    code_version: int
    updated_at: object

    @property
    def lag(self) -> int:
        return max(self.head - self.position, 0)


def head_position(conn: psycopg.Connection) -> int:
    return conn.execute(HEAD).fetchone()[0]  # type: ignore[index]


def tracked_position(conn: psycopg.Connection, name: str) -> int:
    row = conn.execute("SELECT position FROM chronicle.projections WHERE name = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def tracked_version(conn: psycopg.Connection, name: str) -> int | None:
    row = conn.execute("SELECT version FROM chronicle.projections WHERE name = %s", (name,)).fetchone()
    return row[0] if row else None


def status(target: PostgresTarget, projections: list[Projection[Any]]) -> list[ProjectionStatus]:
    with target.connect(autocommit=True) as conn:
        head, rows = tracking(conn)
    return [
        ProjectionStatus(
            name=p.name,
            position=rows.get(p.name, (0,))[0],
            head=head,
            version=rows.get(p.name, (0, 0))[1],
            code_version=p.version,
            updated_at=rows.get(p.name, (0, 0, None))[2],
        )
        for p in projections
    ]


def tracking(conn: psycopg.Connection) -> tuple[int, dict[str, tuple[int, int, object]]]:
    """The log's head, and every tracking row (read models' and relays'): name -> (position,
    version, updated_at)."""
    head = head_position(conn)
    rows = {r[0]: r[1:] for r in conn.execute("SELECT name, position, version, updated_at FROM chronicle.projections")}
    return head, rows
