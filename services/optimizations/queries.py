"""Query handlers of optimization history, scoped to the caller like every query."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.base import Page
from chronicle_contract.errors import ChronicleError
from chronicle_contract.optimizations import (
    CandidateLineage,
    CompareOptimizations,
    Comparison,
    GetOptimization,
    HistoryPage,
    Lineage,
    ListOptimizations,
    OptimizationHistory,
    OptimizationView,
    ParetoFront,
    ParetoQuery,
)
from psycopg.sql import SQL

from domain.optimization import Direction, pareto_front
from services.ports.read_models import Queries, not_found
from services.ports.sealing import UserSeal, field_term
from services.runtime.paging import Order, page_of
from services.runtime.replies import Wire

SUMMARY = (
    "SELECT id AS optimization_id, name, project, dataset, optimizer, direction, round_count AS rounds,"
    " trial_count AS trials, best_score, best_candidate, best_trial_index, stopped, stop_reason, invalid_trials,"
    " created_at, updated_at FROM rm_optimizations.optimizations"
)
MAX_ROUNDS_PER_PAGE = 500
MAX_TRIALS_PER_PART = 5_000
BEST_SCORES = {
    direction: "SELECT candidate_id, " + best + "(score) AS best FROM rm_optimizations.trials"
    " WHERE optimization_id = %s AND candidate_id = ANY(%s) GROUP BY candidate_id"
    for direction, best in (("maximize", "max"), ("minimize", "min"))
}

REPLY_BUDGET = 768 * 1024  # bytes of history per reply: NATS's default max payload is 1 MiB
PAGES_PLANNED_AHEAD = 8  # cursors a reply gives for the pages after it, to be fetched at once
# The trials of round r (they are contiguous in trial_index: rounds run one after another).
IN_ROUND = "t.optimization_id = %(id)s AND t.trial_index >= r.first_trial_index" \
    " AND t.trial_index < r.first_trial_index + r.trial_count"
# Round r's trials read along the primary key. Asking for that order keeps the planner on
# it when the table's statistics are stale (autovacuum off, the table grown since it was
# analyzed): another index then looks as cheap and reads every trial of the optimization
# for each round. OFFSET 0 keeps the subquery (and its order) from being folded away.
ROUND_TRIALS_IN_ORDER = f"""SELECT t.trial_index, t.score, t.candidate, t.entry FROM rm_optimizations.trials t
    WHERE {IN_ROUND} ORDER BY t.trial_index OFFSET 0"""
# The caller's optimization (o) and its rounds after a cursor (r), each with its best trial
# so far when it is still open (best); no rows at all when the optimization is not the
# caller's, so a page needs no look-up of its own first.
ROUNDS_AFTER = f"""
FROM rm_optimizations.optimizations o
JOIN (
    SELECT *, sum(trial_count) OVER (ORDER BY round_index) - trial_count AS trials_before,
           count(*) OVER () AS remaining
    FROM rm_optimizations.rounds WHERE optimization_id = %(id)s AND round_index > %(after)s
) r ON o.id = %(id)s AND o.owner = %(user)s AND o.direction IS NOT NULL
LEFT JOIN LATERAL (  -- the open round's test inside: an ended round's trials are not read at all
    SELECT score, candidate FROM ({ROUND_TRIALS_IN_ORDER}) t
    WHERE r.ended_at IS NULL AND score IS NOT NULL
    ORDER BY CASE o.direction WHEN 'minimize' THEN score ELSE -score END, trial_index LIMIT 1
) best ON true
"""
# A round's columns, its fields once opened (round_fields). An open round's best is its best
# trial so far (the first to reach it).
ROUND_COLUMNS = """o.direction, o.invalid_trials, r.round_index, r.id AS round_id, r.first_trial_index, r.trial_count,
    r.remaining, r.candidates, r.stop_reason, r.stopped, r.best_so_far, r.started_at, r.ended_at, r.start_extras,
    r.end_extras, r.corrected_best_score, r.corrected_best_candidate, r.corrected_best_so_far,
    CASE WHEN r.ended_at IS NULL THEN best.score ELSE r.best_score END AS best_score,
    CASE WHEN r.ended_at IS NULL THEN best.candidate ELSE r.best_candidate END AS best_candidate"""

# A page of rounds: each round's columns and its trials as one sealed JSON array, the one the
# projection joined when the round ended (an open round's entries, to be joined here): nothing
# is parsed per trial, and the reply passes both through unparsed once opened. One statement,
# one snapshot: a round's trial_count and its trial rows agree (the projection writes both in
# one transaction).
HISTORY_PAGE = f"""
SELECT {ROUND_COLUMNS},
    CASE WHEN %(with_trials)s THEN r.trials END AS trials,
    CASE WHEN %(with_trials)s AND r.ended_at IS NULL THEN
        (SELECT array_agg(t.entry ORDER BY t.trial_index) FROM ({ROUND_TRIALS_IN_ORDER}) t) END AS entries
{ROUNDS_AFTER}
WHERE r.trials_before < %(max_trials)s AND r.round_index <= %(until)s
ORDER BY r.round_index LIMIT {MAX_ROUNDS_PER_PAGE}
"""
# What each round after a cursor adds to a reply, in bytes (its fields once opened, its
# trials' from the projection's tally), enough rounds for the pages planned ahead.
ROUND_SIZES = f"""
SELECT {ROUND_COLUMNS}, r.trial_bytes
{ROUNDS_AFTER}
ORDER BY r.round_index LIMIT {MAX_ROUNDS_PER_PAGE * (PAGES_PLANNED_AHEAD + 1)}
"""
# The trials of one round after a trial index: for a round too big for one reply, sent
# over several pages.
ROUND_TRIALS = """
SELECT t.trial_index, t.entry FROM rm_optimizations.trials t
WHERE t.optimization_id = %(id)s AND t.trial_index > %(after_trial)s AND t.trial_index < %(end)s
ORDER BY t.trial_index LIMIT %(limit)s
"""
LAST_ROUND = 2**31 - 1


def round_fields(seal: UserSeal, row: dict[str, Any]) -> dict[str, Any]:
    """A round's fields, its sealed columns opened. While the optimization has invalid
    trials, the round's bests without them too."""
    fields = {
        "round_index": row["round_index"], "round_id": row["round_id"],
        "candidates": [] if row["candidates"] is None else seal.open_json(row["candidates"]),
        "best_score": row["best_score"], "best_candidate": seal.open_json(row["best_candidate"]),
        "stop_reason": seal.open(row["stop_reason"]), "stopped": row["stopped"], "best_so_far": row["best_so_far"],
        "timestamp": row["started_at"], "ended_at": row["ended_at"],
        "extra": {**(seal.open_json(row["start_extras"]) or {}), **(seal.open_json(row["end_extras"]) or {})},
    }
    if row["invalid_trials"]:
        fields.update(
            corrected_best_score=row["corrected_best_score"],
            corrected_best_candidate=seal.open_json(row["corrected_best_candidate"]),
            corrected_best_so_far=row["corrected_best_so_far"],
        )
    return fields


