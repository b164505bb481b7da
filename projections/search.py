"""Search read model: Postgres full text over message content and conversation titles.

Every document's tsvector also holds one lexeme naming its owner ('OWNER ' || md5(owner)),
so a query ANDs it in and the GIN index yields only the caller's matches: no extension
needed, and a common word never makes Postgres look at every user's rows. The lexeme has
an upper-case word and a space, which to_tsvector never produces, so no text a user
writes can forge another user's lexeme (queries also filter on the owner column).
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor

from domain.conversation import Conversation
from projections.base import Projection, handles
from projections.batch import Batch, Rows, columns

OWNER_LEXEME_SQL = "array_to_tsvector(ARRAY['OWNER ' || md5({owner})])"


class SearchProjection(Projection):
    name = "search"
    version = 3
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
        id uuid PRIMARY KEY,
        conversation_id uuid NOT NULL,
        owner text NOT NULL,
        content text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    -- A small pending list: new entries are merged into the index in short, frequent
    -- steps instead of a quarter-second stall every 4 MB.
    CREATE INDEX ON {schema}.messages USING gin (tsv) WITH (gin_pending_list_limit = 256);
    CREATE INDEX ON {schema}.messages (conversation_id)
    """

    def __init__(self, schema: str | None = None, **options: Any):
        super().__init__(schema, **options)
        self.language = str(options.get("language", "english"))
        self.new_messages = Rows(self._index_messages)

    def _index_messages(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.messages (id, conversation_id, owner, content, tsv, created_at)"
                " SELECT m.id, c.id, c.owner, m.content, to_tsvector(%s::regconfig, m.content) || "
                + OWNER_LEXEME_SQL.format(owner="c.owner")
                + ", m.at FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::timestamptz[])"
                " AS m(id, conversation_id, content, at) JOIN {schema}.conversations c ON c.id = m.conversation_id"
            ),
            [self.language, *columns(rows, 4)],
        )

    @handles(Conversation.Started)
    def started(self, batch: Batch, e: Conversation.Started, _: int) -> None:
        batch.execute(
            self.sql(
                "INSERT INTO {schema}.conversations (id, owner, title, tsv, created_at)"
                " VALUES (%(id)s, %(owner)s, %(title)s,"
                " to_tsvector(%(language)s::regconfig, %(title)s) || "
                + OWNER_LEXEME_SQL.format(owner="%(owner)s")
                + ", %(at)s)"
            ),
            {"id": e.originator_id, "owner": e.owner, "title": e.title, "language": self.language, "at": e.timestamp},
        )

    @handles(Conversation.Retitled)
    def retitled(self, batch: Batch, e: Conversation.Retitled, _: int) -> None:
        batch.execute(
            self.sql(
                "UPDATE {schema}.conversations SET title = %(title)s,"
                " tsv = to_tsvector(%(language)s::regconfig, %(title)s) || "
                + OWNER_LEXEME_SQL.format(owner="owner")
                + " WHERE id = %(id)s"
            ),
            {"id": e.originator_id, "title": e.title, "language": self.language},
        )

    @handles(Conversation.MessageAdded)
    def message_added(self, batch: Batch, e: Conversation.MessageAdded, _: int) -> None:
        batch.append(self.new_messages, (e.message_id, e.originator_id, e.content, e.timestamp))

    @handles(Conversation.Deleted)
    def deleted(self, batch: Batch, e: Conversation.Deleted, _: int) -> None:
        batch.execute(self.sql("DELETE FROM {schema}.messages WHERE conversation_id = %s"), (e.originator_id,))
        batch.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (e.originator_id,))
