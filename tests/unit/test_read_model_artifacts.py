"""The artifacts read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import orjson

from domain.artifact import Artifact, GenerationStats, RagExample
from domain.variation_set import VariationSet
from projections.artifacts import ArtifactRow, ArtifactsProjection, ArtifactsView, VariationSetRow
from tests.unit.projected import NOW, at, erasure_of, project

PAGE = {"type": "page", "children": [{"type": "hero", "label": "Tulips"}, {"type": "hero", "label": "Roses"}]}


class MemoryArtifactsView(ArtifactsView):
    def __init__(self) -> None:
        self.artifacts: dict[UUID, dict[str, Any]] = {}
        self.variation_sets: dict[UUID, VariationSetRow] = {}

    def add_artifact(self, row: ArtifactRow) -> None:
        self.artifacts[row.id] = {**row._asdict(), "previews": []}

    def tag_artifact(self, artifact_id: UUID, tags: list[str], at: datetime) -> None:
        self.artifacts[artifact_id].update(tags=tags, updated_at=at)

    def cache_preview(self, artifact_id: UUID, preview: dict[str, Any], at: datetime) -> None:
        row = self.artifacts[artifact_id]
        others = [p for p in row["previews"] if (p["style"], p["format"]) != (preview["style"], preview["format"])]
        row.update(previews=[*others, preview], updated_at=at)

    def remove_artifact(self, artifact_id: UUID) -> None:
        self.artifacts.pop(artifact_id, None)

    def add_variation_set(self, row: VariationSetRow) -> None:
        self.variation_sets[row.id] = row

    def erase_owner(self, owner: str) -> None:
        self.artifacts = {i: r for i, r in self.artifacts.items() if r["owner"] != owner}
        self.variation_sets = {i: r for i, r in self.variation_sets.items() if r.owner != owner}


def artifacts() -> tuple[ArtifactsProjection, MemoryArtifactsView]:
    view = MemoryArtifactsView()
    return ArtifactsProjection(view), view


def store(owner: str = "alice", parent: Artifact | None = None, **fields: Any) -> Artifact:
    return Artifact.store(id=uuid4(), owner=owner, at=NOW, session_id=uuid4(), parent=parent, layout=PAGE, **fields)


def test_a_stored_artifact_with_its_shape_stats_and_examples() -> None:
    projection, view = artifacts()
    parent = store()
    child = store(parent=parent, query="tulips", stats=GenerationStats(tokens=42), tags=["b"],
                  rag_examples=[RagExample(id="ex1", score=0.5, text="t")])
    project(projection, parent, child)
    row = view.artifacts[child.id]
    assert (row["parent_id"], row["generation"], row["query"], row["tokens"], row["tags"]) == (parent.id, 1, "tulips", 42, ["b"])
    assert orjson.loads(row["layout"]) == PAGE and row["size_bytes"] == len(orjson.dumps(PAGE))
    assert (row["node_count"], row["depth"], row["component_types"]) == (3, 2, {"page": 1, "hero": 2})
    assert row["rag_examples"] == [{"id": "ex1", "score": 0.5, "text": "t"}]
    assert row["stats"]["tokens"] == 42


def test_tags_and_previews_replace_and_a_removed_artifact_goes() -> None:
    projection, view = artifacts()
    kept, removed = store(), store()
    kept.tag(at=at(1), tags=["x"])
    kept.cache_preview(at=at(2), style="s", format="png", sha256="a" * 64, size=1)
    kept.cache_preview(at=at(3), style="t", format="png", sha256="b" * 64, size=2)
    kept.cache_preview(at=at(4), style="s", format="png", sha256="c" * 64, size=3)
    removed.remove(at=at(1), reason="retention")
    project(projection, kept, removed)
    row = view.artifacts[kept.id]
    assert (row["tags"], row["updated_at"]) == (["x"], at(4))
    assert [(p["style"], p["sha256"][0]) for p in row["previews"]] == [("t", "b"), ("s", "c")]  # the newer one last
    assert removed.id not in view.artifacts


def test_a_variation_set_and_an_erasure() -> None:
    projection, view = artifacts()
    take = store()
    made = VariationSet.create(
        id=uuid4(), owner="alice", at=NOW, session_id=take.session_id, base_artifact_id=None, query="q", model=None,
        style_variety=0.5, temperatures=[0.2, 0.9], outcomes={0: take, 1: "too hot"},
    )
    project(projection, take, made)
    members = view.variation_sets[made.id].members
    assert [(m["index"], m["status"]) for m in members] == [(0, "stored"), (1, "failed")]
    assert members[0]["artifact_id"] == str(take.id)  # as JSON
    bobs = store(owner="bob")
    project(projection, bobs, erasure_of("alice"))
    assert list(view.artifacts) == [bobs.id] and view.variation_sets == {}
