"""Query handlers of generation artifacts, scoped to the caller like every query."""

from __future__ import annotations

from typing import Any

from chronicle_contract.artifacts import (
    ArtifactComparison,
    ArtifactHits,
    ArtifactLineage,
    ArtifactLineageReply,
    ArtifactSummaryView,
    ArtifactView,
    ByExample,
    CompareArtifacts,
    GetArtifact,
    GetVariations,
    Influence,
    Influenced,
    ListArtifacts,
    RagInfluence,
    SearchArtifacts,
    VariationSetView,
)
from chronicle_contract.base import Page
from psycopg.sql import SQL, Composed

from domain.layout import Shape, component_overlap, similarity
from services.ports.read_models import Queries, not_found
from services.ports.sealing import UserSeal, tag_terms
from services.runtime.full_text import QUERY, fused, headlines, mine_matching, ranked_search
from services.runtime.paging import Order, page_of
from services.runtime.replies import Wire

SUMMARY_COLUMNS = (
    "id, session_id, parent_id, generation, origin, query, model, provider, tags, variation_set_id,"
    " variation_index, node_count, depth, tokens, created_at, updated_at"
)
DETAIL_COLUMNS = (
    SUMMARY_COLUMNS + ", layout, draft, temperature, stats, rag_examples, refinement, component_types, previews"
)
NEWEST_ARTIFACTS = Order("artifacts", "timestamptz")
BEST_INFLUENCED = Order("by_example", "double precision")
MAX_DESCENDANTS = 5_000  # rows one lineage reply holds (a 1,000-long chain fits many times over)


def lineage_walk(next_artifact: str, order_and_limit: str) -> Composed:
    """Walks parent links within the owner's artifacts from %(id)s, up to %(depth)s steps;
    `next_artifact` joins the walk's row `w` to the next one, `n` (up: n is w's parent;
    down: n is w's child). The two walks differ in nothing else."""
    return SQL("""
WITH RECURSIVE walk(id, parent_id, generation, variation_set_id, removed, created_at, distance) AS (
    SELECT a.id, a.parent_id, a.generation, a.variation_set_id, a.removed, a.created_at, 0
    FROM rm_lineage.artifacts a WHERE a.id = %(id)s AND a.owner = %(user)s
    UNION ALL
    SELECT n.id, n.parent_id, n.generation, n.variation_set_id, n.removed, n.created_at, w.distance + 1
    FROM walk w JOIN rm_lineage.artifacts n ON {next_artifact} AND n.owner = %(user)s
    WHERE w.distance < %(depth)s
)
SELECT * FROM walk WHERE distance > 0 {order_and_limit}
""").format(next_artifact=SQL(next_artifact), order_and_limit=SQL(order_and_limit))


ANCESTORS = lineage_walk("n.id = w.parent_id", "ORDER BY distance")
DESCENDANTS = lineage_walk("n.parent_id = w.id", "ORDER BY distance, created_at, id LIMIT %(limit)s")


def shape_from(row: dict[str, Any]) -> Shape:
    return Shape(node_count=row["node_count"], depth=row["depth"], type_counts=row["component_types"])


async def get(queries: Queries, user: str, q: GetArtifact) -> Wire[ArtifactView]:
    row = await queries.fetch_one(
        "SELECT " + DETAIL_COLUMNS + ", owner FROM rm_artifacts.artifacts WHERE id = %s AND owner = %s",
        (q.artifact_id, user),
    )
    seal = await queries.sealing.of(user) if row is not None else None
    if row is None or seal is None:
        raise not_found("artifact", q.artifact_id)
    del row["owner"]
    return Wire(opened_artifact(seal, row))


SEALED_TEXT = ("query", "draft", "refinement")
SEALED_JSON = ("layout", "rag_examples", "tags", "members")


def opened_artifact(seal: UserSeal, row: dict[str, Any]) -> dict[str, Any]:
    """The sealed columns an artifact or variation set row has, opened in place."""
    for name in SEALED_TEXT:
        if name in row:
            row[name] = seal.open(row[name])
    for name in SEALED_JSON:
        if name in row:
            row[name] = seal.open_json(row[name])
    return row


