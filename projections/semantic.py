"""Semantic read model: one embedding per artifact (its query's blended with its draft's),
conversation title and message, in pgvector columns, for the vector half of hybrid search
(services/runtime/full_text.py ranks it together with the full-text half).

Kept only where the server has the `vector` extension (`semantic_support` says why not
otherwise, and searches then rank by full text alone). Vectors come from the configured
embedder; its name and size are part of this read model's version, so changing the
embedder rebuilds it from the log rather than mixing two vector spaces. A search is an
exact nearest-neighbour scan of the caller's own rows (found by the owner index): no
approximate index whose filtering could miss a user's matches among everyone else's.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import psycopg
from psycopg import Cursor

from domain.artifact import Artifact
from domain.conversation import Conversation
from projections.base import handles
from projections.batch import Batch, Rows, Totals, columns
from projections.search import Documents
from services.ports.embedder import MAX_EMBEDDED_CHARS, Embedder, EmbeddingFailed, vector_literal

LAYOUT_VERSION = 1  # bump when the tables or what is embedded change
# An artifact's vector: its query's and its draft's, weighted as full text weighs them (A
# above B): a search is usually for what was asked, and a long draft must not drown it.
QUERY_WEIGHT = 0.7


def blend(first: list[float], second: list[float], weight: float) -> list[float]:
    """weight * first + (1 - weight) * second, at unit length (a zero vector stays zero)."""
    rest = 1 - weight
    mixed = [weight * a + rest * b for a, b in zip(first, second, strict=True)]
    norm = math.hypot(*mixed)
    return [x / norm for x in mixed] if norm else mixed


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


class SemanticProjection(Documents):
    name = "semantic"
    version = LAYOUT_VERSION
    weight = 2
    isolated = True  # an embeddings endpoint's latency or outage delays this read model only
    transient_errors = (EmbeddingFailed,)  # the endpoint, not the event: retried, never parked
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

    def __init__(self, schema: str | None = None, **options: Any):
        super().__init__(schema, **options)
        self.embedder: Embedder = options["embedder"]
        size = self.embedder.dimensions
        self.tables = self.TABLES.replace("VECTOR", f"vector({size})")
        # The embedder's name and size are part of the version: another embedder, another read model.
        space = zlib.crc32(f"{self.embedder.name}/{size}".encode()) % 100_000
        self.version = LAYOUT_VERSION * 100_000 + space
        self.new_conversations = Rows(self._index_conversations)
        self.titles = Totals(lambda earlier, later: later, self._retitle)
        self.new_messages = Rows(self._index_messages)
        self.new_artifacts = Rows(self._index_artifacts)
        self.sinks = [self.new_conversations, self.titles, self.new_messages, self.new_artifacts]

    def _vectors(self, texts: list[str]) -> list[str]:
        return [vector_literal(v) for v in self.embedder.embed(texts)]

    def _insert(self, cur: Cursor, table: str, ids: list[Any], owners: list[str], vectors: list[str]) -> None:
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

    def _index_conversations(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
        ids, owners, titles = columns(rows, 3)
        self._insert(cur, "conversations", ids, owners, self._vectors(titles))

    def _retitle(self, cur: Cursor, items: list[tuple[Any, str]]) -> None:
        ids, titles = columns(items, 2)
        cur.execute(
            self.sql(
                "UPDATE {schema}.conversations c SET embedding = d.embedding::vector"
                " FROM unnest(%b::uuid[], %b::text[]) AS d(id, embedding) WHERE c.id = d.id"
            ),
            [ids, self._vectors(titles)],
            prepare=True,
        )

    def _index_messages(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
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

    def _index_artifacts(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
        ids, owners, queries, drafts = columns(rows, 4)
        vectors = self.embedder.embed(queries + drafts)
        blended = [blend(q, d, QUERY_WEIGHT) for q, d in zip(vectors[: len(queries)], vectors[len(queries) :], strict=True)]
        self._insert(cur, "artifacts", ids, owners, [vector_literal(v) for v in blended])

    @handles(Conversation.Started)
    def started(self, batch: Batch, e: Conversation.Started, _: int) -> None:
        batch.append(self.new_conversations, (e.originator_id, e.owner, e.title))

    @handles(Conversation.Retitled)
    def retitled(self, batch: Batch, e: Conversation.Retitled, _: int) -> None:
        batch.accumulate(self.titles, e.originator_id, e.title)

    @handles(Conversation.MessageAdded)
    def message_added(self, batch: Batch, e: Conversation.MessageAdded, _: int) -> None:
        batch.append(self.new_messages, (e.message_id, e.originator_id, e.content[:MAX_EMBEDDED_CHARS]))

    @handles(Artifact.Stored)
    def artifact_stored(self, batch: Batch, e: Artifact.Stored, _: int) -> None:
        batch.append(self.new_artifacts, (e.originator_id, e.owner, e.query, e.draft[:MAX_EMBEDDED_CHARS]))