def fields_size(fields: dict[str, Any]) -> int:
    """A round's fields' bytes in a reply."""
    return len(orjson.dumps(fields))


def opened_round(seal: UserSeal, row: dict[str, Any], with_trials: bool = True) -> dict[str, Any]:
    """A history page's row with its fields opened (and its trials array as JSON bytes, when
    read): an ended round's array as the projection joined it, an open round's joined here.
    The array stays bytes to the reply (a few hundred KB a page: each copy of it counts)."""
    trials = None
    if with_trials and row["ended_at"] is not None:
        trials = seal.open_bytes(row["trials"]) or b"[]"
    elif with_trials:
        trials = b"[" + b",".join(seal.open_bytes(entry) or b"" for entry in row["entries"] or []) + b"]"
    fields = round_fields(seal, row)
    return {
        "direction": row["direction"], "round_index": row["round_index"], "first_trial_index": row["first_trial_index"],
        "trial_count": row["trial_count"], "remaining": row["remaining"], "fields": fields,
        "fields_size": fields_size(fields), "trials": trials,
    }


def round_json(fields: dict[str, Any], trials: bytes, complete: bool) -> dict[str, Any]:
    """A round for the reply: its fields with `complete` and the trials array (JSON bytes, written as they are)."""
    return {**fields, "complete": complete, "trials": orjson.Fragment(trials)}


