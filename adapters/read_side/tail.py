"""Tail: keeps a group of live read models up to date in one thread, one transaction per batch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from adapters.read_side.batcher import Batcher
from adapters.read_side.parking import apply_isolating
from adapters.read_side.rebuild import Helper, rebuild, rebuild_all
from adapters.read_side.together import apply_together
from adapters.read_side.tracking import tracked_version
from adapters.read_side.view import ReadModel, no_statistics_on_content, postgres_view
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import RECONNECT_WAIT_MAX

log = logging.getLogger(__name__)


class Runner:
    """One live projection as the engine keeps it: its batcher and what it has applied."""

    def __init__(self, target: PostgresTarget, read_model: ReadModel, batch_size: int, keys: KeyRing):
        self.target = target
        self.read_model = read_model
        self.projection = read_model.build()
        self.view = postgres_view(self.projection)
        self.batcher = Batcher(self.projection, self.projection.name, batch_size, keys)
        self.topics = frozenset(self.batcher.topics)
        self.applied = 0  # events applied, read by the janitor

    def current(self) -> bool:
        """Whether the read model is there, built by this code's version."""
        with self.target.connect(autocommit=True) as conn:
            current = tracked_version(conn, self.projection.name) == self.projection.version
            if current:  # (built by an earlier version, which gathered statistics on content)
                no_statistics_on_content(conn, self.view.schema)
        return current

    def prepare(self) -> None:
        """Build the read model when it is missing or the code's version changed."""
        if not self.current():
            log.info("building read model", extra={"projection": self.projection.name})
            rebuild(self.target, self.read_model, batch_size=self.batcher.batch_size, only_if_outdated=True)


class Tail:
    """Keeps every live read model up to date in one thread, one transaction per batch.

    Each event is read and decoded once and applied to every projection that wants it and
    has not seen it; all their rows and positions commit together. A projection that fails
    on a batch makes that batch be applied projection by projection instead, so the
    others keep going while it is retried.
    """

    def __init__(self, target: PostgresTarget, runners: list[Runner], wake: threading.Event, stop: threading.Event,
                 batch_size: int, keys: KeyRing, scrub: Callable[[list[str]], None] = lambda schemas: None,
                 poll_interval: float = 2.0, helper: Helper | None = None):
        """`scrub(schemas)`: told of the read models an erasure deleted rows from, once committed."""
        self.target = target
        self.runners = runners
        self.scrub = scrub
        self.wake = wake
        self.stop = stop
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.keys = keys
        self.helper = helper
        self.names = [r.projection.name for r in runners]
        self.topics = sorted(set().union(*(r.topics for r in runners)))
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
            self.scrub([postgres_view(p).schema for p in erased])

    def _prepare_all(self) -> None:
        """Build missing or outdated read models in one pass over the log before following
        it; a failure is raised here (a lost connection is then retried)."""
        outdated = [r for r in self.runners if not r.current()]
        if outdated:
            log.info("building read models", extra={"projections": [r.projection.name for r in outdated]})
            rebuild_all(self.target, [r.read_model for r in outdated], batch_size=self.batch_size,
                        only_if_outdated=True, keys=self.keys, helper=self.helper)

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
        count, applied = apply_together(conn, [r.batcher for r in self.runners], self.batch_size)
        for runner in self.runners:
            runner.applied += applied[runner.batcher.tracking_name]
        return count

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
