"""A read model's copier: each batch's rows COPYed in binary as the table types its columns,
in text when a column's type has no binary dumper, and either way the rows land as given."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from adapters.read_side.batch import Rows
from adapters.read_side.view import PostgresView, binary_types
from adapters.store.postgres import PostgresTarget

COLUMNS = "id, seq, sealed, stats, terms, at, label, score, done"


class SamplesView(PostgresView):
    tables = """
    CREATE DOMAIN {schema}.label AS text CHECK (VALUE <> '');
    CREATE TABLE {schema}.samples (
        id uuid PRIMARY KEY, seq bigint NOT NULL, sealed bytea, stats jsonb, terms text[], at timestamptz NOT NULL,
        label {schema}.label, score double precision, done boolean
    );
    CREATE TABLE {schema}.documents (id uuid PRIMARY KEY, words tsvector NOT NULL)
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.samples = Rows(self.copier("{schema}.samples", COLUMNS))
        self.documents = Rows(self.copier("{schema}.documents", "id, words"))
        self.sinks = [self.samples, self.documents]

    def erase_owner(self, owner: str) -> None:
        pass


class Recording(psycopg.Cursor[Any]):
    """A cursor that keeps the COPY statements it was given."""

    copies: list[str] = []

    def copy(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        Recording.copies.append(statement.as_string(self) if hasattr(statement, "as_string") else statement)
        return super().copy(statement, *args, **kwargs)


@pytest.fixture
def view(target: PostgresTarget) -> SamplesView:
    made = SamplesView(f"copier_{uuid.uuid4().hex[:8]}")
    with target.connect(autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {made.schema}")
        for statement in made.create_statements():
            conn.execute(statement)
    return made


def test_rows_are_copied_in_binary_as_the_table_types_them(target: PostgresTarget, view: SamplesView) -> None:
    at = datetime(2026, 12, 7, 16, 30, tzinfo=UTC)
    rows = [
        (uuid.uuid4(), 2**40, b"\x00\xffsealed", Jsonb({"tokens": 3}), ["a", "b c"], at, "draft", 0.25, True),
        (uuid.uuid4(), 1, None, None, [], at, None, 2, False),  # an int where the column is a float
    ]
    Recording.copies = []
    with target.connect(cursor_factory=Recording) as conn, conn.cursor() as cur:
        assert binary_types(cur, view.sql("{schema}.samples"), [c.strip() for c in COLUMNS.split(",")]), (
            "every column here has a binary dumper (the domain's is its base type's)"
        )
        view.begin(cur)
        for row in rows:
            view.batch.append(view.samples, row)
        view.batch.flush()
        stored = cur.execute(view.sql(f"SELECT {COLUMNS} FROM {{schema}}.samples ORDER BY seq DESC")).fetchall()
    assert len(Recording.copies) == 1 and Recording.copies[0].endswith("FROM STDIN (FORMAT BINARY)")
    assert stored == [
        (rows[0][0], 2**40, b"\x00\xffsealed", {"tokens": 3}, ["a", "b c"], at, "draft", 0.25, True),
        (rows[1][0], 1, None, None, [], at, None, 2.0, False),
    ]


def test_a_column_without_a_binary_dumper_is_copied_in_text(target: PostgresTarget, view: SamplesView) -> None:
    document = uuid.uuid4()
    Recording.copies = []
    with target.connect(cursor_factory=Recording) as conn, conn.cursor() as cur:
        assert binary_types(cur, view.sql("{schema}.documents"), ["id", "words"]) == []
        view.begin(cur)
        view.batch.append(view.documents, (document, "'word':2 'sealed':1"))
        view.batch.flush()
        stored = cur.execute(view.sql("SELECT id, words::text FROM {schema}.documents")).fetchall()
    assert len(Recording.copies) == 1 and Recording.copies[0].endswith("FROM STDIN")
    assert stored == [(document, "'sealed':1 'word':2")]  # (parsed by Postgres: lexemes in order)


def test_a_column_the_table_lacks_is_named(target: PostgresTarget, view: SamplesView) -> None:
    with target.connect() as conn, conn.cursor() as cur, pytest.raises(psycopg.ProgrammingError, match="lacks the column missing"):
        binary_types(cur, view.sql("{schema}.samples"), ["id", "missing"])
