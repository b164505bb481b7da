"""Taking snapshots after commits, off the command path.

The writer thread calls `after_commit` once its callers have their replies: for each saved
aggregate whose version crossed a multiple of `every`, the state is captured right there
(the writer owns the aggregate; capturing is a pydantic dump) and queued. A background
thread seals and writes what is queued, a batch at a time, and keeps the latest `keep` per
aggregate. Snapshots are derived data: a failure, or a full queue, loses one snapshot (a
warning, never content, is logged) and no command notices.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable

from domain.base import Aggregate
from domain.snapshot import state_model
from services.ports.snapshots import Captured, SnapshotWriter
from services.runtime.queues import drain

log = logging.getLogger(__name__)
QUEUE_SIZE = 10_000
WRITE_BATCH = 256


def crossed(before: int, after: int, every: int) -> bool:
    """Whether going from version `before` to `after` passed a multiple of `every`."""
    return every > 0 and after // every > before // every


class SnapshotTaker:
    def __init__(self, store: SnapshotWriter, every: int, keep: int = 0) -> None:
        self.store = store
        self.every = every
        self.keep = keep
        self.taken = 0
        self.dropped = 0
        self._queue: queue.Queue[Captured | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="chronicle-snapshots", daemon=True)

    def start(self) -> None:
        if self.every > 0:
            self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then stop."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def after_commit(self, saved: Iterable[tuple[Aggregate, int]]) -> None:
        """`saved`: each aggregate just committed, with its version before the commit."""
        for aggregate, before in saved:
            if not crossed(before, aggregate.version, self.every) or state_model(type(aggregate)) is None:
                continue
            try:
                captured = self.store.capture(aggregate)
            except Exception as error:  # the State model does not fit: a bug, but not the caller's
                self._lost("snapshot not captured", aggregate.id, aggregate.version, error)
                continue
            try:
                self._queue.put_nowait(captured)
            except queue.Full:
                self._lost("snapshot queue full", aggregate.id, aggregate.version, None)

    def _run(self) -> None:
        drain(self._queue, WRITE_BATCH, self._write)

    def _write(self, batch: list[Captured]) -> None:
        sealed = []
        for captured in batch:
            try:
                sealed.append(self.store.seal(captured))
            except Exception as error:  # the owner was erased meanwhile, say
                self._lost("snapshot not sealed", captured.originator_id, captured.originator_version, error)
        try:
            self.store.save(sealed, self.keep)
            self.taken += len(sealed)
        except Exception as error:
            self.dropped += len(sealed)
            log.warning("snapshots not written", extra={"snapshots": len(sealed), "error": type(error).__name__})

    def _lost(self, message: str, aggregate_id: object, version: int, error: BaseException | None) -> None:
        self.dropped += 1
        # The error's type only: a validation or driver message may quote the content.
        log.warning(
            message,
            extra={"aggregate_id": str(aggregate_id), "version": version, "error": type(error).__name__ if error else None},
        )
