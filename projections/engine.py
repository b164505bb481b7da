"""Runs projections: batches of events applied with their tracking position in one transaction.

The engine's Tail wakes on Postgres NOTIFY (re-listening when that connection drops),
reads the notification log after the live projections' positions, applies a batch to
each, and commits the rows with the new positions, so a crash never double-applies or
skips an event. The tracking rows are locked for each batch, so two engines (or an
engine and a rebuild) serialise instead of racing. Rebuilds and verification use one
projection's Batcher.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Identifier

from adapters.store.event_store import EVENTS_CHANNEL
from adapters.store.keys import KeyRing
from adapters.store.mapper import ErasedContent, PydanticMapper
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import RECONNECT_WAIT_MAX
from projections.base import Projection

log = logging.getLogger(__name__)

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
# lowest position.
NEXT_EVENTS_OF_ALL = SQL(
    "WITH tracking AS (SELECT name, position FROM chronicle.projections WHERE name = ANY(%(names)s)"
    "  ORDER BY name FOR UPDATE),"
    " low AS (SELECT coalesce(min(position), 0) AS position, array_agg(name) AS names,"
    "  array_agg(position) AS positions FROM tracking),"
    " head AS (SELECT coalesce(max(notification_id), 0) AS head FROM chronicle.events),"
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


# An item a consumer (a read model, a relay) cannot take, set aside: its position, its
# event's topic and the kind of failure (never the content); infra/migrations/0008_parked.sql.
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


def passing_errors(projection: Projection) -> tuple[type[BaseException], ...]:
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


class Batcher:
    """Applies one projection's events in batches, tracked under `tracking_name`."""

    def __init__(self, projection: Projection, tracking_name: str, batch_size: int, keys: KeyRing | None = None):
        self.projection = projection
        self.tracking_name = tracking_name
        self.batch_size = batch_size
        self.mapper = PydanticMapper(keys=keys)
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
            ).fetchall()
            assert found, f"no tracking row for {self.tracking_name}"
            position, head = found[0][0], found[0][1]
            if head <= position:
                return 0, position
            events = [row[2:] for row in found if row[2] is not None]
            batch = self.projection.batch(cur)

            def apply(_: object, event: Any, notification_id: int) -> None:
                self.projection.apply(batch, event, notification_id)

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


def head_position(conn: psycopg.Connection) -> int:
    return conn.execute(HEAD).fetchone()[0]  # type: ignore[index]


def create_schema(conn: psycopg.Connection, projection: Projection, *, defer_bulk_indexes: bool = False) -> None:
    conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(projection.schema)))
    conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(projection.schema)))
    for statement in projection.create_statements(deferred=False if defer_bulk_indexes else None):
        conn.execute(statement)


def vacuum_analyze(conn: psycopg.Connection, schema: str) -> None:
    """Fresh statistics and a clean visibility map for every table of a read model."""
    vacuum(conn, schema, SQL("VACUUM (ANALYZE) {}.{}"))


def vacuum(conn: psycopg.Connection, schema: str, statement: SQL = SQL("VACUUM {}.{}")) -> None:
    """Every table of a read model vacuumed: dead row versions gone, their space free."""
    tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    for (table,) in tables:
        conn.execute(statement.format(Identifier(schema), Identifier(table)))


def rebuild(
    target: PostgresTarget,
    projection_class: type[Projection],
    *,
    batch_size: int = 2000,
    progress: Callable[[int, int], None] = lambda done, total: None,
    only_if_outdated: bool = False,
    keys: KeyRing | None = None,
    **options: Any,
) -> int:
    """Rebuild a read model from the first event into fresh tables, then swap them in.

    Queries keep reading the old tables until the swap, which happens in one transaction
    holding the live tracking row, so the live runner pauses for just that moment. Bulk
    (GIN) indexes are built once after loading, and the tables are vacuumed and analysed
    before they go live. One rebuild per read model at a time, fleet-wide; with
    `only_if_outdated`, a rebuild that finds the read model current (another process just
    built it) does nothing. Returns the number of events applied. Without `keys`, a key
    ring of its own reads the sealed content.
    """
    with contextlib.ExitStack() as owned:
        if keys is None:
            keys = KeyRing(target)
            owned.callback(keys.close)
        return _rebuild(target, projection_class, batch_size, progress, only_if_outdated, keys, options)


