"""A started process's objects are set aside from the cyclic collector (entrypoints/heap.py)."""

from __future__ import annotations

import subprocess
import sys

# In a process of its own: a frozen heap would stay frozen for the rest of the test run.
SETTLED = """
import gc
import entrypoints.bootstrap  # (what a started service has imported)
from entrypoints import heap
walked_before = len(gc.get_objects())
heap.settle()
print(walked_before, len(gc.get_objects()), gc.get_freeze_count())
"""


def test_after_settling_a_collection_walks_only_what_came_after() -> None:
    done = subprocess.run([sys.executable, "-c", SETTLED], capture_output=True, text=True, check=True)
    walked_before, walked_after, frozen = map(int, done.stdout.split())
    assert walked_before > 10_000  # (the start's modules, classes and functions)
    assert walked_after < walked_before / 100
    assert frozen >= walked_before * 0.9
