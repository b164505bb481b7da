"""What a rebuild's helper process runs (`python -m entrypoints.rebuild_helping`): the job
its parent wrote to its standard input, read models loaded and finished as the parent's
process would, progress and the result as JSON lines on its standard output
(entrypoints/rebuild_helper.py is the parent's side)."""

from __future__ import annotations

import asyncio
import pickle
import sys
import threading
import time

import orjson

from adapters.read_side.rebuild import Progress, Rebuilding, load
from entrypoints import logs
from entrypoints.bootstrap import Stage, build
from entrypoints.projection_process import die_with_parent
from entrypoints.read_models import postgres_read_models
from entrypoints.rebuild_helper import PROGRESS_EVERY, Job


def run(job: Job, progress: Progress) -> dict[str, int]:
    """Load and finish the job's read models, in a Chronicle built as the parent's is."""
    settings = job.settings.model_copy(update={"database_url": job.database_url})
    chronicle = build(settings)
    asyncio.run(chronicle.start(through=Stage.DATABASE))
    try:
        classes = [c for c in chronicle.read_models.classes if c.name in job.names]
        rebuilding = [Rebuilding(r, job.batch_size, chronicle.keys) for r in postgres_read_models(settings, classes)]
        with chronicle.target.connect(autocommit=True) as conn:
            return load(chronicle.target, conn, rebuilding, job.total, job.batch_size, progress)
    finally:
        asyncio.run(chronicle.stop())


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