def size_of(row: dict[str, Any]) -> int:
    return int(row["fields_size"]) + len(row["trials"])


def plan_pages(
    rounds: list[dict[str, Any]], after_round: int, max_trials: int, first_budget: int | None = None
) -> list[tuple[int, int]]:
    """The pages `history` cuts from here, as (after_round, until_round), from each round's
    size: the first (of up to `first_budget` bytes) and up to PAGES_PLANNED_AHEAD more,
    ending before a round too big for one reply (that one comes in parts, one by one)."""
    pages: list[tuple[int, int]] = []
    budget = REPLY_BUDGET if first_budget is None else first_budget
    start, last, size, trials, count = after_round, after_round, 0, 0, 0
    for row in rounds:
        if row["size"] > REPLY_BUDGET:
            break
        if count and (size + row["size"] > budget or trials >= max_trials or count >= MAX_ROUNDS_PER_PAGE):
            pages.append((start, last))
            if len(pages) > PAGES_PLANNED_AHEAD:
                return pages
            start, size, trials, count, budget = last, 0, 0, 0, REPLY_BUDGET
        size, trials, count, last = size + row["size"], trials + row["trial_count"], count + 1, row["round_index"]
    if count:
        pages.append((start, last))
    return pages


def opened_summary(seal: UserSeal, row: dict[str, Any]) -> dict[str, Any]:
    """A summary row's sealed columns opened, in place."""
    for name in ("name", "project", "dataset", "optimizer", "stop_reason"):
        row[name] = seal.open(row[name])
    row["best_candidate"] = seal.open_json(row["best_candidate"])
    return row


async def summary(queries: Queries, user: str, optimization_id: UUID) -> dict[str, Any]:
    row = await queries.fetch_one(
        SUMMARY + " WHERE id = %s AND owner = %s AND direction IS NOT NULL", (optimization_id, user)
    )
    seal = await queries.sealing.of(user) if row is not None else None
    if row is None or seal is None:
        raise not_found("optimization", optimization_id)
    return opened_summary(seal, row)


async def get(queries: Queries, user: str, q: GetOptimization) -> Wire[OptimizationView]:
    return Wire(await summary(queries, user, q.optimization_id))


async def list_optimizations(queries: Queries, user: str, q: ListOptimizations) -> Wire[Page[OptimizationView]]:
    inner = SQL(
        SUMMARY.replace("SELECT ", "SELECT created_at AS page_key, id AS page_id, ", 1)
        + " WHERE owner = %(user)s AND direction IS NOT NULL"
        " AND (%(project)s::text IS NULL OR project_term = %(project)s)"
        " AND (%(optimizer)s::text IS NULL OR optimizer_term = %(optimizer)s)"
        " AND (%(stopped)s::boolean IS NULL OR stopped = %(stopped)s)"
    )
    seal = await queries.sealing.of(user)
    # Project and optimizer match their blind terms (without a key the user has no rows).
    terms = {
        name: None if value is None else field_term(seal, name, value) if seal is not None else ""
        for name, value in (("project", q.project), ("optimizer", q.optimizer))
    }
    params = {**terms, "stopped": q.stopped, "user": user}
    page = await page_of(queries, user, NEWEST_OPTIMIZATIONS, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor)
    page["items"] = [opened_summary(seal, row) for row in page["items"] if seal is not None]
    return Wire(page)


NEWEST_OPTIMIZATIONS = Order("optimizations", "timestamptz")


