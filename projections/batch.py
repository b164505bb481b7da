"""What projection handlers write through: statements in event order, bulk rows held back.

A handler either runs a statement now (`execute`) or hands over a row (`append`) or a
per-key value (`accumulate`) for a sink that writes the whole batch's worth in one
statement. Running a statement first writes everything held back, so the outcome is
exactly that of running each event's statements one by one, in far fewer round trips.
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
    def __init__(self, cursor: Cursor):
        self.cursor = cursor
        self._rows: dict[Rows, list[Any]] = {}
        self._totals: dict[Totals, dict[Hashable, Any]] = {}
        self._order: list[Rows | Totals] = []

    def execute(self, statement: Any, params: Any = None) -> None:
        self.flush()
        self.cursor.execute(statement, params, prepare=True)

    def append(self, sink: Rows, row: Any) -> None:
        if sink not in self._rows:
            self._rows[sink] = []
            self._order.append(sink)
        self._rows[sink].append(row)

    def accumulate(self, sink: Totals, key: Hashable, value: Any) -> None:
        if sink not in self._totals:
            self._totals[sink] = {}
            self._order.append(sink)
        values = self._totals[sink]
        values[key] = sink.combine(values[key], value) if key in values else value

    def flush(self) -> None:
        for sink in self._order:
            if isinstance(sink, Rows):
                sink.write(self.cursor, self._rows.pop(sink))
            else:
                sink.write(self.cursor, list(self._totals.pop(sink).items()))
        self._order.clear()


def columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows to per-column lists, for `unnest(%s::type[], ...)` parameters."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
