"""The history read model's Postgres view (projections/history.py): its tables and the statements its writes batch into.

Every content column (session names, descriptions and tags; conversation titles, tags,
document contexts and first messages; message contents and metadata) is sealed under its
owner's key (adapters/read_side/sealing.py) and opened by the query that reads it. Tag
filters go through `tag_terms`, the tags' blind terms. Nothing orders by content in SQL:
a list sorted by title is sorted in the service (services/conversations/queries.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.sealing import Owners, UserSeal
from adapters.read_side.view import PostgresView
from projections.history import HistoryView, SessionField
from services.ports.sealing import tag_terms

SEALED_SESSION_FIELDS = ("name", "description", "tags")


class PostgresHistoryView(PostgresView, HistoryView):
    tables = """
    CREATE TABLE {schema}.sessions (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        name bytea,  -- sealed (NULL: the owner was erased before the row was written)
        description bytea,
        kind text NOT NULL,
        tags bytea,
        status text NOT NULL,
        conversation_count integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.sessions ALTER COLUMN name SET STATISTICS 0, ALTER COLUMN description SET STATISTICS 0,
        ALTER COLUMN tags SET STATISTICS 0;
    CREATE INDEX ON {schema}.sessions (owner, created_at DESC, id);
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        title bytea,
        tags bytea,
        tag_terms text[] NOT NULL,
        session_id uuid,
        document_context bytea,
        embedding_provider text,
        message_count integer NOT NULL DEFAULT 0,
        first_message bytea,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    ) WITH (fillfactor = 80);
    -- Every message moves its conversation's message_count and updated_at: no index holds
    -- either, and a fifth of each page is left free, so those updates are HOT (no new
    -- entry in any index; a page's old versions pruned as it is read). An updated-order
    -- list sorts the caller's rows, which its total counts anyway.
    ALTER TABLE {schema}.conversations ALTER COLUMN title SET STATISTICS 0, ALTER COLUMN tags SET STATISTICS 0,
        ALTER COLUMN tag_terms SET STATISTICS 0, ALTER COLUMN document_context SET STATISTICS 0,
        ALTER COLUMN first_message SET STATISTICS 0;
    CREATE INDEX ON {schema}.conversations (owner, created_at, id);
    CREATE INDEX ON {schema}.conversations USING gin (tag_terms);
    CREATE INDEX ON {schema}.conversations (session_id) WHERE session_id IS NOT NULL;
    CREATE TABLE {schema}.messages (
        conversation_id uuid NOT NULL,
        seq bigint NOT NULL,
        -- sealed: the message as a get's reply carries it (JSON), opened and sent as it is
        message bytea,
        PRIMARY KEY (conversation_id, seq)
    );
    ALTER TABLE {schema}.messages ALTER COLUMN message SET STATISTICS 0
    """

    erasure = """
    DELETE FROM {schema}.messages WHERE conversation_id IN (SELECT id FROM {schema}.conversations WHERE owner = %(owner)s);
    DELETE FROM {schema}.conversations WHERE owner = %(owner)s;
    DELETE FROM {schema}.sessions WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self._copy_messages = self.copier("{schema}.messages", "conversation_id, seq, message")
        self.conversation_owners = Owners(self.sql("SELECT id, owner FROM {schema}.conversations WHERE id = ANY(%s)"))
        self.session_owners = Owners(self.sql("SELECT id, owner FROM {schema}.sessions WHERE id = ANY(%s)"))
        self.new_conversations = Rows(
            self.copier(
                "{schema}.conversations",
                "id, owner, title, tags, tag_terms, session_id, document_context, embedding_provider, created_at,"
                " updated_at",
            )
        )
        self.conversations_per_session = Totals(lambda a, b: a + b, self._count_session_conversations)
        self.new_messages = Rows(self._write_messages)
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
        self.session_owners.remember(session_id, owner)
        seal = self.seals.for_writing(owner)
        row = f"session:{session_id}:"
        name_, description_, tags_ = (
            (seal.seal(row + "name", name), seal.seal(row + "description", description), seal.seal_json(row + "tags", tags))
            if seal is not None else (None, None, None)
        )
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.sessions (id, owner, name, description, kind, tags, status,"
                " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, 'open', %s, %s)"
            ),
            (session_id, owner, name_, description_, kind, tags_, at, at),
        )

    def update_session(self, session_id: UUID, field: SessionField, value: Any, at: datetime) -> None:
        if field in SEALED_SESSION_FIELDS:
            self.batch.flush()
            owner = self.session_owners.of(self.batch.cursor, [session_id]).get(session_id)
            seal = self.seals.for_writing(owner) if owner is not None else None
            row = f"session:{session_id}:{field}"
            value = None if seal is None else seal.seal_json(row, value) if field == "tags" else seal.seal(row, value)
        self.batch.execute(
            self.sql("UPDATE {schema}.sessions SET {column} = %s, updated_at = %s WHERE id = %s", column=field),
            (value, at, session_id),
        )

    def add_conversation(
        self, conversation_id: UUID, owner: str, title: str, tags: list[str], session_id: UUID | None,
        document_context: dict[str, Any] | None, embedding_provider: str | None, at: datetime,
    ) -> None:
        self.conversation_owners.remember(conversation_id, owner)
        seal = self.seals.for_writing(owner)
        row = f"conversation:{conversation_id}:"
        if seal is None:
            sealed: tuple[Any, ...] = (None, None, [], None)
        else:
            context = seal.seal_json(row + "context", document_context) if document_context is not None else None
            sealed = (seal.seal(row + "title", title), seal.seal_json(row + "tags", tags), tag_terms(seal, tags), context)
        title_, tags_, terms, context_ = sealed
        self.batch.append(
            self.new_conversations,
            (conversation_id, owner, title_, tags_, terms, session_id, context_, embedding_provider, at, at),
        )

    def count_session_conversations(self, session_id: UUID, added: int) -> None:
        self.batch.accumulate(self.conversations_per_session, session_id, added)

    def add_message(
        self, conversation_id: UUID, seq: int, message_id: UUID, role: str, content: str, metadata: dict[str, Any],
        pinned: bool, message_type: str, at: datetime,
    ) -> None:
        self.batch.append(
            self.new_messages, (conversation_id, seq, message_id, role, content, metadata, pinned, message_type, at)
        )

    def count_messages(self, conversation_id: UUID, added: int, preview: str, at: datetime) -> None:
        self.batch.accumulate(self.message_totals, conversation_id, (added, preview, at))

    def retitle_conversation(self, conversation_id: UUID, title: str, at: datetime) -> None:
        self.batch.accumulate(self.titles, conversation_id, (title, at))

    def retag_conversation(self, conversation_id: UUID, tags: list[str], at: datetime) -> None:
        self.batch.flush()
        owner = self.conversation_owners.of(self.batch.cursor, [conversation_id]).get(conversation_id)
        seal = self.seals.for_writing(owner) if owner is not None else None
        sealed = seal.seal_json(f"conversation:{conversation_id}:tags", tags) if seal is not None else None
        terms = tag_terms(seal, tags) if seal is not None else []
        self.batch.execute(
            self.sql("UPDATE {schema}.conversations SET tags = %s, tag_terms = %s, updated_at = %s WHERE id = %s"),
            (sealed, terms, at, conversation_id),
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

    def _seals_of(self, cur: Cursor[Any], conversation_ids: list[UUID]) -> dict[UUID, UserSeal | None]:
        """Each conversation's owner's seal (None: erased); a conversation not there is left out."""
        owners = self.conversation_owners.of(cur, conversation_ids)
        return {i: self.seals.for_writing(owner) for i, owner in owners.items()}

    def _write_messages(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        seals = self._seals_of(cur, [row[0] for row in rows])
        sealed_rows = []
        for conversation_id, seq, message_id, role, content, metadata, pinned, message_type, at in rows:
            seal = seals.get(conversation_id)
            # The whole message in one seal, as the reply carries it: a get of a hundred
            # messages opens each once and sends its JSON as it is, with no column to load,
            # no dict to build and nothing to encode again.
            message = seal.seal_json(f"message:{conversation_id}:{seq}", {
                "id": message_id, "role": role, "content": content, "metadata": metadata, "pinned": pinned,
                "message_type": message_type, "created_at": at.astimezone(UTC),  # (as Postgres gave it: UTC)
            }) if seal is not None else None
            sealed_rows.append((conversation_id, seq, message))
        self._copy_messages(cur, sealed_rows)

    def _sealed_per_conversation(
        self, cur: Cursor[Any], items: list[tuple[Any, Any]], column: str, text: int
    ) -> list[tuple[Any, ...]]:
        """The items' value at index `text` sealed as the conversation's `column`."""
        seals = self._seals_of(cur, [key for key, _ in items])
        sealed = []
        for key, value in items:
            seal = seals.get(key)
            values = list(value)
            values[text] = seal.seal(f"conversation:{key}:{column}", values[text]) if seal is not None else None
            sealed.append((key, *values))
        return sealed

    def _retitle(self, cur: Cursor[Any], items: list[tuple[Any, Any]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET title = d.title, updated_at = greatest(c.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::bytea[], %b::timestamptz[]) AS d(id, title, at) WHERE c.id = d.id"
            ),
            columns(self._sealed_per_conversation(cur, items, "title", 0), 3),
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
        # Counts and times for every conversation of the batch; a preview only for those
        # that have none yet (their first message is in this batch), so only those are
        # sealed: the others, nearly all under load, cost no cipher call.
        cur.execute(
            self.sql(
                "WITH counted AS (UPDATE {schema}.conversations c SET message_count = c.message_count + d.added,"
                " updated_at = greatest(c.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::int[], %b::timestamptz[]) AS d(id, added, at) WHERE c.id = d.id"
                " RETURNING c.id, c.first_message IS NULL AS bare)"
                " SELECT id FROM counted WHERE bare"
            ),
            columns([(key, added, at) for key, (added, _, at) in items], 3),
            prepare=True,
        )
        bare = {row[0] for row in cur.fetchall()}
        if not bare:
            return
        previews = [(key, (preview,)) for key, (_, preview, _) in items if key in bare]
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET first_message = d.first"
                " FROM unnest(%b::uuid[], %b::bytea[]) AS d(id, first) WHERE c.id = d.id"
            ),
            columns(self._sealed_per_conversation(cur, previews, "first_message", 0), 2),
            prepare=True,
        )