def _rebuild(
    target: PostgresTarget,
    projection_class: type[Projection],
    batch_size: int,
    progress: Callable[[int, int], None],
    only_if_outdated: bool,
    keys: KeyRing,
    options: dict[str, Any],
) -> int:
    name = projection_class.name
    live = projection_class(**options)
    scratch = projection_class(schema=f"{live.schema}__rebuild", **options)
    batcher = Batcher(scratch, f"{name}__rebuild", batch_size, keys)
    applied = 0
    with target.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"rebuild:{name}",))
        if only_if_outdated and tracked_version(conn, name) == live.version:
            return 0
        with conn.transaction():
            create_schema(conn, scratch, defer_bulk_indexes=True)
            conn.execute("DELETE FROM chronicle.projections WHERE name = %s", (batcher.tracking_name,))
            # What was parked is tried again: fixed, it is applied; else parked anew.
            conn.execute("DELETE FROM chronicle.parked WHERE consumer = %s", (name,))
            batcher.ensure_tracking(conn)
        total = head_position(conn)
        while True:
            try:
                count, position = batcher.apply_batch(conn, up_to=total)
            except passing_errors(scratch):
                raise
            except Exception:  # some event of the batch this projection cannot apply: park it
                log.exception("rebuild batch failed; finding the event", extra={"projection": name})
                count = apply_isolating(conn, batcher, up_to=total)
                position = tracked_position(conn, batcher.tracking_name)
            applied += count
            progress(position, total)
            if position >= total:
                break
        for statement in scratch.create_statements(deferred=True):
            conn.execute(statement)
        vacuum_analyze(conn, scratch.schema)
        with conn.transaction():
            Batcher(live, name, batch_size).ensure_tracking(conn)
            conn.execute(LOCK_TRACKING, (name,))
            while True:  # catch up with what arrived meanwhile, holding the live row
                count, position = batcher.apply_batch_in(conn)
                applied += count
                if count == 0:
                    break
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(live.schema)))
            conn.execute(SQL("ALTER SCHEMA {} RENAME TO {}").format(Identifier(scratch.schema), Identifier(live.schema)))
            conn.execute(SET_TRACKING, (position, live.version, name))
            conn.execute("DELETE FROM chronicle.projections WHERE name = %s", (batcher.tracking_name,))
            conn.execute("SELECT pg_notify(%s, %s)", (PROGRESS_CHANNEL, f"{name}:{position}"))
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"rebuild:{name}",))
        progress(position, max(total, position))
    return applied


def rebuild_all(
    target: PostgresTarget,
    projections: list[tuple[type[Projection], dict[str, Any]]],
    *,
    batch_size: int = 2000,
    progress: Callable[[str, int, int], None] = lambda name, done, total: None,
) -> dict[str, int]:
    """Rebuild several read models side by side (one thread each: while one waits on
    Postgres another runs Python), sharing one key ring; returns events applied per read model."""
    applied: dict[str, int] = {}

    def one(keys: KeyRing, projection_class: type[Projection], options: dict[str, Any]) -> None:
        applied[projection_class.name] = rebuild(
            target,
            projection_class,
            batch_size=batch_size,
            progress=lambda done, total: progress(projection_class.name, done, total),
            keys=keys,
            **options,
        )

    with contextlib.closing(KeyRing(target)) as keys:
        side_by_side({f"rebuild-{cls.name}": functools.partial(one, keys, cls, options) for cls, options in projections})
    return applied


