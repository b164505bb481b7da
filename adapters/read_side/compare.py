"""Compares two schemas' tables row by row, in SQL: one `EXCEPT ALL` each way per table.

Rows are compared as multisets (a duplicated row counts), over every column; the first
few differing rows of each side are kept to be shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain, zip_longest
from typing import Any

import psycopg
from psycopg.sql import SQL, Composable, Identifier

SAMPLE_ROWS = 10  # differing rows kept per table and side

# Each table's columns in order, and whether the type has a default btree operator class
# (compares and sorts natively); any other type (json, geometric) is compared as text.
COLUMNS = SQL(
    "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), EXISTS ("
    "  SELECT 1 FROM pg_opclass o JOIN pg_am m ON m.oid = o.opcmethod WHERE m.amname = 'btree' AND o.opcdefault"
    "  AND o.opcintype = CASE WHEN t.typcategory = 'A' THEN t.typelem ELSE t.oid END)"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
    " JOIN pg_type t ON t.oid = a.atttypid"
    " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname, a.attnum"
)
# Rows of `left` missing from `right` (as often as they are missing), the first few in order.
DIFFERENCE = (
    "SELECT count(*) OVER (), d.* FROM (SELECT {columns} FROM {left} EXCEPT ALL SELECT {columns} FROM {right}) d"
    " ORDER BY {order} LIMIT %s"
)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    native: bool  # compared as itself, else as text


@dataclass
class TableComparison:
    table: str
    live_rows: int = 0
    rebuilt_rows: int = 0
    only_live: int = 0
    only_rebuilt: int = 0
    samples: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # ("live" | "rebuilt", row)
    problem: str | None = None  # the table's shape differs, or it exists on one side only

    @property
    def matches(self) -> bool:
        return self.problem is None and self.only_live == self.only_rebuilt == 0


def columns(conn: psycopg.Connection, schema: str) -> dict[str, list[Column]]:
    tables: dict[str, list[Column]] = {}
    for table, name, type_, native in conn.execute(COLUMNS, (schema,)):
        tables.setdefault(table, []).append(Column(name, type_, native))
    return tables


def compare(conn: psycopg.Connection, live_schema: str, rebuilt_schema: str) -> list[TableComparison]:
    """Every table of either schema, row by row (each a multiset of rows)."""
    live, rebuilt = columns(conn, live_schema), columns(conn, rebuilt_schema)
    results = []
    for table in sorted(live.keys() | rebuilt.keys()):
        if table not in live:
            results.append(TableComparison(table, problem="missing from the live read model"))
        elif table not in rebuilt:
            results.append(TableComparison(table, problem="in the live read model, but not declared by the projection"))
        elif live[table] != rebuilt[table]:
            results.append(
                TableComparison(
                    table, problem=f"columns differ: live {_shape(live[table])}, rebuilt {_shape(rebuilt[table])}"
                )
            )
        else:
            live_table = SQL("{}.{}").format(Identifier(live_schema), Identifier(table))
            rebuilt_table = SQL("{}.{}").format(Identifier(rebuilt_schema), Identifier(table))
            results.append(_compare_table(conn, table, live[table], live_table, rebuilt_table))
    return results


def _compare_table(
    conn: psycopg.Connection, table: str, cols: list[Column], live: Composable, rebuilt: Composable
) -> TableComparison:
    counts = conn.execute(SQL("SELECT (SELECT count(*) FROM {}), (SELECT count(*) FROM {})").format(live, rebuilt))
    live_rows, rebuilt_rows = counts.fetchone()  # type: ignore[misc]
    selected = SQL(", ").join(
        Identifier(c.name) if c.native else SQL("{}::text").format(Identifier(c.name)) for c in cols
    )
    order = SQL(", ").join(SQL(str(position)) for position in range(2, len(cols) + 2))
    result = TableComparison(table, live_rows, rebuilt_rows)
    found = []
    for side, left, right in (("live", live, rebuilt), ("rebuilt", rebuilt, live)):
        query = SQL(DIFFERENCE).format(columns=selected, left=left, right=right, order=order)
        rows = conn.execute(query, (SAMPLE_ROWS,)).fetchall()
        setattr(result, f"only_{side}", rows[0][0] if rows else 0)
        found.append([(side, dict(zip((c.name for c in cols), row[1:], strict=True))) for row in rows])
    # Alternating sides, so a changed row's two versions (same key, same order) sit together.
    result.samples = [sample for sample in chain.from_iterable(zip_longest(*found)) if sample is not None]
    return result


def _shape(cols: list[Column]) -> str:
    return "(" + ", ".join(f"{c.name} {c.type}" for c in cols) + ")"
