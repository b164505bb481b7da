"""Projection lag: how long after a command's reply each read model applied that command's position.

The projection engine NOTIFYs `chronicle_projections` with "name:position,..." when it
commits a batch. A listener thread in the bench process timestamps every notification with the same
clock the load uses for replies; a write's lag in a read model is then the time from its reply
to the first notification at or past its position (zero if the read model got there first).
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field

from psycopg.sql import SQL, Identifier

from adapters.read_side.positions import read_positions
from adapters.read_side.tracking import PROGRESS_CHANNEL
from adapters.store.postgres import PostgresTarget


@dataclass
class Progress:
    """One read model's committed positions, in the order (and at the times) they arrived."""

    positions: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def record(self, position: int, at: float) -> None:
        if not self.positions or position > self.positions[-1]:
            self.positions.append(position)
            self.times.append(at)

    def reached_at(self, position: int) -> float | None:
        index = bisect.bisect_left(self.positions, position)
        return self.times[index] if index < len(self.times) else None


class ProgressListener:
    """LISTENs on the projections' progress channel in a thread, from start() to stop()."""

    def __init__(self, target: PostgresTarget, names: list[str]):
        self.target = target
        self.progress = {name: Progress() for name in names}
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-lag-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._listening.wait(10):
            raise RuntimeError(f"could not LISTEN on {PROGRESS_CHANNEL}: {self._error!r}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            with self.target.connect(autocommit=True) as conn:
                conn.execute(SQL("LISTEN {}").format(Identifier(PROGRESS_CHANNEL)))
                self._listening.set()
                while not self._stop.is_set():
                    for notify in conn.notifies(timeout=0.2):
                        at = time.perf_counter()
                        for name, position in read_positions(notify.payload):
                            if name in self.progress:
                                self.progress[name].record(position, at)
        except BaseException as error:  # surfaced by start() or by an incomplete lag result
            self._error = error

    def lags_ms(self, writes: list[tuple[int, float]]) -> tuple[dict[str, list[float]], int]:
        """Per read model, and as 'all' (the slowest of them), each write's lag in milliseconds.

        `writes` holds (position, reply time). Returns the lags and how many writes some read
        model never applied while listening.
        """
        lags: dict[str, list[float]] = {name: [] for name in [*self.progress, "all"]}
        unapplied = 0
        for position, replied_at in writes:
            reached = [p.reached_at(position) for p in self.progress.values()]
            if any(at is None for at in reached):
                unapplied += 1
                continue
            per_model = [max(0.0, at - replied_at) * 1000 for at in reached]  # type: ignore[operator]
            for name, lag in zip(self.progress, per_model, strict=True):
                lags[name].append(lag)
            lags["all"].append(max(per_model))
        return lags, unapplied
