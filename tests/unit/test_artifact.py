"""The Artifact, VariationSet and CurrentSession aggregates without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest

from domain.artifact import Artifact, GenerationStats, RagExample
from domain.current_session import CurrentSession
from domain.errors import InvalidCommand, NotFound
from domain.variation_set import VariationSet
from tests.unit.test_snapshot import round_trip

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PAGE = {"type": "page", "children": [{"type": "hero", "label": "Tulips"}]}


def store(owner: str = "alice", parent: Artifact | None = None, **fields: object) -> Artifact:
    return Artifact.store(id=uuid4(), owner=owner, at=NOW, session_id=uuid4(), parent=parent, layout=PAGE, **fields)  # type: ignore[arg-type]


def test_a_child_is_one_generation_below_its_parent_and_must_be_the_owners() -> None:
    root = store(query="tulips", stats=GenerationStats(tokens=12))
    child = store(parent=root)
    grandchild = store(parent=child)
    assert (root.generation, child.generation, grandchild.generation) == (0, 1, 2)
    assert grandchild.parent_id == child.id
    with pytest.raises(NotFound):
        store(owner="bob", parent=root)
    root.remove(at=NOW, reason="retention")
    with pytest.raises(NotFound):
        store(parent=root)


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({"temperature": 2.01}, "temperature", "range"),
        ({"rag_examples": [RagExample(id="a", score=1), RagExample(id="a", score=2)]}, "rag_examples[1].id", "unique"),
        ({"rag_examples": [RagExample(id="a", score=float("nan"))]}, "rag_examples[0].score", "finite"),
        ({"query": "x\x00"}, "query", "no_nul"),
        ({"tags": [f"t{n}" for n in range(11)]}, "tags", "max_items"),
    ],
)
def test_invalid_fields_are_refused_naming_the_field(fields: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(InvalidCommand) as refused:
        store(**fields)
    assert (refused.value.field, refused.value.rule) == (field, rule)


def test_tags_previews_and_removal_record_only_changes() -> None:
    artifact = store(tags=["a"])
    artifact.tag(at=NOW, tags=["a", "a"])
    assert artifact.cache_preview(at=NOW, style="thumb", format="png", sha256="0" * 64, size=10)
    assert not artifact.cache_preview(at=NOW, style="thumb", format="png", sha256="0" * 64, size=10)
    assert artifact.cache_preview(at=NOW, style="thumb", format="png", sha256="1" * 64, size=12)
    assert [p.sha256[0] for p in artifact.previews] == ["1"]  # one preview per style and format
    with pytest.raises(InvalidCommand) as too_big:
        artifact.cache_preview(at=NOW, style="full", format="png", sha256="2" * 64, size=20 * 1024 * 1024 + 1)
    assert too_big.value.field == "size"
    assert artifact.remove(at=NOW, reason="retention") and not artifact.remove(at=NOW, reason="again")
    kinds = [type(e).__name__ for e in artifact.collect_events()]
    assert kinds == ["Stored", "PreviewCached", "PreviewCached", "Removed"]


def test_an_artifact_snapshot_restores_every_attribute() -> None:
    artifact = store(tags=["a"], rag_examples=[RagExample(id="doc", score=0.5, text="t")])
    artifact.cache_preview(at=NOW + timedelta(seconds=1), style="thumb", format="png", sha256="0" * 64, size=10)
    assert vars(round_trip(artifact)) == vars(artifact)
    current = CurrentSession.choose(owner="alice", session_id=uuid4(), at=NOW)
    current.move_to(session_id=uuid4(), at=NOW)
    assert vars(round_trip(current)) == vars(current)
    assert current.id == CurrentSession.id_for("alice") != CurrentSession.id_for("bob")


def test_a_variation_set_scores_the_stored_members_and_lists_the_failed() -> None:
    wide = {"type": "page", "children": [{"type": "card"}, {"type": "chart"}, {"type": "form", "children": [{"type": "input"}]}]}
    narrow = {"type": "page", "children": [{"type": "text"}]}
    stored = {0: store(), 1: Artifact.store(id=uuid4(), owner="alice", at=NOW, session_id=uuid4(), parent=None, layout=wide)}
    stored[2] = Artifact.store(id=uuid4(), owner="alice", at=NOW, session_id=uuid4(), parent=None, layout=narrow)
    made = VariationSet.create(
        id=uuid4(), owner="alice", at=NOW, session_id=uuid4(), base_artifact_id=None, query="q", model=None,
        style_variety=0.5, temperatures=[0.5, 0.75, 1.0, 1.25], outcomes={**stored, 3: "timeout"},
    )
    assert [(m.index, m.status, m.error) for m in made.members] == [
        (0, "stored", None), (1, "stored", None), (2, "stored", None), (3, "failed", "timeout")
    ]
    assert 0 < made.diversity <= 1
    assert made.rankings["complexity"][0] == 1 and made.rankings["depth"][0] == 1 and 3 not in made.rankings["depth"]


def test_variation_temperatures_spread_evenly_over_the_range() -> None:
    from chronicle_contract.artifacts import CreateVariations

    assert CreateVariations(query="q", count=5).temperatures() == [0.5, 0.625, 0.75, 0.875, 1.0]
    assert CreateVariations(query="q", count=1, temperature_range=(0.2, 0.4)).temperatures() == [0.3]
    assert CreateVariations(query="q", count=2, temperature_range=(0.7, 0.7)).temperatures() == [0.7, 0.7]