async def opened_rows(queries: Queries, user: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The caller's rows opened (none when the caller has no key)."""
    seal = await queries.sealing.of(user) if rows else None
    return [opened_artifact(seal, row) for row in rows] if seal is not None else []


async def list_artifacts(queries: Queries, user: str, q: ListArtifacts) -> Wire[Page[ArtifactSummaryView]]:
    # Only the filters given reach the WHERE clause, so each shape gets its own index plan.
    conditions = [SQL("owner = %(user)s")]
    if q.session_id is not None:
        conditions.append(SQL("session_id = %(session)s"))
    if q.parent_id is not None:
        conditions.append(SQL("parent_id = %(parent)s"))
    seal = await queries.sealing.of(user)
    if q.tags:
        conditions.append(SQL("tag_terms @> %(tags)s::text[]"))
    inner = SQL(
        "SELECT " + SUMMARY_COLUMNS + ", created_at AS page_key, id AS page_id FROM rm_artifacts.artifacts WHERE {where}"
    ).format(where=SQL(" AND ").join(conditions))
    terms = tag_terms(seal, q.tags) if seal is not None and q.tags else []
    params = {"user": user, "session": q.session_id, "parent": q.parent_id, "tags": terms}
    page = await page_of(queries, user, NEWEST_ARTIFACTS, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor)
    page["items"] = await opened_rows(queries, user, page["items"])
    return Wire(page)


# Where a hit's snippet comes from: the query, then the start of the draft (both opened).
ARTIFACT_SNIPPET = SQL("a.draft AS snippet")
SNIPPET_DRAFT = 20_000

ARTIFACT_HITS_TEXT = SQL("""
    WITH {query},
    best AS (
        SELECT s.id, s.created_at, ts_rank(s.tsv, query.words) AS score
        FROM rm_search.artifacts s, query WHERE {mine_s}
        ORDER BY score DESC, s.created_at DESC LIMIT %(limit)s
    )
    SELECT best.id AS artifact_id, a.query, best.created_at, {snippet}, ARRAY['text'] AS matched_by
    FROM best JOIN rm_artifacts.artifacts a ON a.id = best.id
    ORDER BY best.score DESC, best.created_at DESC
""").format(query=QUERY, mine_s=mine_matching("s"), snippet=ARTIFACT_SNIPPET)

ARTIFACT_HITS_HYBRID = SQL("""
    WITH {query},
    text_hits AS (
        SELECT s.id, row_number() OVER (ORDER BY ts_rank(s.tsv, query.words) DESC, s.created_at DESC) AS r
        FROM rm_search.artifacts s, query WHERE {mine_s}
        ORDER BY r LIMIT %(candidates)s
    ),
    near AS (
        SELECT v.id, v.embedding <=> %(vector)s::vector AS distance
        FROM rm_semantic.artifacts v WHERE v.owner = %(user)s
        ORDER BY distance LIMIT %(candidates)s
    ),
    vector_hits AS (
        SELECT id, row_number() OVER (ORDER BY distance) AS r FROM near WHERE distance <= %(max_distance)s
    ),
    {fused}
    SELECT f.id AS artifact_id, a.query, a.created_at, {snippet}, f.matched_by
    FROM fused f JOIN rm_artifacts.artifacts a ON a.id = f.id
    ORDER BY f.score DESC, a.created_at DESC
""").format(
    query=QUERY, mine_s=mine_matching("s"), fused=fused("id"), snippet=ARTIFACT_SNIPPET,
)


async def search(queries: Queries, user: str, q: SearchArtifacts) -> Wire[ArtifactHits]:
    """Artifacts whose query or draft match the words or mean much the same, best first."""
    return Wire(await ranked_search(
        queries, ARTIFACT_HITS_TEXT, user, q.q, q.limit, hybrid=ARTIFACT_HITS_HYBRID, opening=open_hits
    ))


async def open_hits(queries: Queries, seal: UserSeal, words: str, hits: list[dict[str, Any]]) -> None:
    """Each hit's query opened, and its snippet made from the query and the start of the draft."""
    texts = []
    for hit in hits:
        hit["query"] = seal.open(hit["query"]) or ""
        texts.append(hit["query"] + "\n" + (seal.open(hit["snippet"]) or "")[:SNIPPET_DRAFT])
    for hit, snippet in zip(hits, await headlines(queries, words, texts), strict=True):
        hit["snippet"] = snippet


async def lineage(queries: Queries, user: str, q: ArtifactLineage) -> Wire[ArtifactLineageReply]:
    found = await queries.fetch_one(
        "SELECT removed FROM rm_lineage.artifacts WHERE id = %s AND owner = %s", (q.artifact_id, user)
    )
    if found is None or found["removed"]:
        raise not_found("artifact", q.artifact_id)
    params = {"id": q.artifact_id, "user": user, "depth": q.depth, "limit": MAX_DESCENDANTS + 1}
    ancestors = await queries.fetch_all(ANCESTORS, params) if q.direction != "descendants" else []
    descendants = await queries.fetch_all(DESCENDANTS, params) if q.direction != "ancestors" else []
    return Wire({
        "artifact_id": q.artifact_id,
        "ancestors": ancestors,
        "descendants": descendants[:MAX_DESCENDANTS],
        "truncated": len(descendants) > MAX_DESCENDANTS,
    })


async def rag_influence(queries: Queries, user: str, q: RagInfluence) -> Wire[Influence]:
    row = await queries.fetch_one(
        "SELECT rag_examples FROM rm_artifacts.artifacts WHERE id = %s AND owner = %s", (q.artifact_id, user)
    )
    opened = await opened_rows(queries, user, [row] if row is not None else [])
    if not opened:
        raise not_found("artifact", q.artifact_id)
    return Wire({"artifact_id": q.artifact_id, "examples": opened[0]["rag_examples"]})


async def by_example(queries: Queries, user: str, q: ByExample) -> Wire[Page[Influenced]]:
    inner = SQL(
        "SELECT artifact_id, session_id, score, created_at, score AS page_key, artifact_id AS page_id"
        " FROM rm_lineage.rag_links WHERE owner = %(user)s AND example_id = %(example)s"
    )
    params = {"user": user, "example": q.example_id}
    return Wire(await page_of(queries, user, BEST_INFLUENCED, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor))


async def compare(queries: Queries, user: str, q: CompareArtifacts) -> Wire[ArtifactComparison]:
    rows = await queries.fetch_all(
        "SELECT id, layout, node_count, depth, size_bytes, component_types FROM rm_artifacts.artifacts"
        " WHERE id = ANY(%s) AND owner = %s",
        (q.artifact_ids, user),
    )
    by_id = {row["id"]: row for row in await opened_rows(queries, user, rows)}
    for artifact_id in q.artifact_ids:
        if artifact_id not in by_id:
            raise not_found("artifact", artifact_id)
    ordered = [by_id[i] for i in q.artifact_ids]
    pairs = [
        {
            "a": first["id"],
            "b": second["id"],
            "structural_similarity": round(similarity(first["layout"], second["layout"]), 4),
            "component_overlap": round(component_overlap(shape_from(first), shape_from(second)), 4),
        }
        for n, first in enumerate(ordered)
        for second in ordered[n + 1 :]
    ]
    artifacts = [
        {**{k: row[k] for k in ("id", "node_count", "depth", "size_bytes")},
         "component_variety": len(row["component_types"]), "component_types": row["component_types"]}
        for row in ordered
    ]
    return Wire({"artifacts": artifacts, "pairs": pairs})


async def variations(queries: Queries, user: str, q: GetVariations) -> Wire[VariationSetView]:
    row = await queries.fetch_one(
        "SELECT id, session_id, base_artifact_id, query, model, style_variety, diversity, rankings, members,"
        " created_at FROM rm_artifacts.variation_sets WHERE id = %s AND owner = %s",
        (q.variation_set_id, user),
    )
    opened = await opened_rows(queries, user, [row] if row is not None else [])
    if not opened:
        raise not_found("variation set", q.variation_set_id)
    return Wire(opened[0])
