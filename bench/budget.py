"""Where a process's CPU goes, by component: py-spy's sampled stacks sorted into named parts.

py-spy samples every thread of a running process without stopping it (cProfile sees only the
thread that started it; the service commits on a thread of its own). A stack is charged to
the first component, in COMPONENTS order, that any of its frames belongs to: the cipher inside
the commit counts as sealing, deciding inside the commit (and the reads it makes) as deciding.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

# (component, substrings of a py-spy frame "function (file:line)" that mark it)
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("sealing and mapping events (cipher, mapper, keys)", ("cryptography", "store/mapper.py", "store/keys.py",
                                                          "read_side/sealing.py", "store/kek.py")),
    ("deciding (loading the aggregate, domain method)", ("_decide (", "domain/", "_prefetch (")),
    ("commit (psycopg, SQL)", ("psycopg", "store/event_store.py", "store/postgres.py", "_commit (",
                               "unit_of_work.py")),
    ("limits (fair share)", ("fair_share.py", "usage_sync.py")),
    ("auth (token)", ("adapters/auth.py", "jwt/")),
    ("decode and validation (pydantic)", ("parse (", "pydantic")),
    ("event feed relay", ("event_feed.py", "read_side/relay.py", "jetstream")),
    ("reply (envelope, JSON)", ("envelope_ok (", "envelope_error (", "check_reply (", "orjson")),
    ("logs and metrics", ("logging/", "adapters/metrics.py", "prometheus", "entrypoints/logs.py")),
    ("NATS client (nats-py)", ("nats/",)),
    ("event loop (asyncio)", ("asyncio/",)),
]
OTHER = "other"


def component_of(stack: str) -> str:
    for name, marks in COMPONENTS:
        if any(mark in stack for mark in marks):
            return name
    return OTHER


def shares(raw_profile: str) -> dict[str, float]:
    """Each component's share of the samples of a py-spy `--format raw` profile (folded
    stacks: `frame;frame;... count` per line)."""
    counts: Counter[str] = Counter()
    for line in raw_profile.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[component_of(stack)] += int(count)
    total = sum(counts.values())
    return {name: counts[name] / total for name, _ in [*COMPONENTS, (OTHER, ())] if counts[name]} if total else {}


@contextlib.contextmanager
def sampled(pid: int, output: Path, seconds: float, rate: int = 200) -> Iterator[bool]:
    """py-spy recording `pid` for `seconds` from the block's start; yields whether py-spy is
    here at all (it is in the test extras; it needs ptrace, which root or the process's owner has)."""
    beside = Path(sys.executable).parent / "py-spy"
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        yield False
        return
    process = subprocess.Popen(
        # --gil: only the thread holding the GIL, i.e. running Python (a thread waiting on
        # Postgres, NATS or the GIL itself is not using the CPU, and py-spy counts it active)
        [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--nonblocking", "--gil",
         "--duration", str(max(1, round(seconds))), "--output", str(output)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield True
    finally:
        try:
            process.wait(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
