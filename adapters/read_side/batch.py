"""What a Postgres view's writes go through: statements in event order, bulk rows held back.

A write either runs a statement now (`execute`) or hands over a row (`append`) or a
per-key value (`accumulate`) for a sink that writes the whole batch's worth in one
statement. Running a statement first writes everything held back, and sinks are written
in the order the view declares them (rows a later sink's statement relies on come
first), so the outcome is exactly that of running each event's statements one by one,
in far fewer round trips.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from psycopg import Cursor

Write = Callable[[Cursor, list[Any]], None]


@dataclass(frozen=True, eq=False)
class Rows:
    """Rows appended during a batch; `write(cursor, rows)` stores them all at once."""

    write: Write


@dataclass(frozen=True, eq=False)
class Totals:
    """Values per key combined during a batch (`combine(earlier, later)`);
    `write(cursor, [(key, value), ...])` applies them all at once."""

    combine: Callable[[Any, Any], Any]
    write: Write


class Batch:
    def __init__(self, cursor: Cursor, sinks: list[Rows | Totals]):
        self.cursor = cursor
        self.sinks = sinks  # in the order they must be written
        self._rows: dict[Rows, list[Any]] = {}
        self._totals: dict[Totals, dict[Hashable, Any]] = {}

    def execute(self, statement: Any, params: Any = None) -> None:
        self.flush()
        self.cursor.execute(statement, params, prepare=True)

    def append(self, sink: Rows, row: Any) -> None:
        self._rows.setdefault(sink, []).append(row)

    def accumulate(self, sink: Totals, key: Hashable, value: Any) -> None:
        values = self._totals.setdefault(sink, {})
        values[key] = sink.combine(values[key], value) if key in values else value

    def flush(self) -> None:
        for sink in self.sinks:
            if isinstance(sink, Rows) and sink in self._rows:
                sink.write(self.cursor, self._rows.pop(sink))
            elif isinstance(sink, Totals) and sink in self._totals:
                sink.write(self.cursor, list(self._totals.pop(sink).items()))
        assert not self._rows and not self._totals, "a sink the view did not declare"


def columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows to per-column lists, for `unnest(%b::type[], ...)` parameters (binary: no escaping)."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
