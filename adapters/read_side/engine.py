"""The projection engine: Tail threads over the live read models, the NOTIFY listener that wakes them, the janitor
and the GIN merger.

Each Tail reads the notification log after its read models' positions, applies a batch
to each and commits the rows with the new positions (adapters/read_side/tracking.py).
"""

from __future__ import annotations

import logging
import threading

import psycopg
from psycopg.sql import SQL, Identifier

from adapters.read_side.gin_merger import GinMerger
from adapters.read_side.rebuild import Helper
from adapters.read_side.tail import Runner, Tail
from adapters.read_side.view import ReadModel, vacuum, vacuum_analyze
from adapters.store.event_store import EVENTS_CHANNEL
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import RECONNECT_WAIT_MAX

log = logging.getLogger(__name__)

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
                            vacuum_analyze(conn, runner.view.schema)
                            vacuumed_at[name] = runner.applied
            except psycopg.Error as error:
                log.warning("read-model vacuum failed", extra={"error_type": type(error).__name__})
                with self._lock:
                    self._scrub |= scrub  # tried again on the next turn


class ProjectionEngine:
    """Follows the log for every live projection with `threads` Tail threads (projections
    shared out by their `weight`, so the heavy ones run side by side) and one more for each
    isolated one, the shared NOTIFY listener, the janitor and the GIN merger."""

    def __init__(
        self,
        target: PostgresTarget,
        read_models: list[ReadModel],
        batch_size: int,
        vacuum_every: int = 100_000,
        threads: int = 1,
        keys: KeyRing | None = None,
        helper: Helper | None = None,
    ):
        """`keys`: the service's own ring when the engine runs in its process (an erasure then
        evicts the one cache); without it, the engine opens one of its own. `helper`: what
        builds every read model but the heaviest in a process of its own when a first start
        builds a long log's read models (adapters/read_side/rebuild.py)."""
        self.stop_event = threading.Event()
        self.owned_keys = keys is None
        self.keys = keys if keys is not None else KeyRing(target)
        self.wakeup = Wakeup(target, self.stop_event)
        self.runners = [Runner(target, r, batch_size, self.keys) for r in read_models]
        self.janitor = Janitor(target, self.runners, self.stop_event, vacuum_every)
        self.gin_merger = GinMerger(target, [r.view.schema for r in self.runners], self.stop_event)
        shared = [r for r in self.runners if not r.projection.isolated]
        groups = share_out(shared, threads) + [[r] for r in self.runners if r.projection.isolated]
        self.tails = [
            Tail(target, group, self.wakeup.subscribe(), self.stop_event, batch_size, self.keys, self.janitor.scrub,
                 helper=helper)
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
        self.gin_merger.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for tail in self.tails:
            tail.wake.set()
        for tail in self.tails:
            tail.thread.join(timeout=10)
        self.wakeup.thread.join(timeout=5)
        self.gin_merger.thread.join(timeout=5)
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
