"""The search read model's Postgres view (projections/search.py): tsvectors, and the deletes it shares with the semantic one.

Every document's tsvector also holds one lexeme naming its owner ('OWNER ' || md5(owner)),
so a query ANDs it in and the GIN index yields only the caller's matches: no extension
needed, and a common word never makes Postgres look at every user's rows. The lexeme has
an upper-case word and a space, which to_tsvector never produces, so no text a user
writes can forge another user's lexeme (queries also filter on the owner column).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.view import PostgresView
from projections.search import DocumentsView, SearchView

OWNER_LEXEME_SQL = "array_to_tsvector(ARRAY['OWNER ' || md5({owner})])"


class PostgresDocumentsView(PostgresView, DocumentsView):
    """Tables `conversations`, `messages` and `artifacts`, each row with its owner."""

    erasure = """
    DELETE FROM {schema}.messages WHERE owner = %(owner)s;
    DELETE FROM {schema}.conversations WHERE owner = %(owner)s;
    DELETE FROM {schema}.artifacts WHERE owner = %(owner)s
    """

    def remove_artifact(self, artifact_id: UUID) -> None:
        self.batch.execute(self.sql("DELETE FROM {schema}.artifacts WHERE id = %s"), (artifact_id,))

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.batch.execute(self.sql("DELETE FROM {schema}.messages WHERE conversation_id = %s"), (conversation_id,))
        self.batch.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (conversation_id,))


class PostgresSearchView(PostgresDocumentsView, SearchView):
    tables = """
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        title text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.conversations USING gin (tsv);
    CREATE INDEX ON {schema}.conversations (owner);
    CREATE TABLE {schema}.messages (
        id uuid NOT NULL,  -- no index: found only through tsv and conversation_id
        conversation_id uuid NOT NULL,
        owner text NOT NULL,
        content text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    -- A small pending list: new entries are merged into the index in short, frequent
    -- steps instead of a quarter-second stall every 4 MB.
    CREATE INDEX ON {schema}.messages USING gin (tsv) WITH (gin_pending_list_limit = 256);
    CREATE INDEX ON {schema}.messages (conversation_id, id);  -- (a semantic hit's snippet finds its message)
    CREATE TABLE {schema}.artifacts (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        query text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.artifacts USING gin (tsv) WITH (gin_pending_list_limit = 256)
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.language = str(options.get("language", "english"))
        self.new_conversations = Rows(self._index_conversations)
        self.titles = Totals(lambda earlier, later: later, self._retitle)
        self.new_messages = Rows(self._index_messages)
        self.new_artifacts = Rows(self._index_artifacts)
        self.sinks = [self.new_conversations, self.titles, self.new_messages, self.new_artifacts]

    def index_conversation(self, conversation_id: UUID, owner: str, title: str, at: datetime) -> None:
        self.batch.append(self.new_conversations, (conversation_id, owner, title, at))

    def retitle_conversation(self, conversation_id: UUID, title: str) -> None:
        self.batch.accumulate(self.titles, conversation_id, title)

    def index_message(self, message_id: UUID, conversation_id: UUID, content: str, at: datetime) -> None:
        self.batch.append(self.new_messages, (message_id, conversation_id, content, at))

    def index_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str, at: datetime) -> None:
        self.batch.append(self.new_artifacts, (artifact_id, owner, query, draft, at))

    def _index_artifacts(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.artifacts (id, owner, query, tsv, created_at)"
                " SELECT a.id, a.owner, a.query, setweight(to_tsvector(%s::regconfig, a.query), 'A')"
                " || setweight(to_tsvector(%s::regconfig, a.draft), 'B') || "
                + OWNER_LEXEME_SQL.format(owner="a.owner")
                + ", a.at FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::timestamptz[])"
                " AS a(id, owner, query, draft, at)"
            ),
            [self.language, self.language, *columns(rows, 5)],
            prepare=True,
        )

    def _retitle(self, cur: Cursor[Any], items: list[tuple[Any, str]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET title = d.title,"
                " tsv = to_tsvector(%s::regconfig, d.title) || "
                + OWNER_LEXEME_SQL.format(owner="c.owner")
                + " FROM unnest(%b::uuid[], %b::text[]) AS d(id, title) WHERE c.id = d.id"
            ),
            [self.language, *columns(items, 2)],
            prepare=True,
        )

    def _index_conversations(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.conversations (id, owner, title, tsv, created_at)"
                " SELECT c.id, c.owner, c.title, to_tsvector(%s::regconfig, c.title) || "
                + OWNER_LEXEME_SQL.format(owner="c.owner")
                + ", c.at FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::timestamptz[]) AS c(id, owner, title, at)"
            ),
            [self.language, *columns(rows, 4)],
            prepare=True,
        )

    def _index_messages(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.messages (id, conversation_id, owner, content, tsv, created_at)"
                " SELECT m.id, c.id, c.owner, m.content, to_tsvector(%s::regconfig, m.content) || "
                + OWNER_LEXEME_SQL.format(owner="c.owner")
                + ", m.at FROM unnest(%b::uuid[], %b::uuid[], %b::text[], %b::timestamptz[])"
                " AS m(id, conversation_id, content, at) JOIN {schema}.conversations c ON c.id = m.conversation_id"
            ),
            [self.language, *columns(rows, 4)],
            prepare=True,
        )
