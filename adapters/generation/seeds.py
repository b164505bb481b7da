"""The seed the offline generator and agent draw from: the same request, the same output."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def seed_of(value: Any) -> int:
    """64 bits of the SHA-256 of `value` as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return int.from_bytes(hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).digest()[:8], "big")
