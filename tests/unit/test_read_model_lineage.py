"""The lineage read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from domain.artifact import Artifact, RagExample
from domain.round import Round
from domain.trial import Candidate, Trial
from projections.lineage import LineageProjection, LineageView
from tests.unit.projected import NOW, erasure_of, project

PAGE = {"type": "page", "children": []}


class MemoryLineageView(LineageView):
    def __init__(self) -> None:
        self.artifacts: dict[UUID, dict[str, Any]] = {}
        self.rag_links: dict[tuple[UUID, str], dict[str, Any]] = {}
        self.candidates: dict[tuple[UUID, str], dict[str, Any]] = {}
        self.parents: set[tuple[UUID, str, str]] = set()

    def add_artifact(
        self, artifact_id: UUID, owner: str, parent_id: UUID | None, generation: int, variation_set_id: UUID | None,
        at: datetime,
    ) -> None:
        self.artifacts[artifact_id] = {"owner": owner, "parent_id": parent_id, "generation": generation, "removed": False}

    def link_example(
        self, artifact_id: UUID, example_id: str, owner: str, session_id: UUID, position: int, score: float, at: datetime
    ) -> None:
        self.rag_links[(artifact_id, example_id)] = {"owner": owner, "position": position, "score": score}

    def remove_artifact(self, artifact_id: UUID) -> None:
        self.artifacts[artifact_id]["removed"] = True
        self.rag_links = {k: r for k, r in self.rag_links.items() if k[0] != artifact_id}

    def add_candidate(
        self, optimization_id: UUID, candidate_id: str, owner: str, origin: str | None, ops: list[Any] | None,
        round_index: int, trial_index: int,
    ) -> None:
        self.candidates.setdefault(
            (optimization_id, candidate_id), {"owner": owner, "origin": origin, "first_trial_index": trial_index}
        )

    def add_candidate_parent(self, optimization_id: UUID, candidate_id: str, parent_id: str) -> None:
        self.parents.add((optimization_id, candidate_id, parent_id))

    def erase_owner(self, owner: str) -> None:
        gone = {k for k, r in self.candidates.items() if r["owner"] == owner}
        self.parents = {p for p in self.parents if p[:2] not in gone}
        self.candidates = {k: r for k, r in self.candidates.items() if k not in gone}
        self.rag_links = {k: r for k, r in self.rag_links.items() if r["owner"] != owner}
        self.artifacts = {k: r for k, r in self.artifacts.items() if r["owner"] != owner}


def lineage() -> tuple[LineageProjection, MemoryLineageView]:
    view = MemoryLineageView()
    return LineageProjection(view), view


def trials(owner: str, *candidates: Candidate | None) -> tuple[UUID, list[Any]]:
    """An optimization's round with one trial per candidate; its id and their events."""
    optimization_id = uuid4()
    round_ = Round.start(id=uuid4(), owner=owner, at=NOW, optimization_id=optimization_id, round_index=0,
                         direction="maximize", previous=None, extras={})
    recorded = []
    for n, candidate in enumerate(candidates):
        trial_id = uuid4()
        numbered = round_.attach_trial(at=NOW, trial_id=trial_id, score=float(n))
        recorded.append(Trial.record(
            id=trial_id, owner=owner, at=NOW, optimization_id=optimization_id, round_id=round_.id, round_index=0,
            numbered=numbered, candidate=candidate, metrics={}, dataset=None, extras={}, previous_best=None,
        ))
    return optimization_id, [e for trial in recorded for e in trial.collect_events()]


def test_artifacts_descend_and_examples_link_until_removed() -> None:
    projection, view = lineage()
    root = Artifact.store(id=uuid4(), owner="alice", at=NOW, session_id=uuid4(), parent=None, layout=PAGE)
    child = Artifact.store(id=uuid4(), owner="alice", at=NOW, session_id=root.session_id, parent=root, layout=PAGE,
                           rag_examples=[RagExample(id="a", score=0.9), RagExample(id="b", score=0.4)])
    project(projection, root, child)
    assert view.artifacts[child.id] == {"owner": "alice", "parent_id": root.id, "generation": 1, "removed": False}
    assert {k[1]: r["position"] for k, r in view.rag_links.items()} == {"a": 0, "b": 1}
    root.remove(at=NOW, reason="retention")
    project(projection, root)
    assert view.artifacts[root.id]["removed"]  # kept, marked: its descendants still trace back through it


def test_candidates_keep_where_they_first_came_from_and_gather_parents() -> None:
    projection, view = lineage()
    first = Candidate(id="c2", kind="prompts", payload="p", parents=("c1",), origin="mutation")
    again = Candidate(id="c2", kind="prompts", payload="p", parents=("c0",), origin="crossover")
    optimization_id, events = trials("alice", first, None, again)
    project(projection, events)
    assert view.candidates == {(optimization_id, "c2"): {"owner": "alice", "origin": "mutation", "first_trial_index": 0}}
    assert view.parents == {(optimization_id, "c2", "c1"), (optimization_id, "c2", "c0")}


def test_an_erasure_leaves_nothing_of_the_user() -> None:
    projection, view = lineage()
    _, events = trials("alice", Candidate(id="c", kind="prompts", payload="p", parents=("b",)))
    bobs = Artifact.store(id=uuid4(), owner="bob", at=NOW, session_id=uuid4(), parent=None, layout=PAGE)
    project(projection, events, bobs, erasure_of("alice"))
    assert (view.candidates, view.parents, list(view.artifacts)) == ({}, set(), [bobs.id])
