"""The search read model's Postgres view (projections/search.py): blind tsvectors, sealed
texts, and the deletes it shares with the semantic one.

A document's tsvector is made by Postgres (`to_tsvector` in a SELECT of the projection's
transaction, which writes nothing), or for a plain text of words in the projection process
with each word's lexeme asked of Postgres once (adapters/read_side/lexicon.py), and every
lexeme in it replaced by its owner's blind term (adapters/read_side/sealing.py) before it is
stored; positions and weights stay, so ranking is unchanged. The texts a hit shows (titles, messages) are stored sealed under the
owner's key. No plaintext of a user is written to a table, an index or the WAL, and terms
keyed by a user's key index only that user's documents: no owner lexeme is needed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor
from psycopg.sql import SQL, Composed, Literal

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.lexicon import Lexicon, tsvector_text
from adapters.read_side.sealing import Owners, UserSeal
from adapters.read_side.view import PostgresView
from projections.search import DocumentsView, SearchView


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
    # Its largest index: built after loading it took ~2 s per 100,000 messages on one core
    # while the other idled; merged while loading, a rebuild of every read model is 8-14% faster.
    merged_while_loading = ("messages",)
    tables = """
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        title bytea,  -- sealed (NULL: the owner was erased before the row was written)
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.conversations ALTER COLUMN title SET STATISTICS 0, ALTER COLUMN tsv SET STATISTICS 0;
    CREATE INDEX ON {schema}.conversations USING gin (tsv);
    CREATE INDEX ON {schema}.conversations (owner);
    CREATE TABLE {schema}.messages (
        id uuid NOT NULL,  -- no index: found only through tsv and conversation_id
        conversation_id uuid NOT NULL,
        owner text NOT NULL,
        content bytea,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.messages ALTER COLUMN content SET STATISTICS 0, ALTER COLUMN tsv SET STATISTICS 0;
    -- New entries wait in the pending list until the GIN merger merges it, every 0.2 s from
    -- its own connection (adapters/read_side/gin_merger.py): 4 MB bounds it when that is behind.
    CREATE INDEX ON {schema}.messages USING gin (tsv) WITH (gin_pending_list_limit = 4096);
    CREATE INDEX ON {schema}.messages (conversation_id, id);  -- (a semantic hit's snippet finds its message)
    CREATE TABLE {schema}.artifacts (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        tsv tsvector NOT NULL,
        created_at timestamptz NOT NULL
    );
    ALTER TABLE {schema}.artifacts ALTER COLUMN tsv SET STATISTICS 0;
    CREATE INDEX ON {schema}.artifacts USING gin (tsv) WITH (gin_pending_list_limit = 4096)
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.language = str(options.get("language", "english"))
        self.lexicon = Lexicon(self.language)
        self.owners = Owners(self.sql("SELECT id, owner FROM {schema}.conversations WHERE id = ANY(%s)"))
        self.new_conversations = Rows(self._index_conversations)
        self.titles = Totals(lambda earlier, later: later, self._retitle)
        self.new_messages = Rows(self._index_messages)
        self.new_artifacts = Rows(self._index_artifacts)
        self.sinks = [self.new_conversations, self.titles, self.new_messages, self.new_artifacts]

    def index_conversation(self, conversation_id: UUID, owner: str, title: str, at: datetime) -> None:
        self.owners.remember(conversation_id, owner)
        self.batch.append(self.new_conversations, (conversation_id, owner, title, at))

    def retitle_conversation(self, conversation_id: UUID, title: str) -> None:
        self.batch.accumulate(self.titles, conversation_id, title)

    def index_message(self, message_id: UUID, conversation_id: UUID, content: str, at: datetime) -> None:
        self.batch.append(self.new_messages, (message_id, conversation_id, content, at))

    def index_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str, at: datetime) -> None:
        self.batch.append(self.new_artifacts, (artifact_id, owner, query, draft, at))

    def _vectors(self, cur: Cursor[Any], vector: Composed, *texts: list[str]) -> list[str]:
        """`vector` (of the texts d.t0, d.t1 ...) of each row of `texts`, as Postgres prints it."""
        names = SQL(", ").join(SQL("t" + str(n)) for n in range(len(texts)))
        found = cur.execute(
            SQL(
                "SELECT {vector}::text FROM unnest({arrays}) WITH ORDINALITY AS d({names}, n) ORDER BY d.n"
            ).format(vector=vector, arrays=SQL(", ").join(SQL("%b::text[]") for _ in texts), names=names),
            [*texts],
            prepare=True,
        ).fetchall()
        return [row[0] for row in found]

    def _plain(self) -> Composed:
        return SQL("to_tsvector({language}::regconfig, d.t0)").format(language=Literal(self.language))

    def _blind(self, cur: Cursor[Any], seals: list[UserSeal | None], vector: Composed, *texts: list[str]) -> list[str]:
        """Each row's tsvector with its owner's blind terms (an erased owner's: empty)."""
        return [
            seal.blind_tsvector(plain) if seal is not None else ""
            for seal, plain in zip(seals, self._vectors(cur, vector, *texts), strict=True)
        ]

    def _blind_plain(self, cur: Cursor[Any], seals: list[UserSeal | None], texts: list[str]) -> list[str]:
        """Each text's `to_tsvector` with its owner's blind terms (an erased owner's: empty);
        plain texts made here, the others by Postgres."""
        made = self.lexicon.lexemes(cur, texts)
        parsed = [i for i, lexemes in enumerate(made) if lexemes is None and seals[i] is not None]
        vectors = dict(zip(parsed, self._vectors(cur, self._plain(), [texts[i] for i in parsed]), strict=True)) if (
            parsed) else {}
        blind = []
        for i, (seal, lexemes) in enumerate(zip(seals, made, strict=True)):
            if seal is None:
                blind.append("")
            elif lexemes is not None:
                blind.append(tsvector_text(lexemes, seal.quoted_terms))
            else:
                blind.append(seal.blind_tsvector(vectors[i]))
        return blind

    def _index_artifacts(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        seals = [self.seals.for_writing(row[1]) for row in rows]
        vector = SQL(
            "(setweight(to_tsvector({language}::regconfig, d.t0), 'A')"
            " || setweight(to_tsvector({language}::regconfig, d.t1), 'B'))"
        ).format(language=Literal(self.language))
        tsvs = self._blind(cur, seals, vector, [row[2] for row in rows], [row[3] for row in rows])
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.artifacts (id, owner, tsv, created_at)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::tsvector[], %b::timestamptz[])"
            ),
            columns([(row[0], row[1], tsv, row[4]) for row, tsv in zip(rows, tsvs, strict=True)], 4),
            prepare=True,
        )

    def _retitle(self, cur: Cursor[Any], items: list[tuple[Any, str]]) -> None:
        owners = self.owners.of(cur, [key for key, _ in items])
        items = [(key, title) for key, title in items if key in owners]
        seals = [self.seals.for_writing(owners[key]) for key, _ in items]
        tsvs = self._blind_plain(cur, seals, [title for _, title in items])
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET title = d.title, tsv = d.tsv"
                " FROM unnest(%b::uuid[], %b::bytea[], %b::tsvector[]) AS d(id, title, tsv) WHERE c.id = d.id"
            ),
            columns(
                [(key, sealed_text(seal, f"conversation:{key}:title", title), tsv)
                 for (key, title), seal, tsv in zip(items, seals, tsvs, strict=True)],
                3,
            ),
            prepare=True,
        )

    def _index_conversations(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        seals = [self.seals.for_writing(row[1]) for row in rows]
        tsvs = self._blind_plain(cur, seals, [row[2] for row in rows])
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.conversations (id, owner, title, tsv, created_at)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::bytea[], %b::tsvector[], %b::timestamptz[])"
            ),
            columns(
                [(row[0], row[1], sealed_text(seal, f"conversation:{row[0]}:title", row[2]), tsv, row[3])
                 for row, seal, tsv in zip(rows, seals, tsvs, strict=True)],
                5,
            ),
            prepare=True,
        )

    def _index_messages(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        # A message joins its conversation for its owner: one whose conversation is not
        # indexed (deleted, or its owner erased) is left out.
        owners = self.owners.of(cur, [row[1] for row in rows])
        rows = [row for row in rows if row[1] in owners]
        seals = [self.seals.for_writing(owners[row[1]]) for row in rows]
        tsvs = self._blind_plain(cur, seals, [row[2] for row in rows])
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.messages (id, conversation_id, owner, content, tsv, created_at)"
                " SELECT * FROM unnest(%b::uuid[], %b::uuid[], %b::text[], %b::bytea[], %b::tsvector[],"
                " %b::timestamptz[])"
            ),
            columns(
                [(message_id, conversation_id, owners[conversation_id],
                  sealed_text(seal, f"message:{message_id}:content", content), tsv, at)
                 for (message_id, conversation_id, content, at), seal, tsv in zip(rows, seals, tsvs, strict=True)],
                6,
            ),
            prepare=True,
        )


def sealed_text(seal: UserSeal | None, row: str, text: str) -> bytes | None:
    return seal.seal(row, text) if seal is not None else None
