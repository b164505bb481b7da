"""The Postgres view: a read model's schema, its DDL, its erasure and the batch its writes go through.

Each read model's Postgres view (adapters/read_side/views/) subclasses this and the view
interface its projection declares (projections/<name>.py). The engine binds a batch to
the transaction's cursor (`begin`) before it applies events, and flushes it before it
moves the tracking position in the same transaction.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

import psycopg
from psycopg import Cursor
from psycopg.pq import Format
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier
from psycopg.types.json import Jsonb

from adapters.read_side.batch import Batch, Rows, Totals
from adapters.read_side.sealing import Seals
from projections.view import Projection, View
from services.ports.keys import KeyRing

log = logging.getLogger(__name__)


class PostgresView(View):
    """Subclasses set `tables` (DDL with a {schema} placeholder) and `erasure` (";"-separated
    statements, parameter %(owner)s, that drop one user's rows), list their sinks in write
    order, and write through `self.batch`."""

    tables: str
    erasure: ClassVar[str] = ""
    # Tables whose GIN index a rebuild makes with the table and merges while it loads (its
    # pending list, from a connection of its own: adapters/read_side/gin_merger.py), on a
    # core the rebuild's Python leaves idle, instead of building it after loading.
    merged_while_loading: ClassVar[tuple[str, ...]] = ()

    def __init__(self, schema: str, **options: Any):
        self.schema = schema
        self.options = options
        self.sinks: list[Rows | Totals] = []  # subclasses list theirs in write order
        self.batch: Batch  # set by `begin`, for a transaction's cursor
        self._seals: Seals | None = None  # set by `use_keys`

    def use_keys(self, keys: KeyRing) -> None:
        """The key ring the view seals its owners' content with (the one events are opened with)."""
        self._seals = Seals(keys)

    @property
    def seals(self) -> Seals:
        if self._seals is None:
            raise RuntimeError(f"{type(self).__name__} seals content: give it the key ring (use_keys) first")
        return self._seals

    def begin(self, cursor: Cursor[Any]) -> Batch:
        """A new batch on this cursor: the writes until the next `begin` go through it."""
        self.batch = Batch(cursor, self.sinks)
        return self.batch

    def erase_owner(self, owner: str) -> None:
        for statement in self.erasure.split(";"):
            if statement.strip():
                self.batch.execute(self.sql(statement), {"owner": owner})

    def sql(self, text: str, **names: str) -> Composed:
        """A statement with its schema (and any other named identifiers) filled in, cached."""
        return _compose(text, self.schema, tuple(sorted(names.items())))

    def copier(self, table: str, columns: str) -> Callable[[Cursor[Any], list[Any]], None]:
        """A Rows writer that COPYs a batch's rows into `table` ("{schema}.name"): in
        binary, each column dumped as the type the table gives it (read from the catalog at
        the first batch), which costs the projection and its Postgres backend a third of
        what text does (sealed bytes are not written and parsed as hex); in text when a
        column's type has no binary dumper here."""
        names = [name.strip() for name in columns.split(",")]
        statement = f"COPY {table} ({columns}) FROM STDIN"
        types: list[int] | None = None  # the columns' type oids once read; [] for text

        def copy_rows(cursor: Cursor[Any], rows: list[Any]) -> None:
            nonlocal types
            if types is None:
                types = binary_types(cursor, self.sql(table), names)
            with cursor.copy(self.sql(statement + (" (FORMAT BINARY)" if types else ""))) as copy:
                if types:
                    copy.set_types(types)
                for row in rows:
                    copy.write_row(row)

        return copy_rows

    def create_statements(self, deferred: bool | None = None) -> list[Composed]:
        """The DDL; `deferred=False` leaves out the bulk (GIN) indexes, `True` gives only
        those, so a rebuild can build them once after loading instead of row by row (all but
        those of `merged_while_loading`)."""
        statements = [s for s in without_comments(self.tables).split(";") if s.strip()]
        if deferred is not None:
            statements = [s for s in statements if self._bulk(s) == deferred]
        return [self.sql(statement) for statement in statements]

    def _bulk(self, statement: str) -> bool:
        return "USING gin" in statement and not any(
            f"{{schema}}.{table} USING gin" in statement for table in self.merged_while_loading
        )


def without_comments(ddl: str) -> str:
    """The DDL without its `--` comments, which may hold a ";" the statements are split at
    (the views' DDL quotes no "--")."""
    return re.sub(r"--[^\n]*", "", ddl)


COLUMN_TYPES = SQL(
    "SELECT a.attname, CASE WHEN t.typbasetype = 0 THEN t.oid ELSE t.typbasetype END"
    " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
    " WHERE a.attname = ANY(%s::text[]) AND a.attrelid = %s::regclass"
)


def binary_types(cursor: Cursor[Any], table: Composed, names: list[str]) -> list[int]:
    """The type oids of `table`'s columns `names` (a domain's: its base type's), or [] when
    one has no binary dumper on this connection (a pgvector column, say)."""
    name = table.as_string(cursor)
    with cursor.connection.cursor(row_factory=tuple_row) as catalog:
        found: dict[str, int] = dict(catalog.execute(COLUMN_TYPES, (names, name)).fetchall())
    if missing := [column for column in names if column not in found]:
        raise psycopg.ProgrammingError(f"{name} lacks the column {', '.join(missing)}")
    for oid in found.values():
        try:
            cursor.adapters.get_dumper_by_oid(oid, Format.BINARY)
        except psycopg.ProgrammingError:
            return []
    return [found[column] for column in names]


def with_json(row: tuple[Any, ...], positions: tuple[int, ...]) -> tuple[Any, ...]:
    """The row with its values at `positions` sent as jsonb (a None stays NULL)."""
    values = list(row)
    for i in positions:
        if values[i] is not None:
            values[i] = Jsonb(values[i])
    return tuple(values)


def json_positions(fields: tuple[str, ...], *names: str) -> tuple[int, ...]:
    return tuple(fields.index(name) for name in names)


@cache
def _compose(text: str, schema: str, names: tuple[tuple[str, str], ...]) -> Composed:
    identifiers = {key: Identifier(value) for key, value in names}
    return SQL(text).format(schema=Identifier(schema), **identifiers)


def postgres_view(projection: Projection[Any]) -> PostgresView:
    """The projection's view, which the engine writes through Postgres."""
    view = projection.view
    if not isinstance(view, PostgresView):
        raise TypeError(f"{projection.name}: the engine needs a Postgres view, not {type(view).__name__}")
    return view


@dataclass(frozen=True)
class ReadModel:
    """A read model as Postgres keeps it: its projection over its Postgres view, with the
    options both are made with (a search language, an embedder)."""

    projection: type[Projection[Any]]
    view: type[PostgresView]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.projection.name

    @property
    def live_schema(self) -> str:
        return f"rm_{self.projection.name}"

    def build(self, schema: str | None = None) -> Projection[Any]:
        """The projection writing into `schema` (else the live one)."""
        return self.projection(self.view(schema or self.live_schema, **self.options), **self.options)


def create_schema(conn: psycopg.Connection[Any], view: PostgresView, *, defer_bulk_indexes: bool = False) -> None:
    conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(view.schema)))
    conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(view.schema)))
    for statement in view.create_statements(deferred=False if defer_bulk_indexes else None):
        conn.execute(statement)
    no_statistics_on_content(conn, view.schema)


