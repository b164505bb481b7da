"""The history read model's Postgres view (projections/history.py): its tables and the statements its writes batch into."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor
from psycopg.types.json import Jsonb

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.view import PostgresView
from projections.history import HistoryView, SessionField


class PostgresHistoryView(PostgresView, HistoryView):
    tables = """
    CREATE TABLE {schema}.sessions (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        name text NOT NULL,
        description text NOT NULL,
        kind text NOT NULL,
        tags text[] NOT NULL,
        status text NOT NULL,
        conversation_count integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.sessions (owner, created_at DESC, id);
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        title text NOT NULL,
        tags text[] NOT NULL,
        session_id uuid,
        document_context jsonb,
        embedding_provider text,
        message_count integer NOT NULL DEFAULT 0,
        first_message text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.conversations (owner, updated_at, id);
    CREATE INDEX ON {schema}.conversations (owner, created_at, id);
    CREATE INDEX ON {schema}.conversations (owner, title, id);
    CREATE INDEX ON {schema}.conversations USING gin (tags);
    CREATE INDEX ON {schema}.conversations (session_id) WHERE session_id IS NOT NULL;
    CREATE TABLE {schema}.messages (
        conversation_id uuid NOT NULL,
        seq bigint NOT NULL,
        id uuid NOT NULL,
        role text NOT NULL,
        content text NOT NULL,
        metadata jsonb NOT NULL,
        pinned boolean NOT NULL,
        message_type text NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    )
    """

    erasure = """
    DELETE FROM {schema}.messages WHERE conversation_id IN (SELECT id FROM {schema}.conversations WHERE owner = %(owner)s);
    DELETE FROM {schema}.conversations WHERE owner = %(owner)s;
    DELETE FROM {schema}.sessions WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.new_conversations = Rows(
            self.copier(
                "{schema}.conversations",
                "id, owner, title, tags, session_id, document_context, embedding_provider, created_at, updated_at",
            )
        )
        self.conversations_per_session = Totals(lambda a, b: a + b, self._count_session_conversations)
        self.new_messages = Rows(
            self.copier(
                "{schema}.messages", "conversation_id, seq, id, role, content, metadata, pinned, message_type, created_at"
            )
        )
        # Per conversation: (messages added, first message's preview, latest time).
        self.message_totals = Totals(lambda a, b: (a[0] + b[0], a[1], max(a[2], b[2])), self._add_message_totals)
        # Per conversation: the batch's latest (title, time).
        self.titles = Totals(lambda earlier, later: later, self._retitle)
        self.sinks = [
            self.new_conversations,
            self.conversations_per_session,
            self.titles,
            self.new_messages,
            self.message_totals,
        ]

    def add_session(
        self, session_id: UUID, owner: str, name: str, description: str, kind: str, tags: list[str], at: datetime
    ) -> None:
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.sessions (id, owner, name, description, kind, tags, status,"
                " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, 'open', %s, %s)"
            ),
            (session_id, owner, name, description, kind, tags, at, at),
        )

    def update_session(self, session_id: UUID, field: SessionField, value: Any, at: datetime) -> None:
        self.batch.execute(
            self.sql("UPDATE {schema}.sessions SET {column} = %s, updated_at = %s WHERE id = %s", column=field),
            (value, at, session_id),
        )

    def add_conversation(
        self, conversation_id: UUID, owner: str, title: str, tags: list[str], session_id: UUID | None,
        document_context: dict[str, Any] | None, embedding_provider: str | None, at: datetime,
    ) -> None:
        context = Jsonb(document_context) if document_context is not None else None
        self.batch.append(
            self.new_conversations,
            (conversation_id, owner, title, tags, session_id, context, embedding_provider, at, at),
        )

    def count_session_conversations(self, session_id: UUID, added: int) -> None:
        self.batch.accumulate(self.conversations_per_session, session_id, added)

    def add_message(
        self, conversation_id: UUID, seq: int, message_id: UUID, role: str, content: str, metadata: dict[str, Any],
        pinned: bool, message_type: str, at: datetime,
    ) -> None:
        self.batch.append(
            self.new_messages,
            (conversation_id, seq, message_id, role, content, Jsonb(metadata), pinned, message_type, at),
        )

    def count_messages(self, conversation_id: UUID, added: int, preview: str, at: datetime) -> None:
        self.batch.accumulate(self.message_totals, conversation_id, (added, preview, at))

    def retitle_conversation(self, conversation_id: UUID, title: str, at: datetime) -> None:
        self.batch.accumulate(self.titles, conversation_id, (title, at))

    def retag_conversation(self, conversation_id: UUID, tags: list[str], at: datetime) -> None:
        self.batch.execute(
            self.sql("UPDATE {schema}.conversations SET tags = %s, updated_at = %s WHERE id = %s"),
            (tags, at, conversation_id),
        )

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.batch.execute(self.sql("DELETE FROM {schema}.messages WHERE conversation_id = %s"), (conversation_id,))
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.sessions s SET conversation_count = conversation_count - 1"
                " FROM {schema}.conversations c WHERE c.id = %s AND s.id = c.session_id"
            ),
            (conversation_id,),
        )
        self.batch.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (conversation_id,))

    def _retitle(self, cur: Cursor[Any], items: list[tuple[Any, Any]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET title = d.title, updated_at = greatest(c.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::text[], %b::timestamptz[]) AS d(id, title, at) WHERE c.id = d.id"
            ),
            columns([(key, *value) for key, value in items], 3),
            prepare=True,
        )

    def _count_session_conversations(self, cur: Cursor[Any], items: list[tuple[Any, int]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.sessions s SET conversation_count = s.conversation_count + d.added"
                " FROM unnest(%b::uuid[], %b::int[]) AS d(id, added) WHERE s.id = d.id"
            ),
            columns(items, 2),
            prepare=True,
        )

    def _add_message_totals(self, cur: Cursor[Any], items: list[tuple[Any, Any]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET message_count = c.message_count + d.added,"
                " first_message = coalesce(c.first_message, d.first), updated_at = greatest(c.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::int[], %b::text[], %b::timestamptz[]) AS d(id, added, first, at)"
                " WHERE c.id = d.id"
            ),
            columns([(key, *value) for key, value in items], 4),
            prepare=True,
        )