def side_by_side(calls: dict[str, Callable[[], object]]) -> None:
    """Run each call in its own named thread and wait for all; the first failure is raised
    once every one has finished."""
    failures: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as error:  # handed to the caller's thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(call,), name=name) for name, call in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def tracked_position(conn: psycopg.Connection, name: str) -> int:
    row = conn.execute("SELECT position FROM chronicle.projections WHERE name = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def tracked_version(conn: psycopg.Connection, name: str) -> int | None:
    row = conn.execute("SELECT version FROM chronicle.projections WHERE name = %s", (name,)).fetchone()
    return row[0] if row else None


def status(target: PostgresTarget, projections: list[Projection]) -> list[ProjectionStatus]:
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


class Wakeup:
    """Listens for new events on Postgres NOTIFY and wakes the runners; re-listens on drop."""

    def __init__(self, target: PostgresTarget, stop: threading.Event):
        self.target = target
        self.stop = stop
        self.events: list[threading.Event] = []
        self.thread = threading.Thread(target=self._run, name="chronicle-listen", daemon=True)

    def subscribe(self) -> threading.Event:
        event = threading.Event()
        self.events.append(event)
        return event

    def _wake_all(self) -> None:
        for event in self.events:
            event.set()

    def _run(self) -> None:
        backoff = 0.1
        while not self.stop.is_set():
            try:
                with self.target.connect(autocommit=True) as conn:
                    conn.execute(SQL("LISTEN {}").format(Identifier(EVENTS_CHANNEL)))
                    backoff = 0.1
                    self._wake_all()  # anything committed while we were not listening
                    while not self.stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            self._wake_all()
            except psycopg.Error as error:
                log.warning("listen connection lost; reconnecting", extra={"error_type": type(error).__name__})
                self.stop.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_WAIT_MAX)  # back within moments of the server


class Runner:
    """One live projection as the engine keeps it: its batcher and what it has applied."""

    def __init__(self, target: PostgresTarget, projection: Projection, batch_size: int, keys: KeyRing):
        self.target = target
        self.projection = projection
        self.batcher = Batcher(projection, projection.name, batch_size, keys)
        self.topics = frozenset(self.batcher.topics)
        self.applied = 0  # events applied, read by the janitor

    def prepare(self) -> None:
        """Build the read model when it is missing or the code's version changed."""
        with self.target.connect(autocommit=True) as conn:
            current = tracked_version(conn, self.projection.name) == self.projection.version
        if not current:
            log.info("building read model", extra={"projection": self.projection.name})
            rebuild(
                self.target,
                type(self.projection),
                batch_size=self.batcher.batch_size,
                only_if_outdated=True,
                **self.projection.options,
            )


