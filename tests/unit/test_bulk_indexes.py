"""Which GIN indexes a rebuild builds after loading, and which it makes with the tables and merges while loading."""

from __future__ import annotations

import re

from adapters.read_side.views.history import PostgresHistoryView
from adapters.read_side.views.search import PostgresSearchView


def gin_tables(statements: list[str]) -> list[str]:
    """The tables the statements' GIN indexes are on."""
    return sorted(table for s in statements for table in re.findall(r'ON "[^"]+"\.(\w+) USING gin', s))


def test_the_search_messages_index_is_made_with_the_tables_and_the_others_after_loading() -> None:
    view = PostgresSearchView("rm_scratch")
    with_tables = [s.as_string(None) for s in view.create_statements(deferred=False)]
    after_loading = [s.as_string(None) for s in view.create_statements(deferred=True)]
    assert gin_tables(with_tables) == ["messages"]
    assert gin_tables(after_loading) == ["artifacts", "conversations"]
    everything = [s.as_string(None) for s in view.create_statements()]
    assert sorted(everything) == sorted(with_tables + after_loading)  # each statement once, none lost


def test_a_view_without_indexes_merged_while_loading_defers_every_gin_index() -> None:
    view = PostgresHistoryView("rm_scratch")
    assert gin_tables([s.as_string(None) for s in view.create_statements(deferred=False)]) == []
    assert gin_tables([s.as_string(None) for s in view.create_statements(deferred=True)]) == ["conversations"]


def test_a_semicolon_in_a_comment_of_the_ddl_splits_no_statement() -> None:
    class Commented(PostgresHistoryView):
        tables = """
        CREATE TABLE {schema}.a (id int); -- one; two
        -- a comment; with semicolons; between statements
        CREATE TABLE {schema}.b (id int)  -- trailing; comment
        """

    statements = [s.as_string(None) for s in Commented("rm_scratch").create_statements()]
    assert [s.split("(")[0].strip() for s in statements] == ['CREATE TABLE "rm_scratch".a', 'CREATE TABLE "rm_scratch".b']