# Columns (and index expressions) whose values are a user's content: text, JSON, bytes,
# search vectors and arrays, except the owner and ids, which the planner needs and which
# are not content. Their statistics (most common values, histograms) would copy values
# into pg_statistic, where no erasure reaches them.
CONTENT_COLUMNS = """
SELECT c.oid, c.relkind, a.attnum, a.attname FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_index i ON i.indexrelid = c.oid
WHERE n.nspname = %s AND a.attnum > 0 AND NOT a.attisdropped
  AND (c.relkind IN ('r', 'p') OR (c.relkind = 'i' AND i.indkey[a.attnum - 1] = 0))
  AND (t.typname IN ('text', 'varchar', 'json', 'jsonb', 'bytea', 'tsvector') OR t.typcategory = 'A')
  AND a.attname <> 'owner' AND a.attname NOT LIKE '%%\\_id'
  AND coalesce(a.attstattarget, -1) <> 0
"""


def no_statistics_on_content(conn: psycopg.Connection[Any], schema: str) -> None:
    """ANALYZE gathers no statistics on a read model's content columns (target 0), and any
    gathered before (a store of an earlier version) are removed: that takes a superuser
    (the embedded default is one); otherwise they stay until the read model is rebuilt."""
    for relation, kind, number, name in conn.execute(CONTENT_COLUMNS, (schema,)).fetchall():
        alter = "ALTER INDEX {}.{} ALTER COLUMN {} SET STATISTICS 0" if kind == "i" else (
            "ALTER TABLE {}.{} ALTER COLUMN {} SET STATISTICS 0"
        )
        [[table]] = conn.execute("SELECT relname FROM pg_class WHERE oid = %s", (relation,)).fetchall()
        column = SQL(str(number)) if kind == "i" else Identifier(name)
        conn.execute(SQL(alter).format(Identifier(schema), Identifier(table), column))
        try:
            with conn.transaction():
                conn.execute("DELETE FROM pg_statistic WHERE starelid = %s AND staattnum = %s", (relation, number))
        except psycopg.errors.InsufficientPrivilege:
            log.warning("statistics gathered on content before remain until a rebuild (not a superuser)",
                        extra={"read_model": schema})


def vacuum_analyze(conn: psycopg.Connection[Any], schema: str) -> None:
    """Fresh statistics and a clean visibility map for every table of a read model."""
    vacuum(conn, schema, SQL("VACUUM (ANALYZE) {}.{}"))


def vacuum(conn: psycopg.Connection[Any], schema: str, statement: SQL = SQL("VACUUM {}.{}")) -> None:
    """Every table of a read model vacuumed: dead row versions gone, their space free."""
    tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    for (table,) in tables:
        conn.execute(statement.format(Identifier(schema), Identifier(table)))
