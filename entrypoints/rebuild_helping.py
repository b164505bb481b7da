"""What a rebuild's helper process runs (`python -m entrypoints.rebuild_helping`): the job
its parent wrote to its standard input, read models loaded and finished as the parent's
process would, progress and the result as JSON lines on its standard output
(entrypoints/rebuild_helper.py is the parent's side)."""

from __future__ import annotations

import contextlib
import pickle
import sys
import threading
import time

import orjson

from adapters.read_side.rebuild import Progress, Rebuilding, load
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from entrypoints import logs
from entrypoints.projection_process import die_with_parent
from entrypoints.read_models import OPTIONAL, PROJECTIONS, postgres_read_models
from entrypoints.rebuild_helper import PROGRESS_EVERY, Job


def run(job: Job, progress: Progress) -> dict[str, int]:
    """Load and finish the job's read models, made as the parent makes them. The data keys
    open with the key-encryption keys the store records, as the parent's rebuild opens
    them (no Chronicle is started here: nothing is attached, migrated or chosen)."""
    target = PostgresTarget(job.database_url)
    classes = [c for c in PROJECTIONS + OPTIONAL if c.name in job.names]
    with contextlib.closing(KeyRing(target)) as keys, target.connect(autocommit=True) as conn:
        rebuilding = [Rebuilding(r, job.batch_size, keys) for r in postgres_read_models(job.settings, classes)]
        return load(target, conn, rebuilding, job.total, job.batch_size, progress)


def main() -> None:
    job: Job = pickle.load(sys.stdin.buffer)
    die_with_parent(job.parent_pid)
    logs.configure(job.settings.log_level)
    lock = threading.Lock()  # (finishing threads report too: one line at a time)

    def say(line: dict[str, object]) -> None:
        with lock:
            sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
            sys.stdout.buffer.flush()

    reported: dict[str, float] = {}

    def progress(name: str, done: int, total: int) -> None:
        if done >= total or time.monotonic() - reported.get(name, 0.0) >= PROGRESS_EVERY:
            reported[name] = time.monotonic()
            say({"progress": [name, done, total]})

    say({"applied": run(job, progress)})


if __name__ == "__main__":
    main()
