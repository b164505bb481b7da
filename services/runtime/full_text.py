"""Search over the search read model (Postgres full text) and, where it is kept, the
semantic one (pgvector): the pieces every search query shares.

Full text: the caller's owner lexeme is ANDed into the match so the GIN index returns only
the caller's documents (the owner column check is the guarantee, the lexeme the speed);
ts_rank then scores just those, and ts_headline runs only on the page returned.

Hybrid: the words are embedded too, the caller's nearest documents (at least
`min_similarity` alike) are ranked by distance, and the two rankings are fused by
reciprocal rank (each hit scores 1/(FUSION_K + its rank) in every ranking it appears in),
so a document both halves find comes first and either half alone still finds. Each hit
says which half found it (`matched_by`). Without the semantic read model, or when the
embedder fails, a search is full text alone.

A search's `min_position` is waited for by the full-text half only: the semantic read model
follows the log on its own thread, milliseconds behind with the built-in embedder, and as
far behind as an embeddings endpoint is slow or away (searches must not wait on that).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.sql import SQL, Composable, Composed, Identifier

from services.ports.read_models import Queries

log = logging.getLogger(__name__)

FUSION_K = 60  # reciprocal rank fusion's constant (the usual one: a rank's weight fades slowly)
CANDIDATES = 100  # hits each half hands to the fusion (the largest page)

# A CTE named `query`: the words asked for and the caller's owner lexeme.
QUERY = SQL(
    "query AS (SELECT websearch_to_tsquery(%(language)s::regconfig, %(q)s) AS words,"
    " quote_literal('OWNER ' || md5(%(user)s))::tsquery AS mine)"
)


def mine_matching(alias: str) -> Composed:
    """The rows of the search table `alias` that are the caller's and match the words."""
    return SQL("{a}.tsv @@ (query.words && query.mine) AND {a}.owner = %(user)s AND numnode(query.words) > 0").format(
        a=Identifier(alias)
    )


def headline(document: Composable) -> Composed:
    return SQL(
        "ts_headline(%(language)s::regconfig, {document}, query.words,"
        " 'StartSel=<mark>, StopSel=</mark>, MaxWords=30, MinWords=10') AS snippet"
    ).format(document=document)


def fused(key: str) -> Composed:
    """A CTE named `fused`: the best %(limit)s of the CTEs `text_hits` and `vector_hits`
    (columns `key`, r: the rank), by reciprocal rank fusion, with the halves that found each."""
    return SQL("""fused AS (
            SELECT {key}, sum(1.0 / ({k} + r)) AS score, array_agg(how ORDER BY how DESC) AS matched_by
            FROM (SELECT {key}, r, 'text' AS how FROM text_hits
                  UNION ALL SELECT {key}, r, 'semantic' FROM vector_hits) halves
            GROUP BY {key} ORDER BY score DESC LIMIT %(limit)s
        )""").format(key=SQL(key), k=SQL(str(FUSION_K)))


async def ranked_search(
    queries: Queries, statement: Composed, user: str, words: str, limit: int, hybrid: Composed | None = None
) -> dict[str, Any]:
    """Run a search statement built from the pieces above, the `hybrid` one when the words
    could be embedded; its hits numbered from 1."""
    params = {"language": queries.language, "q": words, "user": user, "limit": limit}
    vector = await queries.embed(words) if hybrid is not None else None
    rows = None
    if vector is not None and hybrid is not None:
        assert queries.semantic is not None
        # (cosine distance = 1 - similarity; a NaN distance, of an all-zero vector, is never <= anything)
        semantic = {"vector": vector, "candidates": CANDIDATES, "max_distance": 1 - queries.semantic.min_similarity}
        try:
            rows = await queries.fetch_all(hybrid, params | semantic)
        except (psycopg.errors.DataException, psycopg.errors.UndefinedTable):
            # The read model holds another embedder's vectors (another size), or is not
            # there yet: it is being built for the embedder configured now. Full text
            # answers meanwhile.
            log.warning("semantic read model not ready for this embedder; full text only")
    if rows is None:
        rows = await queries.fetch_all(statement, params)
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    return {"items": rows, "query": words}
