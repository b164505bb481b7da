"""The projection process dies with the service: killed with -9, a parent leaves no child."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.waiting import wait_until

PARENT = """
import multiprocessing, os, time
from entrypoints.projection_process import die_with_parent

def child(parent_pid):
    die_with_parent(parent_pid)
    print(os.getpid(), flush=True)  # started, and set to die with its parent
    time.sleep(600)  # nothing of its own ends it: only its parent's death can

if __name__ == "__main__":
    multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(),)).start()
    time.sleep(600)
"""


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_child_started_like_the_projection_process_dies_the_moment_its_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert running(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        wait_until(lambda: not running(child), "the child to die with its parent", timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
