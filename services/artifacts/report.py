"""`chronicle artifacts show|tree ID`: one artifact, or its lineage as a tree, read straight from the read models."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any
from uuid import UUID

from services.artifacts.queries import ANCESTORS, DESCENDANTS, MAX_DESCENDANTS, opened_rows
from services.ports.read_models import Queries

DRAFT_LINES = 40
LINE_WIDTH = 160
EXCERPT = 48  # characters of a query or an example's text on one line
PRINTED_DESCENDANTS = 500
CHAIN_ENDS = 5  # ancestors kept at each end of a chain too long to print whole
MAX_INDENT = 40  # tree levels indented; deeper ones stay at this column, their generation tells the depth
LINEAGE_COLUMNS = "id, owner, parent_id, generation, variation_set_id, removed, created_at, 0 AS distance"
# What people wrote must not drive the operator's terminal (escape sequences, carriage returns).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


async def load_artifact(queries: Queries, artifact_id: UUID) -> dict[str, Any] | None:
    """Every column of the live artifact (its content opened with its owner's key), whoever
    owns it; None when there is none."""
    row = await queries.fetch_one("SELECT * FROM rm_artifacts.artifacts WHERE id = %s", (artifact_id,))
    if row is None:
        return None
    opened = await opened_rows(queries, row["owner"], [row])
    return opened[0] if opened else None


async def load_tree(
    queries: Queries, artifact_id: UUID, depth: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The ancestors root first, and the subtree: the artifact then its descendants nearest
    first (at most MAX_DESCENDANTS + 1 of them, so the renderer can tell some were left out).
    Removed artifacts stay in the lineage read model and come marked; None for an unknown id."""
    artifact = await queries.fetch_one(
        "SELECT " + LINEAGE_COLUMNS + " FROM rm_lineage.artifacts WHERE id = %s", (artifact_id,)
    )
    if artifact is None:
        return None
    # The shared lineage walks stay within one owner: the artifact's.
    params = {"id": artifact_id, "user": artifact["owner"], "depth": depth, "limit": MAX_DESCENDANTS + 1}
    ancestors = list(reversed(await queries.fetch_all(ANCESTORS, params)))
    subtree = [artifact, *await queries.fetch_all(DESCENDANTS, params)]
    details = await queries.fetch_all(
        "SELECT id, origin, query, variation_index FROM rm_artifacts.artifacts WHERE id = ANY(%s) AND owner = %s",
        ([row["id"] for row in ancestors + subtree], artifact["owner"]),
    )
    by_id = {row["id"]: row for row in await opened_rows(queries, artifact["owner"], details)}
    for row in by_id.values():
        row["query"] = row["query"][:200]
    for row in ancestors + subtree:
        row.update(by_id.get(row["id"], {}))
    return ancestors, subtree


def clip(text: str, width: int) -> str:
    text = CONTROL.sub("\ufffd", text)
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str, width: int) -> str:
    return clip(" ".join(text.split()), width)


def human_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def when(at: datetime) -> str:
    return at.isoformat(sep=" ", timespec="seconds")


