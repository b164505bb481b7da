"""The default retriever of job requests: Postgres full text over the caller's messages and
artifact drafts (the ports/retriever.py port), best first."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from chronicle_contract.errors import ChronicleError

from domain.job import Chunk
from services.ports.read_models import Queries

MAX_CHUNK_TEXT = 4_000

# The content's words (its lexemes, as the caller's blind terms) ORed: websearch_to_tsquery
# would AND a long request into nothing. Matched against the caller's messages and artifact
# queries and drafts (sealed: their text is opened here), best first. Source ids, when given, narrow it to
# those conversations and artifacts.
LEXEMES = "SELECT tsvector_to_array(to_tsvector(%s::regconfig, %s)) AS lexemes"
CAPTURE = """
WITH q AS (SELECT %(words)s::tsquery AS words)
SELECT * FROM (
    SELECT m.id::text AS chunk_id, m.conversation_id::text AS source_id, m.content AS sealed, NULL::bytea AS draft,
           ts_rank(m.tsv, q.words) AS score
    FROM rm_search.messages m, q
    WHERE m.tsv @@ q.words AND m.owner = %(user)s
      AND (%(all)s OR m.conversation_id::text = ANY(%(sources)s))
    UNION ALL
    SELECT a.id::text, a.id::text, a.query, a.draft, ts_rank(s.tsv, q.words)
    FROM rm_search.artifacts s JOIN rm_artifacts.artifacts a ON a.id = s.id, q
    WHERE s.tsv @@ q.words AND s.owner = %(user)s AND (%(all)s OR s.id::text = ANY(%(sources)s))
) found
ORDER BY score DESC, chunk_id LIMIT %(limit)s
"""



class FullTextRetriever:
    """The default retriever: Postgres full text over the caller's own stored content."""

    reads = ["search", "artifacts"]

    def __init__(self, queries: Queries):
        self.queries = queries
        self.embedding_version = f"postgres-fts:{queries.language}"

    async def capture(self, user: str, content: str, source_ids: list[str], limit: int) -> list[Chunk]:
        try:
            rows = await self._search(user, content, source_ids, limit)
        except psycopg.errors.UndefinedTable:
            raise ChronicleError("unavailable", "the search read model is still being built; retry shortly") from None
        now = datetime.now(UTC)
        return [Chunk(**row, embedding_version=self.embedding_version, captured_at=now) for row in rows]

    async def _search(self, user: str, content: str, source_ids: list[str], limit: int) -> list[dict[str, Any]]:
        seal = await self.queries.sealing.of(user)
        found = await self.queries.fetch_one(LEXEMES, (self.queries.language, content))
        if seal is None or not found or not found["lexemes"]:
            return []
        words = " | ".join(f"'{term}'" for term in seal.terms(found["lexemes"]))  # (terms are hex)
        rows = await self.queries.fetch_all(
            CAPTURE,
            {
                "words": words, "user": user, "all": not source_ids, "sources": source_ids, "limit": limit,
            },
        )
        for row in rows:
            text, draft = seal.open(row.pop("sealed")) or "", row.pop("draft")
            if draft is not None:  # (an artifact: its query, then its draft)
                text += "\n" + (seal.open(draft) or "")
            row["text"] = text[:MAX_CHUNK_TEXT]
        return rows
