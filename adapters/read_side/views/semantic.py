"""The semantic read model's Postgres view (projections/semantic.py): embeddings in pgvector columns.

Kept only where the server has the `vector` extension (`semantic_support` says why not
otherwise, and searches then rank by full text alone). A search is an exact
nearest-neighbour scan of the caller's own rows (found by the owner index): no approximate
index whose filtering could miss a user's matches among everyone else's. A batch's texts
are embedded in one call per sink.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg import Cursor

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.views.search import PostgresDocumentsView
from projections.semantic import QUERY_WEIGHT, SemanticView, blend
from services.ports.embedder import Embedder, vector_literal


def semantic_support(conn: psycopg.Connection[Any]) -> str | None:
    """None when the server can keep vectors (the `vector` extension is there or could be
    created now); otherwise why not, in words for `projections status` and the ready line."""
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        return None
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
        return "the pgvector extension is not installed on this Postgres server; search ranks by full text only"
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error:
        return "the pgvector extension is installed but this role may not create it; search ranks by full text only"
    return None


class PostgresSemanticView(PostgresDocumentsView, SemanticView):
    TABLES = """
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        embedding VECTOR NOT NULL
    );
    CREATE INDEX ON {schema}.conversations (owner);
    CREATE TABLE {schema}.messages (
        id uuid NOT NULL,
        conversation_id uuid NOT NULL,
        owner text NOT NULL,
        embedding VECTOR NOT NULL
    );
    CREATE INDEX ON {schema}.messages (owner);
    CREATE INDEX ON {schema}.messages (conversation_id);
    CREATE TABLE {schema}.artifacts (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        embedding VECTOR NOT NULL
    );
    CREATE INDEX ON {schema}.artifacts (owner)
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.embedder: Embedder = options["embedder"]
        self.tables = self.TABLES.replace("VECTOR", f"vector({self.embedder.dimensions})")
        self.new_conversations = Rows(self._index_conversations)
        self.titles = Totals(lambda earlier, later: later, self._retitle)
        self.new_messages = Rows(self._index_messages)
        self.new_artifacts = Rows(self._index_artifacts)
        self.sinks = [self.new_conversations, self.titles, self.new_messages, self.new_artifacts]

    def embed_conversation(self, conversation_id: UUID, owner: str, title: str) -> None:
        self.batch.append(self.new_conversations, (conversation_id, owner, title))

    def retitle_conversation(self, conversation_id: UUID, title: str) -> None:
        self.batch.accumulate(self.titles, conversation_id, title)

    def embed_message(self, message_id: UUID, conversation_id: UUID, content: str) -> None:
        self.batch.append(self.new_messages, (message_id, conversation_id, content))

    def embed_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str) -> None:
        self.batch.append(self.new_artifacts, (artifact_id, owner, query, draft))

    def _vectors(self, texts: list[str]) -> list[str]:
        return [vector_literal(v) for v in self.embedder.embed(texts)]

    def _insert(self, cur: Cursor[Any], table: str, ids: list[Any], owners: list[str], vectors: list[str]) -> None:
        """Rows of `table` (conversations or artifacts): id, owner, vector literal."""
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.{table} (id, owner, embedding)"
                " SELECT r.id, r.owner, r.embedding::vector FROM unnest(%b::uuid[], %b::text[], %b::text[])"
                " AS r(id, owner, embedding)",
                table=table,
            ),
            [ids, owners, vectors],
            prepare=True,
        )

    def _index_conversations(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        ids, owners, titles = columns(rows, 3)
        self._insert(cur, "conversations", ids, owners, self._vectors(titles))

    def _retitle(self, cur: Cursor[Any], items: list[tuple[Any, str]]) -> None:
        ids, titles = columns(items, 2)
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET embedding = d.embedding::vector"
                " FROM unnest(%b::uuid[], %b::text[]) AS d(id, embedding) WHERE c.id = d.id"
            ),
            [ids, self._vectors(titles)],
            prepare=True,
        )

    def _index_messages(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        ids, conversation_ids, contents = columns(rows, 3)
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.messages (id, conversation_id, owner, embedding)"
                " SELECT m.id, c.id, c.owner, m.embedding::vector"
                " FROM unnest(%b::uuid[], %b::uuid[], %b::text[]) AS m(id, conversation_id, embedding)"
                " JOIN {schema}.conversations c ON c.id = m.conversation_id"
            ),
            [ids, conversation_ids, self._vectors(contents)],
            prepare=True,
        )

    def _index_artifacts(self, cur: Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        ids, owners, queries, drafts = columns(rows, 4)
        vectors = self.embedder.embed(queries + drafts)
        blended = [blend(q, d, QUERY_WEIGHT) for q, d in zip(vectors[: len(queries)], vectors[len(queries) :], strict=True)]
        self._insert(cur, "artifacts", ids, owners, [vector_literal(v) for v in blended])
