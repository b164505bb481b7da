"""Reading one value back in tests: the first column of a query's one row, and what a few
such reads mean."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import Cursor


def scalar(cursor: Cursor[Any]) -> Any:
    """The first column of the cursor's next row; AssertionError when it has none (the tests ask
    for counts, maxima and single rows that must be there)."""
    row = cursor.fetchone()
    assert row is not None, "the query returned no row"
    return row[0]


def erased_key_rotated(url: str, owner: str) -> bool:
    """Whether the key-encryption-key rotation after the owner's erasure has covered their
    key row (its generation cleared: nothing left that any key-encryption key unwraps)."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT kek_generation IS NULL FROM chronicle.data_keys WHERE owner = %s", (owner,)
        ).fetchone() == (True,)
