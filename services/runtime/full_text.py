"""Postgres full text over the search read model, the pieces every search query shares.

The caller's owner lexeme is ANDed into the match so the GIN index returns only the
caller's documents (the owner column check is the guarantee, the lexeme the speed);
ts_rank then scores just those, and ts_headline runs only on the page returned.
"""

from __future__ import annotations

from typing import Any

from psycopg.sql import SQL, Composable, Composed, Identifier

from services.runtime.read_models import Queries

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


async def ranked_search(queries: Queries, statement: Composed, user: str, words: str, limit: int) -> dict[str, Any]:
    """Run a search statement built from the pieces above; its hits numbered from 1."""
    rows = await queries.fetch_all(
        statement, {"language": queries.language, "q": words, "user": user, "limit": limit}
    )
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    return {"items": rows, "query": words}
