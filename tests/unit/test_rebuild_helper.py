"""The parent's side of a rebuild's helper process: its lines read to the end, its failure raised, it killed on stop."""

from __future__ import annotations

import subprocess
import sys

import pytest

from entrypoints.rebuild_helper import HelperFailed, HelperProcess


def test_progress_is_handed_on_and_the_result_kept_whatever_else_a_line_holds() -> None:
    seen: list[tuple[str, int, int]] = []
    process = subprocess.Popen(
        [sys.executable, "-c", "\n".join([
            "print('a stray line', flush=True)",
            "print('{\"progress\": [\"history\", 5, 10]}', flush=True)",
            "print('{\"progress\": [\"boom\", 1, 10]}', flush=True)",
            "print('{\"progress\": [\"history\", 10, 10]}', flush=True)",
            "print('{\"applied\": {\"history\": 7}}', flush=True)",
        ])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )

    def progress(name: str, done: int, total: int) -> None:
        if name == "boom":
            raise RuntimeError("the display failed")
        seen.append((name, done, total))

    helper = HelperProcess(process, progress)
    assert helper.result() == {"history": 7}
    assert seen == [("history", 5, 10), ("history", 10, 10)]
    helper.stop()


def test_a_helper_that_exits_without_its_result_fails() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", "print('{\"progress\": [\"history\", 1, 10]}'); raise SystemExit(3)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    helper = HelperProcess(process, lambda name, done, total: None)
    with pytest.raises(HelperFailed, match="exited with 3"):
        helper.result()
    helper.stop()


def test_stop_kills_a_helper_still_running() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    helper = HelperProcess(process, lambda name, done, total: None)
    helper.stop()
    assert process.returncode is not None and process.returncode < 0  # (killed by a signal)
