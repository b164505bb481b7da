"""Layout trees: the rules a layout must obey, its shape, and how alike two layouts are."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from domain.errors import InvalidCommand

MAX_NODES = 10_000
MAX_DEPTH = 64  # the root is depth 1
MAX_LAYOUT_BYTES = 1_000_000  # of the canonical JSON, UTF-8

# Where a node sits, as a chain of (parent, child index) links: building the field path
# only when a rule is broken keeps checking a 10,000-node tree linear.
_Where = tuple["_Where", int] | None


@dataclass(frozen=True)
class Shape:
    node_count: int
    depth: int
    type_counts: dict[str, int] = field(hash=False)

    @property
    def component_variety(self) -> int:
        return len(self.type_counts)

    @property
    def complexity(self) -> int:
        # Size counts most, but one more level of nesting or one more kind of component
        # asks more of a reader than one more node of a kind already on the page.
        return self.node_count + 2 * self.depth + 3 * self.component_variety


def _path(field_name: str, where: _Where) -> str:
    indices: list[int] = []
    while where is not None:
        where, index = where
        indices.append(index)
    return field_name + "".join(f".children[{index}]" for index in reversed(indices))


def _problem(node: Any) -> tuple[str, str, str] | None:
    """What is wrong with one node, as (field suffix, rule, what it must be), or None."""
    if not isinstance(node, dict):
        return "", "type", "must be an object"
    if "type" not in node:
        return ".type", "required", "is required"
    if not isinstance(node["type"], str):
        return ".type", "type", "must be a string"
    if not node["type"].strip():
        return ".type", "required", "must not be empty"
    for name, kind, kind_name in (("children", list, "a list"), ("id", str, "a string"), ("label", str, "a string")):
        if name in node and not isinstance(node[name], kind):
            return f".{name}", "type", f"must be {kind_name}"
    return None


def check_layout(layout: Any, *, field: str = "layout") -> Shape:
    """Raise InvalidCommand naming the field and rule a layout breaks; return its shape."""
    if not isinstance(layout, dict):
        raise InvalidCommand(f"{field} must be an object", field=field, rule="type")
    announced = 1  # nodes seen so far, counted as their parents' children lists are met
    stack: list[tuple[Any, int, _Where]] = [(layout, 1, None)]
    while stack:
        node, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            path = _path(field, where)
            raise InvalidCommand(f"{path} is nested deeper than {MAX_DEPTH} levels", field=path, rule="max_depth")
        problem = _problem(node)
        if problem is not None:
            suffix, rule, must = problem
            path = _path(field, where) + suffix
            raise InvalidCommand(f"{path} {must}", field=path, rule=rule)
        children = node.get("children", ())
        # Counting a children list before walking it fails fast on one enormous list.
        announced += len(children)
        if announced > MAX_NODES:
            raise InvalidCommand(f"{field} may hold at most {MAX_NODES} nodes", field=field, rule="max_nodes")
        stack.extend((child, depth + 1, (where, index)) for index, child in reversed(list(enumerate(children))))
    try:
        size = len(json.dumps(layout, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):  # a non-JSON value, a reference cycle, a lone surrogate
        raise InvalidCommand(f"{field} must be plain JSON", field=field, rule="json") from None
    if size > MAX_LAYOUT_BYTES:
        raise InvalidCommand(f"{field} may be at most {MAX_LAYOUT_BYTES} bytes as JSON", field=field, rule="max_bytes")
    return shape_of(layout)


def walk(layout: dict[str, Any]) -> Iterator[tuple[dict[str, Any], int]]:
    """Every node of a checked layout with its depth (the root is 1), depth-first in document order."""
    stack = [(layout, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        stack.extend((child, depth + 1) for child in reversed(node.get("children", ())))


def shape_of(layout: dict[str, Any]) -> Shape:
    """The shape of a layout already known to be valid."""
    type_counts: Counter[str] = Counter()
    depth = 0
    for node, node_depth in walk(layout):
        type_counts[node["type"]] += 1
        depth = max(depth, node_depth)
    return Shape(node_count=sum(type_counts.values()), depth=depth, type_counts=dict(type_counts))


def _type_paths(layout: dict[str, Any], path_ids: dict[tuple[int, str], int]) -> Counter[int]:
    """How often each root-to-node type path occurs. Paths are numbered through `path_ids`
    (shared by the trees being compared) so a deep path costs one lookup, not a long string."""
    counts: Counter[int] = Counter()
    ancestors: list[int] = []
    for node, depth in walk(layout):
        del ancestors[depth - 1 :]
        path = path_ids.setdefault((ancestors[-1] if ancestors else -1, node["type"]), len(path_ids))
        ancestors.append(path)
        counts[path] += 1
    return counts


def _weighted_jaccard(a: Counter[Any], b: Counter[Any]) -> float:
    larger = sum((a | b).values())
    return sum((a & b).values()) / larger if larger else 1.0


def similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Structural likeness in [0, 1]: a weighted Jaccard over the trees' type paths
    ("page/section/button"). Labels, ids and other attributes are ignored, and so is the order
    of siblings: two layouts holding the same components in the same places are alike."""
    path_ids: dict[tuple[int, str], int] = {}
    return _weighted_jaccard(_type_paths(a, path_ids), _type_paths(b, path_ids))


def component_overlap(a: Shape, b: Shape) -> float:
    """How far two layouts use the same components as often: a weighted Jaccard over type counts."""
    return _weighted_jaccard(Counter(a.type_counts), Counter(b.type_counts))


def diversity(layouts: list[dict[str, Any]]) -> float:
    """1 - the mean pairwise similarity of the layouts; 0.0 for fewer than two."""
    if len(layouts) < 2:
        return 0.0
    path_ids: dict[tuple[int, str], int] = {}
    paths = [_type_paths(layout, path_ids) for layout in layouts]
    pairs = list(combinations(paths, 2))
    return round(1 - sum(_weighted_jaccard(a, b) for a, b in pairs) / len(pairs), 4)


RANKED_BY = ("complexity", "depth", "component_variety")


def rankings(shapes: dict[int, Shape]) -> dict[str, list[int]]:
    """For each measure, the variation indices from highest to lowest, ties to the lower index."""
    return {
        measure: sorted(shapes, key=lambda index: (-getattr(shapes[index], measure), index)) for measure in RANKED_BY
    }
