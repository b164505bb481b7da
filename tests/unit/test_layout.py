"""Layout rules at and past their limits, shapes, and the similarity measures between layouts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import InvalidCommand
from domain.layout import (
    MAX_DEPTH,
    MAX_LAYOUT_BYTES,
    MAX_NODES,
    Shape,
    check_layout,
    component_overlap,
    diversity,
    rankings,
    shape_of,
    similarity,
)


def wide(node_count: int) -> dict[str, Any]:
    """A page whose other nodes are all its children."""
    return {"type": "page", "children": [{"type": "text"} for _ in range(node_count - 1)]}


def chain(depth: int) -> dict[str, Any]:
    """Nodes nested one inside the other, built without recursion."""
    root: dict[str, Any] = {"type": "level"}
    node = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {"type": "level"}
        node["children"] = [child]
        node = child
    return root


def rule_broken(layout: Any, **options: str) -> tuple[str | None, str | None]:
    with pytest.raises(InvalidCommand) as raised:
        check_layout(layout, **options)
    return raised.value.field, raised.value.rule


PAGE = {"type": "page", "children": [{"type": "section", "children": [{"type": "button", "label": "Buy"}]}]}


@pytest.mark.parametrize(
    ("layout", "field", "rule"),
    [
        ([], "layout", "type"),
        ("page", "layout", "type"),
        ({"label": "no type"}, "layout.type", "required"),
        ({"type": 3}, "layout.type", "type"),
        ({"type": "  "}, "layout.type", "required"),
        ({"type": "page", "children": {}}, "layout.children", "type"),
        ({"type": "page", "children": None}, "layout.children", "type"),
        ({"type": "page", "id": 5}, "layout.id", "type"),
        ({"type": "page", "label": None}, "layout.label", "type"),
        ({"type": "page", "children": ["button"]}, "layout.children[0]", "type"),
        (
            {"type": "page", "children": [{"type": "a"}, {"type": "b"}, {"label": "c"}]},
            "layout.children[2].type",
            "required",
        ),
        (
            {"type": "page", "children": [{"type": "s"}, {"type": "s", "children": [{"type": "b", "label": 1}]}]},
            "layout.children[1].children[0].label",
            "type",
        ),
        ({"type": "page", "when": object()}, "layout", "json"),
        ({"type": "page", "label": "x" * MAX_LAYOUT_BYTES}, "layout", "max_bytes"),
    ],
)
def test_each_broken_rule_names_its_field(layout: Any, field: str, rule: str) -> None:
    assert rule_broken(layout) == (field, rule)


def test_the_field_name_is_the_callers() -> None:
    assert rule_broken({"type": "page", "children": [7]}, field="base_layout") == ("base_layout.children[0]", "type")


def test_node_count_limit() -> None:
    assert check_layout(wide(MAX_NODES)).node_count == MAX_NODES
    assert rule_broken(wide(MAX_NODES + 1)) == ("layout", "max_nodes")


def test_depth_limit() -> None:
    assert check_layout(chain(MAX_DEPTH)).depth == MAX_DEPTH
    field, rule = rule_broken(chain(MAX_DEPTH + 1))
    assert (field, rule) == ("layout" + ".children[0]" * MAX_DEPTH, "max_depth")


def test_size_is_counted_in_utf8_bytes_of_the_canonical_json() -> None:
    empty_label = len('{"type":"page","label":""}')
    assert check_layout({"type": "page", "label": "x" * (MAX_LAYOUT_BYTES - empty_label)}).node_count == 1
    assert rule_broken({"type": "page", "label": "x" * (MAX_LAYOUT_BYTES - empty_label + 1)}) == ("layout", "max_bytes")
    assert rule_broken({"type": "page", "label": "é" * (MAX_LAYOUT_BYTES // 2)}) == ("layout", "max_bytes")


def test_huge_inputs_fail_fast() -> None:
    assert rule_broken({"type": "page", "children": [None] * 5_000_000}) == ("layout", "max_nodes")
    assert rule_broken(chain(200_000))[1] == "max_depth"  # no recursion to run out of
    looped: dict[str, Any] = {"type": "page", "children": []}
    looped["children"].append(looped)
    assert rule_broken(looped)[1] == "max_depth"


def test_shape() -> None:
    layout = {
        "type": "page",
        "children": [{"type": "section", "children": [{"type": "button"}, {"type": "button"}]}, {"type": "text"}],
    }
    shape = check_layout(layout)
    assert (
        shape
        == shape_of(layout)
        == Shape(node_count=5, depth=3, type_counts={"page": 1, "section": 1, "button": 2, "text": 1})
    )
    assert shape.component_variety == 4
    assert shape.complexity == 5 + 2 * 3 + 3 * 4
    assert hash(shape) == hash(shape_of(layout))


def test_similarity_of_known_pairs() -> None:
    relabelled = {
        "type": "page",
        "id": "p",
        "children": [{"type": "section", "label": "Other", "children": [{"type": "button"}]}],
    }
    assert similarity(PAGE, PAGE) == 1.0
    assert similarity(PAGE, relabelled) == 1.0  # labels and ids do not count
    assert similarity(PAGE, {"type": "screen", "children": [{"type": "section"}]}) == 0.0  # no common path
    grown = {"type": "page", "children": [{"type": "section", "children": [{"type": "text"}, {"type": "button"}]}]}
    assert similarity(PAGE, grown) == similarity(grown, PAGE) == 3 / 4
    moved = {"type": "page", "children": [{"type": "section"}, {"type": "button"}]}  # same types, other places
    assert similarity(PAGE, moved) == 2 / 4


def test_similarity_of_the_largest_trees() -> None:
    assert similarity(wide(MAX_NODES), wide(MAX_NODES)) == 1.0
    assert similarity(chain(MAX_DEPTH), chain(MAX_DEPTH // 2)) == 0.5


TYPES = st.sampled_from(["page", "section", "button", "text"])
TREES = st.recursive(
    st.builds(lambda kind: {"type": kind}, TYPES),
    lambda children: st.builds(
        lambda kind, kids: {"type": kind, "children": kids}, TYPES, st.lists(children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None)
@given(TREES, TREES)
def test_similarity_is_symmetric_and_bounded(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert 0.0 <= similarity(a, b) == similarity(b, a) <= 1.0
    assert similarity(a, a) == 1.0


@settings(max_examples=100, deadline=None)
@given(TREES)
def test_generated_trees_are_valid_and_their_shape_adds_up(tree: dict[str, Any]) -> None:
    shape = check_layout(tree)
    assert sum(shape.type_counts.values()) == shape.node_count >= shape.depth >= 1


def test_component_overlap() -> None:
    def shape(**type_counts: int) -> Shape:
        return Shape(node_count=sum(type_counts.values()), depth=1, type_counts=type_counts)

    assert component_overlap(shape(a=2, b=1), shape(a=1, c=1)) == 1 / 4
    assert component_overlap(shape(a=2), shape(a=2)) == 1.0
    assert component_overlap(shape(a=1), shape(b=1)) == 0.0
    assert component_overlap(shape(), shape()) == 1.0
    assert component_overlap(shape(), shape(a=1)) == 0.0


def test_diversity() -> None:
    grown = {"type": "page", "children": [{"type": "section", "children": [{"type": "text"}, {"type": "button"}]}]}
    other = {"type": "screen"}
    assert diversity([]) == diversity([PAGE]) == diversity([PAGE, PAGE]) == 0.0
    assert diversity([PAGE, other]) == 1.0
    assert diversity([PAGE, grown, other]) == round(1 - (3 / 4 + 0 + 0) / 3, 4) == 0.75
    assert diversity([PAGE, {"type": "page"}, grown]) == round(1 - (1 / 3 + 3 / 4 + 1 / 4) / 3, 4)


def test_rankings_order_highest_first_and_break_ties_by_index() -> None:
    shapes = {
        0: Shape(node_count=3, depth=2, type_counts={"page": 1, "text": 2}),
        1: Shape(node_count=9, depth=2, type_counts={"page": 1, "text": 8}),
        2: Shape(node_count=4, depth=3, type_counts={"page": 1, "section": 1, "text": 2}),
        3: Shape(node_count=3, depth=2, type_counts={"page": 1, "text": 2}),
    }
    assert rankings(shapes) == {
        "complexity": [1, 2, 0, 3],  # 9+4+6=19, 4+6+9=19 -> tie to index 1; then 13, 13
        "depth": [2, 0, 1, 3],
        "component_variety": [2, 0, 1, 3],
    }
    assert rankings({}) == {"complexity": [], "depth": [], "component_variety": []}
