"""`chronicle optimizations show ID`: an optimization's rounds as a table and its
best-so-far curve drawn in the terminal, read straight from the read model."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.optimizations import OptimizationHistory

from services.optimizations import queries as optimization_queries
from services.ports.read_models import Queries

CURVE_WIDTH = 64
CURVE_HEIGHT = 12


async def load(queries: Queries, optimization_id: UUID) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The summary and every round; None when there is no such optimization. An operator
    at the CLI reads as the optimization's owner, through the same scoped queries."""
    row = await queries.fetch_one(
        "SELECT owner FROM rm_optimizations.optimizations WHERE id = %s AND direction IS NOT NULL",
        (optimization_id,),
    )
    if row is None:
        return None
    owner = row["owner"]
    summary = await optimization_queries.summary(queries, owner, optimization_id)
    rounds: list[dict[str, Any]] = []
    after = None
    after_trial = None
    while True:
        request = OptimizationHistory(optimization_id=optimization_id, after_round=after, after_trial=after_trial)
        page = orjson.loads(orjson.dumps(await optimization_queries.history(queries, owner, request)))  # (trials arrays come as JSON fragments)
        for entry in page["rounds"]:
            if rounds and rounds[-1]["round_index"] == entry["round_index"]:  # the rest of a split round
                entry["trials"] = rounds[-1]["trials"] + entry["trials"]
                rounds[-1] = entry
            else:
                rounds.append(entry)
        if page["next_after_round"] is None:
            return summary, rounds
        after, after_trial = page["next_after_round"], page["next_after_trial"]


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def render(summary: dict[str, Any], rounds: list[dict[str, Any]]) -> str:
    lines = [
        f"{summary['name']}  ({summary['optimizer']}, {summary['direction']}"
        + (f", project {summary['project']}" if summary["project"] else "")
        + (f", dataset {summary['dataset']}" if summary["dataset"] else "")
        + ")",
        f"{summary['rounds']} rounds, {summary['trials']} trials, best {number(summary['best_score'])}"
        + (f" at trial {summary['best_trial_index']}" if summary["best_trial_index"] is not None else "")
        + (f"; stopped: {summary['stop_reason']}" if summary["stopped"] else "; running"),
        "",
        f"{'round':>5}  {'trials':>6}  {'best':>10}  {'best so far':>11}  {'started':<19}  stop reason",
    ]
    for r in rounds:
        at = r["timestamp"] if isinstance(r["timestamp"], datetime) else datetime.fromisoformat(r["timestamp"])
        started = at.strftime("%Y-%m-%d %H:%M:%S")
        lines.append(
            f"{r['round_index']:>5}  {len(r['trials']):>6}  {number(r['best_score']):>10}  {number(r['best_so_far']):>11}"
            f"  {started:<19}  {r['stop_reason'] or ('(open)' if r['ended_at'] is None else '')}"
        )
    points = [(t["trial_index"], t["best_so_far"]) for r in rounds for t in r["trials"] if t["best_so_far"] is not None]
    lines += ["", "best so far by trial:", *curve(points)] if points else ["", "no scored trials yet"]
    return "\n".join(lines)


def curve(points: list[tuple[int, float]], width: int = CURVE_WIDTH, height: int = CURVE_HEIGHT) -> list[str]:
    """A step plot of (trial index, best so far): one column per slice of trials, the
    value at the end of the slice (best-so-far only ever improves, so that is its best)."""
    first, last = points[0][0], points[-1][0]
    low = min(v for _, v in points)
    high = max(v for _, v in points)
    span = (high - low) or 1.0
    columns = min(width, last - first + 1)
    values = []
    cursor = 0
    for column in range(columns):
        until = first + (last - first + 1) * (column + 1) / columns
        while cursor + 1 < len(points) and points[cursor + 1][0] < until:
            cursor += 1
        values.append(points[cursor][1])
    rows = []
    for level in range(height - 1, -1, -1):
        threshold = low + span * level / (height - 1)
        label = number(threshold) if level in (0, height - 1) else ""
        marks = "".join("█" if round((v - low) / span * (height - 1)) >= level else " " for v in values)
        rows.append(f"{label:>10} │{marks}")
    rows.append(f"{'':>10} └{'─' * columns}")
    rows.append(f"{'':>10}  trial {first}{' ' * max(1, columns - len(str(first)) - len(str(last)) - 12)}trial {last}")
    return rows
