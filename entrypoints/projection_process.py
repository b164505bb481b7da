"""ProjectionProcess: the projection engine in a child process of the service.

Read-model work is pure Python; in the service's own process it holds the interpreter
lock while commands wait for it. A child process runs it beside the service instead (at
a lower CPU priority if `projection_nice` says so), and reaches the service only through Postgres
(the read models, and NOTIFY of their positions), as a separate `chronicle projections
run` would. The parent restarts a child that dies; a child whose parent died stops.

Nothing is shared between the two but a pipe and signals (a lock shared with a process
that gets killed would stay taken): the child says "prepared" on the pipe once every
read model exists, and stops on SIGTERM.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from adapters.store.postgres import PostgresTarget
from entrypoints.settings import Settings

log = logging.getLogger(__name__)

RESTART_PAUSE = 1.0  # seconds between a child's death and its replacement
STOP_TIMEOUT = 15.0
PREPARED = "prepared"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process the moment its parent dies (Linux's
    PR_SET_PDEATHSIG), so that a service killed with -9 leaves no projection process behind
    even for a moment. Safe: a read model's batch and its position commit together, so a
    killed batch is simply done again. Elsewhere the parent is watched (entrypoints/bootstrap.py run_engine's loop)."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before that was set
        os._exit(1)


# What a child runs: (settings, database URL, its end of the pipe, the parent's pid). The
# composition root gives it (entrypoints/bootstrap.py run_engine): it builds the child's engine.
Child = Callable[[Settings, str, Connection, int], None]


class ProjectionProcess:
    """The engine's start / stop / wait_prepared, run by a supervised child process (or,
    `name`d otherwise, another child's: the event feed's, entrypoints/feed_process.py)."""

    def __init__(self, settings: Settings, target: PostgresTarget, child: Child, name: str = "projections"):
        self.settings = settings
        self.child = child
        self.name = name
        self.target = target  # (its URL asked for as a child starts: the server is up by then)
        self.context = multiprocessing.get_context("spawn")  # never fork a process with threads
        self.process: multiprocessing.process.BaseProcess | None = None
        self.restarts = 0
        self._prepared = threading.Event()
        self._stopping = threading.Event()
        self._from_child: Connection | None = None
        self._supervisor = threading.Thread(target=self._supervise, name=f"chronicle-{name}-supervisor", daemon=True)

    def start(self) -> None:
        self._supervisor.start()

    def wait_prepared(self, timeout: float) -> bool:
        """Block until every read model exists (a first start builds them); False on timeout."""
        return self._prepared.wait(timeout)

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join()

    def _stop_child(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.terminate()  # SIGTERM: the child stops its engine and exits
            self.process.join(STOP_TIMEOUT)
            if self.process.is_alive():
                log.warning("child process did not stop; killing it", extra={"child": self.name})
                self.process.kill()
                self.process.join()

    def _spawn(self) -> None:
        self._from_child, child_end = self.context.Pipe(duplex=False)
        self.process = self.context.Process(
            target=self.child, args=(self.settings, self.target.url, child_end, os.getpid()), name=f"chronicle-{self.name}",
            daemon=True,
        )
        self.process.start()
        child_end.close()  # the child holds its own copy

    def _supervise(self) -> None:
        # Every child is started and stopped from this thread: the kernel's parent-death
        # signal (die_with_parent) follows the thread that started a child, so this one
        # outlives each of them.
        self._spawn()
        try:
            while not self._stopping.is_set():
                assert self.process is not None and self._from_child is not None
                ready = wait([self.process.sentinel, self._from_child], timeout=0.5)
                if self._from_child in ready:
                    try:
                        if self._from_child.recv() == PREPARED:
                            self._prepared.set()
                    except EOFError:  # the child closed its end: it is on its way out
                        self.process.join(STOP_TIMEOUT)
                if self.process.is_alive() or self._stopping.is_set():
                    continue
                log.error("child process exited; restarting it", extra={"child": self.name, "exit_code": self.process.exitcode})
                self.restarts += 1
                if self._stopping.wait(RESTART_PAUSE):
                    return
                self._from_child.close()
                self._spawn()
        finally:
            self._stop_child()
