"""Reading one value back in tests: the first column of a query's one row."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor


def scalar(cursor: Cursor[Any]) -> Any:
    """The first column of the cursor's next row; AssertionError when it has none (the tests ask
    for counts, maxima and single rows that must be there)."""
    row = cursor.fetchone()
    assert row is not None, "the query returned no row"
    return row[0]
