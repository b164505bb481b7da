"""A rebuild's helper process, the parent's side: the helper loads and finishes read models
that a rebuild in this process began (adapters/read_side/rebuild.py `rebuild_all`), so that
the heaviest read model is built here while another core builds the others.

The parent starts `python -m entrypoints.rebuild_helping` (what the helper runs), writes
the job to its standard input (pickled: the settings carry secrets, and only the parent
writes there), and reads JSON lines from its standard output: progress as it goes, then the
events applied per read model. Its logs go to the parent's standard error. A subprocess
rather than a multiprocessing child: the projection process that rebuilds at a first start
is itself a daemonic multiprocessing child, which may have no children of its own. The
helper dies with its parent (PR_SET_PDEATHSIG), and the parent kills it when its own part
fails.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO

import orjson

from adapters.read_side.rebuild import Apart, Helper, Progress
from adapters.store.postgres import PostgresTarget
from entrypoints.settings import Settings

log = logging.getLogger(__name__)

PROGRESS_EVERY = 0.5  # seconds between the helper's progress lines (and one at each read model's end)


class HelperFailed(RuntimeError):
    """The helper process ended without finishing its read models."""


@dataclass(frozen=True)
class Job:
    settings: Settings
    database_url: str
    names: list[str]  # the read models to load and finish
    total: int  # the log's position they are loaded up to (then they catch up and swap in)
    batch_size: int
    parent_pid: int


class HelperProcess(Apart):
    """The parent's side: a thread reads the helper's lines, its progress handed on as it
    comes and its result kept for `result`."""

    def __init__(self, process: subprocess.Popen[bytes], progress: Progress):
        self.process = process
        self.progress = progress
        self.applied: dict[str, int] | None = None
        self.reader = threading.Thread(target=self._read, name="rebuild-helper-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        # Read to the end whatever a line holds: a helper blocked on a full pipe would never end.
        assert self.process.stdout is not None  # (a pipe: see `RebuildHelper.start`)
        for line in self.process.stdout:
            try:
                said = orjson.loads(line)
                if "progress" in said:
                    name, done, total = said["progress"]
                    self.progress(str(name), int(done), int(total))
                elif "applied" in said:
                    self.applied = {str(name): int(count) for name, count in said["applied"].items()}
            except Exception:  # (a stray line, or the progress display failing): the rebuild goes on
                log.warning("a line of the rebuild's helper process not taken", exc_info=True)

    def result(self) -> dict[str, int]:
        code = self.process.wait()
        self.reader.join()
        if code != 0 or self.applied is None:
            raise HelperFailed(f"the rebuild's helper process exited with {code} (its log is above)")
        return self.applied

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.reader.join()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class RebuildHelper(Helper):
    """Starts `python -m entrypoints.rebuild_helping` for a rebuild on the database `target`
    names (once started), with these settings."""

    def __init__(self, settings: Settings, target: PostgresTarget, from_events: int):
        self.settings = settings
        self.target = target
        self.from_events = from_events

    def start(self, names: list[str], total: int, batch_size: int, progress: Progress) -> Apart:
        process = subprocess.Popen(
            [sys.executable, "-m", "entrypoints.rebuild_helping"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        job = Job(self.settings, self.target.url, names, total, batch_size, os.getpid())
        stdin: IO[bytes] | None = process.stdin
        assert stdin is not None
        try:
            stdin.write(pickle.dumps(job))
            stdin.close()
        except BrokenPipeError:  # (it died at once: `result` says so)
            pass
        return HelperProcess(process, progress)


def rebuild_helper(settings: Settings, target: PostgresTarget) -> RebuildHelper | None:
    """The helper rebuilds have, as the settings say (none with `rebuild_helper_from` 0),
    on a machine with another core for it."""
    if not settings.rebuild_helper_from or (os.cpu_count() or 1) < 2:
        return None
    return RebuildHelper(settings, target, settings.rebuild_helper_from)
