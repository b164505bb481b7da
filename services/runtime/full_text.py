"""Search over the search read model (Postgres full text) and, where it is kept, the
semantic one (pgvector): the pieces every search query shares.

Full text through a blind index: the search read model keeps each document's tsvector with
every lexeme replaced by its owner's blind term (adapters/read_side/sealing.py), and a
search asks Postgres for the words' tsquery (`websearch_to_tsquery`, a statement that
writes nothing), makes each lexeme the caller's blind term, and matches that. Terms are
keyed by the owner's key, so the GIN index yields only the caller's documents (the owner
column check is the guarantee); ts_rank scores them as it scored the plain lexemes
(positions and weights are kept). Snippets are made after the page's texts are opened
(`headlines`: ts_headline over the plain text, again a statement that writes nothing).

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
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.sql import SQL, Composed, Identifier

from services.ports.read_models import Queries
from services.ports.sealing import UserSeal

log = logging.getLogger(__name__)

FUSION_K = 60  # reciprocal rank fusion's constant (the usual one: a rank's weight fades slowly)
CANDIDATES = 100  # hits each half hands to the fusion (the largest page)

# A CTE named `query`: the words asked for, as the caller's blind terms.
QUERY = SQL("query AS (SELECT %(blind)s::tsquery AS words)")
HEADLINE_OPTIONS = "StartSel=<mark>, StopSel=</mark>, MaxWords=30, MinWords=10"
# Snippets of opened texts, in the order given.
HEADLINES = SQL(
    "SELECT ts_headline(%(language)s::regconfig, d.text, websearch_to_tsquery(%(language)s::regconfig, %(q)s),"
    " %(options)s) AS snippet FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS d(text, n) ORDER BY d.n"
)


def mine_matching(alias: str) -> Composed:
    """The rows of the search table `alias` that are the caller's and match the words."""
    return SQL("{a}.tsv @@ query.words AND {a}.owner = %(user)s AND numnode(query.words) > 0").format(
        a=Identifier(alias)
    )


async def blind_words(queries: Queries, seal: UserSeal, words: str) -> str:
    """The words' tsquery with each lexeme made the caller's blind term."""
    return seal.blind_query(await queries.tsquery(words))


async def headlines(queries: Queries, words: str, texts: list[str]) -> list[str]:
    """A snippet of each text (opened) with the words marked, as the search read model's language marks them."""
    if not texts:
        return []
    rows = await queries.fetch_all(
        HEADLINES, {"language": queries.language, "q": words, "options": HEADLINE_OPTIONS, "texts": texts}
    )
    return [row["snippet"] for row in rows]


def fused(key: str) -> Composed:
    """A CTE named `fused`: the best %(limit)s of the CTEs `text_hits` and `vector_hits`
    (columns `key`, r: the rank), by reciprocal rank fusion, with the halves that found each."""
    return SQL("""fused AS (
            SELECT {key}, sum(1.0 / ({k} + r)) AS score, array_agg(how ORDER BY how DESC) AS matched_by
            FROM (SELECT {key}, r, 'text' AS how FROM text_hits
                  UNION ALL SELECT {key}, r, 'semantic' FROM vector_hits) halves
            GROUP BY {key} ORDER BY score DESC LIMIT %(limit)s
        )""").format(key=SQL(key), k=SQL(str(FUSION_K)))


Opening = Callable[[Queries, UserSeal, str, list[dict[str, Any]]], Awaitable[None]]


async def ranked_search(
    queries: Queries, statement: Composed, user: str, words: str, limit: int, hybrid: Composed | None = None,
    opening: Opening | None = None,
) -> dict[str, Any]:
    """Run a search statement built from the pieces above, the `hybrid` one when the words
    could be embedded; its hits, opened by `opening` (given the caller's seal and the
    words), numbered from 1. A caller without a key has nothing to find."""
    seal = await queries.sealing.of(user)
    if seal is None:
        return {"items": [], "query": words}
    blind = await blind_words(queries, seal, words)
    params = {"language": queries.language, "q": words, "user": user, "limit": limit, "blind": blind}
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
    if opening is not None:
        await opening(queries, seal, words, rows)
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    return {"items": rows, "query": words}
