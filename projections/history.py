"""History read model: sessions, conversations (with counts and first message), messages."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor
from psycopg.types.json import Jsonb

from domain.conversation import Conversation
from domain.session import Session
from projections.base import Projection, handles
from projections.batch import Batch, Rows, Totals, columns

FIRST_MESSAGE_PREVIEW = 200


class HistoryProjection(Projection):
    name = "history"
    version = 1
    weight = 3
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

    def __init__(self, schema: str | None = None, **options: Any):
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

    def _retitle(self, cur: Cursor, items: list[tuple[Any, Any]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET title = d.title, updated_at = greatest(c.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::text[], %b::timestamptz[]) AS d(id, title, at) WHERE c.id = d.id"
            ),
            columns([(key, *value) for key, value in items], 3),
            prepare=True,
        )

    def _count_session_conversations(self, cur: Cursor, items: list[tuple[Any, int]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.sessions s SET conversation_count = s.conversation_count + d.added"
                " FROM unnest(%b::uuid[], %b::int[]) AS d(id, added) WHERE s.id = d.id"
            ),
            columns(items, 2),
            prepare=True,
        )

    def _add_message_totals(self, cur: Cursor, items: list[tuple[Any, Any]]) -> None:
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

    @handles(Session.Created)
    def session_created(self, batch: Batch, e: Session.Created, _: int) -> None:
        batch.execute(
            self.sql(
                "INSERT INTO {schema}.sessions (id, owner, name, description, kind, tags, status,"
                " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, 'open', %s, %s)"
            ),
            (e.originator_id, e.owner, e.name, e.description, e.kind, list(e.tags), e.timestamp, e.timestamp),
        )

    def _update_session(self, batch: Batch, e: Any, column: str, value: Any) -> None:
        batch.execute(
            self.sql("UPDATE {schema}.sessions SET {column} = %s, updated_at = %s WHERE id = %s", column=column),
            (value, e.timestamp, e.originator_id),
        )

    @handles(Session.Renamed)
    def session_renamed(self, batch: Batch, e: Session.Renamed, _: int) -> None:
        self._update_session(batch, e, "name", e.name)

    @handles(Session.Described)
    def session_described(self, batch: Batch, e: Session.Described, _: int) -> None:
        self._update_session(batch, e, "description", e.description)

    @handles(Session.Tagged)
    def session_tagged(self, batch: Batch, e: Session.Tagged, _: int) -> None:
        self._update_session(batch, e, "tags", list(e.tags))

    @handles(Session.Closed)
    def session_closed(self, batch: Batch, e: Session.Closed, _: int) -> None:
        self._update_session(batch, e, "status", "closed")

    @handles(Conversation.Started)
    def conversation_started(self, batch: Batch, e: Conversation.Started, _: int) -> None:
        batch.append(
            self.new_conversations,
            (
                e.originator_id,
                e.owner,
                e.title,
                list(e.tags),
                e.session_id,
                Jsonb(e.document_context) if e.document_context is not None else None,
                e.embedding_provider,
                e.timestamp,
                e.timestamp,
            ),
        )
        if e.session_id is not None:
            batch.accumulate(self.conversations_per_session, e.session_id, 1)

    @handles(Conversation.MessageAdded)
    def message_added(self, batch: Batch, e: Conversation.MessageAdded, _: int) -> None:
        batch.append(
            self.new_messages,
            (
                e.originator_id,
                e.originator_version,
                e.message_id,
                e.role,
                e.content,
                Jsonb(e.metadata),
                e.pinned,
                e.message_type,
                e.timestamp,
            ),
        )
        batch.accumulate(
            self.message_totals, e.originator_id, (1, e.content[:FIRST_MESSAGE_PREVIEW], e.timestamp)
        )

    @handles(Conversation.Retitled)
    def retitled(self, batch: Batch, e: Conversation.Retitled, _: int) -> None:
        batch.accumulate(self.titles, e.originator_id, (e.title, e.timestamp))

    @handles(Conversation.Retagged)
    def retagged(self, batch: Batch, e: Conversation.Retagged, _: int) -> None:
        batch.execute(
            self.sql("UPDATE {schema}.conversations SET tags = %s, updated_at = %s WHERE id = %s"),
            (list(e.tags), e.timestamp, e.originator_id),
        )

    @handles(Conversation.Deleted)
    def deleted(self, batch: Batch, e: Conversation.Deleted, _: int) -> None:
        batch.execute(self.sql("DELETE FROM {schema}.messages WHERE conversation_id = %s"), (e.originator_id,))
        batch.execute(
            self.sql(
                "UPDATE {schema}.sessions s SET conversation_count = conversation_count - 1"
                " FROM {schema}.conversations c WHERE c.id = %s AND s.id = c.session_id"
            ),
            (e.originator_id,),
        )
        batch.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (e.originator_id,))
