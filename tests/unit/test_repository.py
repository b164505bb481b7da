"""What the repository itself must hold to: no large files in its history's newest tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_TRACKED_BYTES = 1024 * 1024


def test_no_tracked_file_is_over_one_megabyte() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    large = {str(p.relative_to(ROOT)): p.stat().st_size for p in paths if p.is_file() and p.stat().st_size > MAX_TRACKED_BYTES}
    assert large == {}