async def history(queries: Queries, user: str, q: OptimizationHistory) -> Wire[HistoryPage]:
    """A page of rounds that fits one reply. A round too big for a reply comes over several
    pages, its parts marked `complete: false` but the last (the client joins them). A page
    asked for without `until_round` also plans the pages after it (`planned`, cut by the
    same rules from each round's size): a client fetches those ahead, not one by one."""
    after_round = -1 if q.after_round is None else q.after_round
    params = {"id": q.optimization_id, "user": user, "after": after_round, "max_trials": q.max_trials}
    reply: dict[str, Any] = {"optimization_id": q.optimization_id, "next_after_trial": None, "planned": []}
    seal = await queries.sealing.of(user)
    if seal is None:  # (no key: nothing of theirs)
        raise not_found("optimization", q.optimization_id)
    if q.after_trial is not None:
        return Wire({**reply, **await split_round(queries, seal, params, q.after_trial)})
    until = q.until_round
    if until is None:
        sizes = [
            {"round_index": row["round_index"], "trial_count": row["trial_count"],
             "size": fields_size(round_fields(seal, row)) + row["trial_bytes"] + row["trial_count"]}
            for row in await queries.fetch_all(ROUND_SIZES, params, binary=True)
        ]
        pages = plan_pages(sizes, after_round, q.max_trials)
        if len(pages) > 1 and q.after_round is None:  # the history's first page: small, to bring the plan sooner
            pages = plan_pages(sizes, after_round, q.max_trials, first_budget=REPLY_BUDGET // 8)
        if pages:
            until = pages[0][1]
            reply["planned"] = [{"after_round": start, "until_round": end} for start, end in pages[1:]]
    read = await queries.fetch_all(
        HISTORY_PAGE, {**params, "with_trials": True, "until": LAST_ROUND if until is None else until}, binary=True
    )
    if not read:  # not the caller's, or no rounds after the cursor
        return Wire({**reply, **await no_rounds(queries, user, q.optimization_id)})
    rows = [opened_round(seal, row) for row in read]
    if size_of(rows[0]) > REPLY_BUDGET:
        return Wire({**reply, **await split_round(queries, seal, params, None)})
    taken: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        row_size = size_of(row)
        if taken and size + row_size > REPLY_BUDGET:
            break
        taken.append(row)
        size += row_size
    return Wire({
        **reply,
        "direction": rows[0]["direction"],
        "rounds": [round_json(row["fields"], row["trials"], True) for row in taken],
        "next_after_round": taken[-1]["round_index"] if rows[0]["remaining"] > len(taken) else None,
    })


async def no_rounds(queries: Queries, user: str, optimization_id: UUID) -> dict[str, Any]:
    """A page without rounds, once the optimization is known to be the caller's (else not_found)."""
    return {"direction": (await summary(queries, user, optimization_id))["direction"], "rounds": [],
            "next_after_round": None}


async def split_round(
    queries: Queries, seal: UserSeal, params: dict[str, Any], after_trial: int | None
) -> dict[str, Any]:
    """The next part of the round after `params["after"]`: as many of its trials as fit."""
    metas = await queries.fetch_all(HISTORY_PAGE, {**params, "with_trials": False, "max_trials": 1, "until": LAST_ROUND})
    if not metas:  # not the caller's, or the round is gone (its owner erased)
        return await no_rounds(queries, params["user"], params["id"])
    meta = opened_round(seal, metas[0], with_trials=False)
    start = meta["first_trial_index"] - 1 if after_trial is None else after_trial
    end = meta["first_trial_index"] + meta["trial_count"]
    trials = [
        {"trial_index": row["trial_index"], "entry": seal.open_bytes(row["entry"]) or b""}
        for row in await queries.fetch_all(
            ROUND_TRIALS, {"id": params["id"], "after_trial": start, "end": end, "limit": MAX_TRIALS_PER_PART},
            binary=True,
        )
    ]
    taken: list[dict[str, Any]] = []
    size = meta["fields_size"]
    for row in trials:
        row_size = len(row["entry"])
        if taken and size + row_size > REPLY_BUDGET:
            break
        taken.append(row)
        size += row_size
    last = taken[-1]["trial_index"] if taken else start
    complete = last >= end - 1
    more_rounds = meta["remaining"] > 1
    return {
        "direction": meta["direction"],
        "rounds": [round_json(meta["fields"], b"[" + b",".join(row["entry"] for row in taken) + b"]", complete)],
        "next_after_round": (meta["round_index"] if more_rounds else None) if complete else meta["round_index"] - 1,
        "next_after_trial": None if complete else last,
    }


MAX_PARETO_TRIALS = 20_000  # one or two objectives: a sweep, n log n
MAX_PARETO_TRIALS_MANY_OBJECTIVES = 2_000  # three or more: n × front


async def pareto(queries: Queries, user: str, q: ParetoQuery) -> Wire[ParetoFront]:
    optimization = await summary(queries, user, q.optimization_id)
    objectives = list(dict.fromkeys(q.objectives or ["score"]))  # (directions name only these: ParetoQuery)
    directions = {name: q.directions.get(name, optimization["direction"]) for name in objectives}
    last_round = " AND round_index = (SELECT max(round_index) FROM rm_optimizations.rounds WHERE optimization_id = %(id)s)"
    # Invalidated trials are left out of every front.
    scope = " WHERE optimization_id = %(id)s AND invalid_reason IS NULL" + (last_round if q.scope == "last_round" else "")
    # Bounded before the trials are read: a front over more objectives costs n × front.
    most = MAX_PARETO_TRIALS if len(objectives) <= 2 else MAX_PARETO_TRIALS_MANY_OBJECTIVES
    count = await queries.fetch_one("SELECT count(*) AS trials FROM rm_optimizations.trials" + scope, {"id": q.optimization_id})
    if count is not None and count["trials"] > most:
        message = (
            f"a Pareto front over {len(objectives)} objective(s) considers at most {most:,} trials;"
            f" scope '{q.scope}' holds {count['trials']:,}"
        )
        raise ChronicleError("invalid", message, [{"field": "scope", "rule": "max_trials", "message": message}])
    trials = await queries.fetch_all(
        "SELECT trial_index, round_index, candidate_id, candidate, score, metrics FROM rm_optimizations.trials"
        + scope + " ORDER BY trial_index",
        {"id": q.optimization_id},
    )
    seal = await queries.sealing.of(user)
    if seal is None:  # (erased meanwhile)
        raise not_found("optimization", q.optimization_id)
    # The opening, the comparing and the reply's rows off the event loop, in one go (tens of ms at the bound).
    return Wire(await asyncio.to_thread(front_of, trials, q, objectives, directions, seal))


def front_of(
    trials: list[dict[str, Any]], q: ParetoQuery, objectives: list[str], directions: dict[str, Direction],
    seal: UserSeal | None = None,
) -> dict[str, Any]:
    """The reply: the trials on the front of those with a number for every objective (their
    candidate and metrics opened first with `seal`, when they are sealed)."""
    if seal is not None:
        for trial in trials:
            trial["candidate"], trial["metrics"] = seal.open_json(trial["candidate"]), seal.open_json(trial["metrics"])
    score_at = objectives.index("score") if "score" in objectives else -1
    points = []
    for trial in trials:
        metrics = trial["metrics"]
        values = [metrics.get(name) for name in objectives]
        if score_at >= 0:
            values[score_at] = trial["score"]
        # Numbers only (a bool is an int to Python, not to JSON).
        if all(type(value) is float or type(value) is int for value in values):
            vector = tuple(map(float, values))
            points.append(((trial, vector), vector))
    front = pareto_front(points, tuple(directions[name] for name in objectives))
    return {
        "optimization_id": q.optimization_id,
        "scope": q.scope,
        "objectives": objectives,
        "directions": directions,
        "front": [
            {
                "trial_index": trial["trial_index"], "round_index": trial["round_index"],
                "candidate_id": trial["candidate_id"], "candidate": trial["candidate"],
                "objectives": dict(zip(objectives, values, strict=True)),
            }
            for trial, values in front
        ],
        "considered": len(points),
    }


async def compare(queries: Queries, user: str, q: CompareOptimizations) -> Wire[Comparison]:
    ids = list(dict.fromkeys(q.optimization_ids))
    rows = await queries.fetch_all(SUMMARY + " WHERE id = ANY(%s) AND owner = %s AND direction IS NOT NULL", (ids, user))
    seal = await queries.sealing.of(user) if rows else None
    found = {row["optimization_id"]: opened_summary(seal, row) for row in rows if seal is not None}
    missing = [ident for ident in ids if ident not in found]
    if missing:
        raise not_found("optimization", missing[0])
    points: dict[UUID, list[dict[str, Any]]] = {ident: [] for ident in ids}
    # The curve of each: where its best so far moved, without invalidated trials when it has any.
    corrected = [ident for ident in ids if found[ident]["invalid_trials"] > 0]
    as_recorded = [ident for ident in ids if ident not in corrected]
    rows = await queries.fetch_all(
        "SELECT optimization_id, trial_index, best_so_far FROM rm_optimizations.trials"
        " WHERE optimization_id = ANY(%s) AND improved ORDER BY optimization_id, trial_index",
        (as_recorded,),
    ) if as_recorded else []
    if corrected:
        rows += await queries.fetch_all(
            "SELECT optimization_id, trial_index, best_so_far FROM (SELECT optimization_id, trial_index,"
            " corrected_best_so_far AS best_so_far, corrected_best_so_far IS DISTINCT FROM"
            "  lag(corrected_best_so_far) OVER (PARTITION BY optimization_id ORDER BY trial_index) AS moved"
            " FROM rm_optimizations.trials WHERE optimization_id = ANY(%s)) t"
            " WHERE moved AND best_so_far IS NOT NULL ORDER BY optimization_id, trial_index",
            (corrected,),
        )
    for row in rows:
        points[row["optimization_id"]].append({"trial_index": row["trial_index"], "best_so_far": row["best_so_far"]})
    curves = [
        {
            "optimization_id": ident,
            "name": found[ident]["name"],
            "direction": found[ident]["direction"],
            "trials": found[ident]["trials"],
            "best_score": found[ident]["best_score"],
            "points": points[ident],
        }
        for ident in ids
    ]
    return Wire({"curves": curves})


LINEAGE_SECONDS = 0.5


async def lineage(queries: Queries, user: str, q: CandidateLineage) -> Wire[Lineage]:
    optimization = await summary(queries, user, q.optimization_id)
    # UNION (not UNION ALL) on (candidate, depth) keeps a diamond or a cycle in the
    # ancestry from multiplying paths; depth bounds the walk, and time bounds its work (a
    # dense graph walked deep visits every candidate at every depth).
    message = f"this lineage is too large to walk {q.depth} generations deep within {LINEAGE_SECONDS} s; ask for less depth"
    too_long = ChronicleError("invalid", message, [{"field": "depth", "rule": "work", "message": message}])
    rows = await queries.fetch_all_within(
        "WITH RECURSIVE walk(candidate_id, depth) AS ("
        " SELECT %(candidate)s::text, 0"
        " UNION SELECT p.parent_id, w.depth + 1 FROM walk w JOIN rm_lineage.candidate_parents p"
        "  ON p.optimization_id = %(id)s AND p.candidate_id = w.candidate_id WHERE w.depth < %(depth)s)"
        " SELECT c.candidate_id, min(w.depth) AS depth, c.origin, c.ops, c.first_round_index, c.first_trial_index,"
        "  coalesce((SELECT array_agg(pp.parent_id ORDER BY pp.parent_id) FROM rm_lineage.candidate_parents pp"
        "   WHERE pp.optimization_id = %(id)s AND pp.candidate_id = c.candidate_id), '{}') AS parents"
        " FROM walk w JOIN rm_lineage.candidates c"
        "  ON c.optimization_id = %(id)s AND c.candidate_id = w.candidate_id AND c.owner = %(user)s"
        " GROUP BY c.candidate_id, c.origin, c.ops, c.first_round_index, c.first_trial_index"
        " ORDER BY depth, c.first_trial_index",
        {"candidate": q.candidate_id, "id": q.optimization_id, "depth": q.depth, "user": user},
        seconds=LINEAGE_SECONDS,
        too_long=too_long,
    )
    seal = await queries.sealing.of(user)
    if not rows or rows[0]["depth"] != 0 or seal is None:
        raise ChronicleError("not_found", f"candidate {q.candidate_id} not found in optimization {q.optimization_id}")
    for row in rows:
        row["origin"], row["ops"] = seal.open(row["origin"]), seal.open_json(row["ops"])
    scores = {
        row["candidate_id"]: row["best"]
        for row in await queries.fetch_all(
            BEST_SCORES[optimization["direction"]], (q.optimization_id, [row["candidate_id"] for row in rows])
        )
    }
    return Wire({
        "optimization_id": q.optimization_id,
        "candidate_id": q.candidate_id,
        "lineage": [{**row, "best_score": scores.get(row["candidate_id"])} for row in rows],
    })
