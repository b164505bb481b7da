"""Search read model: Postgres full text over message content and conversation titles.

Every document's tsvector also holds one lexeme naming its owner ('OWNER ' || md5(owner)),
so a query ANDs it in and the GIN index yields only the caller's matches: no extension
needed, and a common word never makes Postgres look at every user's rows. The lexeme has
an upper-case word and a space, which to_tsvector never produces, so no text a user
writes can forge another user's lexeme (queries also filter on the owner column).
"""

from __future__ import annotations

from psycopg import Cursor

from domain.conversation import Conversation
from projections.base import Projection, handles

OWNER_LEXEME_SQL = "array_to_tsvector(ARRAY['OWNER ' || md5({owner})])"


class SearchProjection(Projection):
    name = "search"
    version = 2
    tables = """
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        title text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.conversations USING gin (tsv);
    CREATE TABLE {schema}.messages (
        id uuid PRIMARY KEY,
        conversation_id uuid NOT NULL,
        owner text NOT NULL,
        content text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.messages USING gin (tsv);
    CREATE INDEX ON {schema}.messages (conversation_id)
    """

    @property
    def language(self) -> str:
        return str(self.options.get("language", "english"))

    @handles(Conversation.Started)
    def started(self, cur: Cursor, e: Conversation.Started, _: int) -> None:
        cur.execute(
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
    def retitled(self, cur: Cursor, e: Conversation.Retitled, _: int) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations SET title = %(title)s,"
                " tsv = to_tsvector(%(language)s::regconfig, %(title)s) || "
                + OWNER_LEXEME_SQL.format(owner="owner")
                + " WHERE id = %(id)s"
            ),
            {"id": e.originator_id, "title": e.title, "language": self.language},
        )

    @handles(Conversation.MessageAdded)
    def message_added(self, cur: Cursor, e: Conversation.MessageAdded, _: int) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.messages (id, conversation_id, owner, content, tsv, created_at)"
                " SELECT %(message_id)s, c.id, c.owner, %(content)s,"
                " to_tsvector(%(language)s::regconfig, %(content)s) || "
                + OWNER_LEXEME_SQL.format(owner="c.owner")
                + ", %(at)s FROM {schema}.conversations c WHERE c.id = %(id)s"
            ),
            {
                "message_id": e.message_id,
                "content": e.content,
                "language": self.language,
                "at": e.timestamp,
                "id": e.originator_id,
            },
        )

    @handles(Conversation.Deleted)
    def deleted(self, cur: Cursor, e: Conversation.Deleted, _: int) -> None:
        cur.execute(self.sql("DELETE FROM {schema}.messages WHERE conversation_id = %s"), (e.originator_id,))
        cur.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (e.originator_id,))