def duration(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def render_artifact(row: dict[str, Any]) -> str:
    stats = row["stats"]
    components = sorted(row["component_types"].items(), key=lambda kv: (-kv[1], kv[0]))
    model = one_line(row["model"] or "-", 40)
    if row["provider"]:
        model += f" via {one_line(row['provider'], 40)}"
    if row["temperature"] is not None:
        model += f", temperature {row['temperature']:g}"
    lines = [
        f"artifact {row['id']} (owner {row['owner']})",
        f"  session     {row['session_id']}",
        f"  parent      {row['parent_id'] or '-'}",
        f"  generation  {row['generation']}, origin {row['origin']}",
        f"  created     {when(row['created_at'])}, updated {when(row['updated_at'])}",
        f"  query       {one_line(row['query'], LINE_WIDTH) or '-'}",
        f"  model       {model}",
        f"  stats       {stats.get('attempts', 0)} attempts, {row['tokens']} tokens, {stats.get('retries', 0)} retries,"
        f" {duration(stats.get('duration_ms', 0))}",
        f"  tags        {', '.join(row['tags']) or '-'}",
    ]
    if row["refinement"]:
        lines.append(f"  refinement  {one_line(row['refinement'], LINE_WIDTH)}")
    if row["variation_set_id"] is not None:
        lines.append(f"  variation   set {row['variation_set_id']}, index {row['variation_index']}")
    lines.append(
        f"  shape       {row['node_count']} nodes, depth {row['depth']}, {human_size(row['size_bytes'])}; "
        + ", ".join(f"{kind} {count}" for kind, count in components)
    )
    lines += ["", f"RAG examples ({len(row['rag_examples'])}):" if row["rag_examples"] else "RAG examples: none"]
    for example in row["rag_examples"]:
        text = one_line(example.get("text") or "", EXCERPT)
        lines.append(f"  {one_line(example['id'], 40)}  score {example['score']:g}" + (f"  {text}" if text else ""))
    lines += ["", f"previews ({len(row['previews'])}):" if row["previews"] else "previews: none"]
    for preview in row["previews"]:
        lines.append(
            f"  {one_line(preview['style'], 40)}  {one_line(preview['format'], 20)}  {human_size(preview['size'])}"
            f"  sha256 {preview['sha256'][:12]}"
        )
    body = row["draft"].splitlines() if row["draft"] else list(layout_lines(row["layout"]))
    lines += ["", "draft:" if row["draft"] else "layout (no draft):"]
    lines += ["  " + clip(line, LINE_WIDTH) if row["draft"] else line for line in body[:DRAFT_LINES]]
    if len(body) > DRAFT_LINES:
        lines.append(f"  … {len(body) - DRAFT_LINES} more lines")
    return "\n".join(lines)


def layout_lines(layout: dict[str, Any]) -> list[str]:
    """The layout as an indented outline, one node a line, in document order."""
    lines = []
    stack = [(layout, 1)]
    while stack:
        node, level = stack.pop()
        label = f"  {one_line(node['label'], EXCERPT)!r}" if node.get("label") else ""
        ident = f" #{one_line(node['id'], 40)}" if node.get("id") else ""
        lines.append("  " * level + one_line(str(node.get("type")), 40) + ident + label)
        stack.extend((child, level + 1) for child in reversed(node.get("children", [])))
    return lines


def node_label(row: dict[str, Any], marked: bool = False) -> str:
    parts = [row["id"].hex[:8], f"gen {row['generation']}"]
    if row["removed"]:
        parts.append("(removed)")
    elif "origin" in row:
        parts.append(row["origin"])
        if row["query"]:
            parts.append('"' + one_line(row["query"], EXCERPT) + '"')
    if row["variation_set_id"] is not None:
        index = row.get("variation_index")
        parts.append(f"set {row['variation_set_id'].hex[:8]}" + (f" #{index}" if index is not None else ""))
    return "  ".join(parts) + ("  ◀" if marked else "")


def render_tree(ancestors: list[dict[str, Any]], subtree: list[dict[str, Any]]) -> str:
    artifact, descendants = subtree[0], subtree[1:]
    lines = [f"lineage of artifact {artifact['id']} (owner {artifact['owner']})"]
    if ancestors and ancestors[0]["parent_id"] is not None:
        lines.append("… older ancestors beyond --depth")
    shown: list[dict[str, Any] | None] = list(ancestors)
    if len(ancestors) > 2 * CHAIN_ENDS + 1:
        shown = [*ancestors[:CHAIN_ENDS], None, *ancestors[-CHAIN_ENDS:]]  # None: the elided middle
    for row in shown:
        lines.append(f"… {len(ancestors) - 2 * CHAIN_ENDS} more …" if row is None else node_label(row))
    lines.append(node_label(artifact, marked=True))
    lines += tree_lines(artifact["id"], descendants)
    total = f"{MAX_DESCENDANTS}+" if len(descendants) > MAX_DESCENDANTS else str(len(descendants))
    printed = min(len(descendants), PRINTED_DESCENDANTS)
    cut = f" ({printed} shown)" if printed < len(descendants) else ""
    lines.append(f"{len(ancestors)} ancestors, {total} descendants{cut}")
    return "\n".join(lines)


def tree_lines(root: UUID, descendants: list[dict[str, Any]]) -> list[str]:
    """The descendants drawn under the root. They come nearest first, so the first few
    hundred form a connected tree; a node whose children were cut says how many."""
    children: dict[UUID, list[Any]] = defaultdict(list)
    for row in descendants[:PRINTED_DESCENDANTS]:
        children[row["parent_id"]].append(row)
    hidden = Counter(row["parent_id"] for row in descendants[PRINTED_DESCENDANTS:])
    for parent, count in hidden.items():
        children[parent].append(count)
    lines = []
    stack = [(item, "", n == len(children[root]) - 1) for n, item in reversed(list(enumerate(children[root])))]
    while stack:
        item, prefix, last = stack.pop()
        branch = "└── " if last else "├── "
        if isinstance(item, int):
            lines.append(f"{prefix}{branch}… {item} more")
            continue
        lines.append(prefix + branch + node_label(item))
        below = prefix + ("    " if last else "│   ") if len(prefix) < 4 * MAX_INDENT else prefix
        kids = children[item["id"]]
        stack.extend((kid, below, n == len(kids) - 1) for n, kid in reversed(list(enumerate(kids))))
    return lines