class Tail:
    """Keeps every live read model up to date in one thread, one transaction per batch.

    Each event is read and decoded once and applied to every projection that wants it and
    has not seen it; all their rows and positions commit together. A projection that fails
    on a batch makes that batch be applied projection by projection instead, so the
    others keep going while it is retried.
    """

    def __init__(self, target: PostgresTarget, runners: list[Runner], wake: threading.Event, stop: threading.Event,
                 batch_size: int, keys: KeyRing, scrub: Callable[[list[str]], None] = lambda schemas: None,
                 poll_interval: float = 2.0):
        """`scrub(schemas)`: told of the read models an erasure deleted rows from, once committed."""
        self.target = target
        self.runners = runners
        self.scrub = scrub
        self.wake = wake
        self.stop = stop
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.names = [r.projection.name for r in runners]
        self.topics = sorted(set().union(*(r.topics for r in runners)))
        self.mapper = PydanticMapper(keys=keys)
        self.thread = threading.Thread(
            target=self._run, name="projections-" + "+".join(self.names), daemon=True
        )
        self.prepared = threading.Event()  # its read models exist (built at first start)

    def _run(self) -> None:
        backoff = 0.1
        while not self.stop.is_set():
            try:
                self._prepare_all()
                self.prepared.set()
                with self.target.connect(autocommit=True) as conn:
                    backoff = 0.1
                    while not self.stop.is_set():
                        self.wake.clear()
                        applied = self._apply_batch(conn)
                        self._scrub_erased()
                        if applied < self.batch_size:
                            self.wake.wait(self.poll_interval)
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                log.warning("projection connection lost; retrying", extra={"error_type": type(error).__name__})
                self.stop.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_WAIT_MAX)  # back within moments of the server
            except Exception:  # a read model that cannot be built: loud, and retried slowly
                log.exception("preparing read models failed; retrying")
                self.stop.wait(5.0)

    def _scrub_erased(self) -> None:
        erased = [r.projection for r in self.runners if r.projection.scrub_due]
        for projection in erased:
            projection.scrub_due = False
        if erased:
            self.scrub([p.schema for p in erased])

    def _prepare_all(self) -> None:
        """Build missing or outdated read models side by side before following the log;
        the first failure is raised here (a lost connection is then retried)."""
        side_by_side({f"prepare-{r.projection.name}": r.prepare for r in self.runners})

    def _apply_batch(self, conn: psycopg.Connection) -> int:
        try:
            with conn.transaction():
                return self._apply_batch_in(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except Exception:  # some projection cannot apply an event: isolate it
            log.exception("combined projection batch failed; applying projection by projection")
            return self._apply_one_by_one(conn)

    def _apply_batch_in(self, conn: psycopg.Connection) -> int:
        with conn.cursor() as cur:
            found = cur.execute(
                NEXT_EVENTS_OF_ALL,
                {"names": self.names, "topics": self.topics, "limit": self.batch_size},
                prepare=True,
            ).fetchall()
            names, positions, head = found[0][0] or [], found[0][1] or [], found[0][2]
            position = dict(zip(names, positions, strict=True))
            missing = [r for r in self.runners if r.projection.name not in position]
            for runner in missing:  # a tracking row not there yet (first start)
                runner.batcher.ensure_tracking(conn)
            if missing:
                return 0
            events = [row[3:] for row in found if row[3] is not None]
            wanting = [r for r in self.runners if position[r.projection.name] < head]
            if not wanting:
                return 0
            batches = {r.projection.name: r.projection.batch(cur) for r in wanting}

            def readers(notification_id: int, topic: str) -> list[Runner]:
                return [r for r in wanting if topic in r.topics and notification_id > position[r.projection.name]]

            def apply(runner: Runner, event: Any, notification_id: int) -> None:
                runner.projection.apply(batches[runner.projection.name], event, notification_id)
                runner.applied += 1

            apply_rows(self.mapper, events, readers, apply)
            for batch in batches.values():
                batch.flush()
            reached = reached_position(events, self.batch_size, head)
            cur.execute(
                SET_TRACKINGS_AND_NOTIFY,
                {
                    "names": [r.projection.name for r in wanting],
                    "positions": [max(position[r.projection.name], reached) for r in wanting],
                    "versions": [r.projection.version for r in wanting],
                    "channel": PROGRESS_CHANNEL,
                },
                prepare=True,
            )
            return len(events)

    def _apply_one_by_one(self, conn: psycopg.Connection) -> int:
        applied, failed = 0, False
        for runner in self.runners:
            try:
                count, _ = runner.batcher.apply_batch(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except runner.projection.transient_errors:  # (an embeddings endpoint away): retried slowly
                log.exception("projection failed; retrying", extra={"projection": runner.projection.name})
                failed = True
                continue
            except Exception:  # some event of the batch this projection cannot apply
                log.exception("projection failed; finding the event", extra={"projection": runner.projection.name})
                runner.prepare()  # its read model may be gone (dropped by hand): build it again
                count = apply_isolating(conn, runner.batcher)
            runner.applied += count
            applied = max(applied, count)
        if failed:
            self.stop.wait(5.0)
        return applied


class Janitor:
    """Vacuums read models: at once after an erasure deleted rows from them, and, where
    autovacuum is off, those that changed a lot.

    An erased user's rows are deleted by the erasure, but their old versions stay in the
    table's pages as dead rows until a vacuum; autovacuum would come only once a fifth of
    the table changed. So every read model an erasure touched is vacuumed right after.
    Without autovacuum, every message also updates its conversation's row: those tables
    bloat and, without statistics, the planner guesses; every `every_events` applied
    events a read model is vacuumed and analysed (0: never).
    """

    def __init__(self, target: PostgresTarget, runners: list[Runner], stop: threading.Event, every_events: int):
        self.target = target
        self.runners = runners
        self.stop = stop
        self.every_events = every_events
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._scrub: set[str] = set()  # schemas an erasure touched, not vacuumed since
        self.thread = threading.Thread(target=self._run, name="projection-janitor", daemon=True)

    def scrub(self, schemas: list[str]) -> None:
        """Vacuum these read models soon (an erasure deleted rows from them)."""
        with self._lock:
            self._scrub.update(schemas)
        self._wanted.set()

    def wake(self) -> None:
        self._wanted.set()

    def _run(self) -> None:
        vacuumed_at = {runner.projection.name: 0 for runner in self.runners}
        while not self.stop.is_set():
            self._wanted.wait(30.0)
            self._wanted.clear()
            if self.stop.is_set():
                return
            with self._lock:
                scrub, self._scrub = self._scrub, set()
            if not scrub and not self.every_events:
                continue
            try:
                with self.target.connect(autocommit=True) as conn:
                    for schema in sorted(scrub):
                        vacuum(conn, schema)
                    if not self.every_events:
                        continue
                    if conn.execute("SHOW autovacuum").fetchone()[0] == "on":  # type: ignore[index]
                        self.every_events = 0  # Postgres does it: scrubbing after erasures is left
                        continue
                    for runner in self.runners:
                        name = runner.projection.name
                        if runner.applied - vacuumed_at[name] >= self.every_events:
                            vacuum_analyze(conn, runner.projection.schema)
                            vacuumed_at[name] = runner.applied
            except psycopg.Error as error:
                log.warning("read-model vacuum failed", extra={"error_type": type(error).__name__})
                with self._lock:
                    self._scrub |= scrub  # tried again on the next turn


class ProjectionEngine:
    """Follows the log for every live projection with `threads` Tail threads (projections
    shared out by their `weight`, so the heavy ones run side by side) and one more for each
    isolated one, the shared NOTIFY listener and the janitor."""

    def __init__(
        self,
        target: PostgresTarget,
        projections: list[Projection],
        batch_size: int,
        vacuum_every: int = 100_000,
        threads: int = 1,
        keys: KeyRing | None = None,
    ):
        """`keys`: the service's own ring when the engine runs in its process (an erasure then
        evicts the one cache); without it, the engine opens one of its own."""
        self.stop_event = threading.Event()
        self.owned_keys = keys is None
        self.keys = keys if keys is not None else KeyRing(target)
        self.wakeup = Wakeup(target, self.stop_event)
        self.runners = [Runner(target, p, batch_size, self.keys) for p in projections]
        self.janitor = Janitor(target, self.runners, self.stop_event, vacuum_every)
        shared = [r for r in self.runners if not r.projection.isolated]
        groups = share_out(shared, threads) + [[r] for r in self.runners if r.projection.isolated]
        self.tails = [
            Tail(target, group, self.wakeup.subscribe(), self.stop_event, batch_size, self.keys, self.janitor.scrub)
            for group in groups
        ]

    def wait_prepared(self, timeout: float) -> bool:
        """Block until every read model exists (a first start builds them); False on timeout."""
        return all(tail.prepared.wait(timeout) for tail in self.tails)

    def start(self) -> None:
        self.wakeup.thread.start()
        for tail in self.tails:
            tail.thread.start()
        self.janitor.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for tail in self.tails:
            tail.wake.set()
        for tail in self.tails:
            tail.thread.join(timeout=10)
        self.wakeup.thread.join(timeout=5)
        self.janitor.wake()
        self.janitor.thread.join(timeout=60)
        if self.owned_keys:
            self.keys.close()


def share_out(runners: list[Runner], threads: int) -> list[list[Runner]]:
    """Heaviest first, each to the lightest group so far (groups keep declaration order)."""
    groups: list[list[Runner]] = [[] for _ in range(max(1, min(threads, len(runners))))]
    loads = [0] * len(groups)
    for runner in sorted(runners, key=lambda r: -r.projection.weight):
        lightest = loads.index(min(loads))
        groups[lightest].append(runner)
        loads[lightest] += runner.projection.weight
    order = {id(r): i for i, r in enumerate(runners)}
    return [sorted(group, key=lambda r: order[id(r)]) for group in groups if group]
