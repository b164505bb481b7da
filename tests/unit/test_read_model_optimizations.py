"""The optimizations read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import orjson

from domain.round import Round
from domain.session import Session
from domain.trial import Candidate, Trial
from projections.optimizations import (
    OptimizationsProjection,
    OptimizationsView,
    TrialRow,
    TrialTotals,
    later_totals,
)
from tests.unit.projected import NOW, at, erasure_of, project


class MemoryOptimizationsView(OptimizationsView):
    """Summaries, rounds and trials; the corrected history's SQL is the Postgres view's own
    (tests/integration/test_optimization.py), here only the counts it starts from."""

    def __init__(self) -> None:
        self.optimizations: dict[UUID, dict[str, Any]] = {}
        self.rounds: dict[UUID, dict[str, Any]] = {}
        self.trials: dict[tuple[UUID, int], TrialRow] = {}
        self.invalid: dict[tuple[UUID, int], str] = {}

    def add_optimization(self, optimization_id: UUID, owner: str, name: str, at: datetime) -> None:
        self.optimizations[optimization_id] = {
            "owner": owner, "name": name, "round_count": 0, "trial_count": 0, "best_score": None,
            "best_trial_index": None, "best_candidate": None, "stopped": False, "stop_reason": None,
            "invalid_trials": 0, "updated_at": at,
        }

    def rename_optimization(self, optimization_id: UUID, name: str) -> None:
        if optimization_id in self.optimizations:
            self.optimizations[optimization_id]["name"] = name

    def describe_optimization(
        self, optimization_id: UUID, project: str | None, dataset: str | None, optimizer: str | None, direction: str
    ) -> None:
        self.optimizations[optimization_id].update(project=project, dataset=dataset, optimizer=optimizer, direction=direction)

    def start_round(
        self, optimization_id: UUID, round_index: int, round_id: UUID, first_trial_index: int,
        extras: dict[str, Any], best_so_far: float | None, at: datetime,
    ) -> None:
        self.rounds[round_id] = {
            "optimization_id": optimization_id, "round_index": round_index, "first_trial_index": first_trial_index,
            "trial_count": 0, "trial_bytes": 0, "best_so_far": best_so_far, "ended": False, "stop_reason": None,
            "stopped": False, "trials": None,
        }
        summary = self.optimizations[optimization_id]
        summary.update(round_count=summary["round_count"] + 1, updated_at=max(summary["updated_at"], at))

    def add_trial(self, row: TrialRow) -> None:
        self.trials[(row.optimization_id, row.trial_index)] = row

    def count_trials(self, round_id: UUID, optimization_id: UUID, totals: TrialTotals) -> None:
        round_ = self.rounds[round_id]
        round_.update(trial_count=round_["trial_count"] + totals.added, best_so_far=totals.best_so_far,
                      trial_bytes=round_["trial_bytes"] + totals.entry_bytes)
        summary = self.optimizations[optimization_id]
        summary.update(trial_count=summary["trial_count"] + totals.added, best_score=totals.best_so_far,
                       updated_at=max(summary["updated_at"], totals.at))
        if totals.improved_index is not None:
            summary.update(best_trial_index=totals.improved_index, best_candidate=totals.improved_candidate)

    def set_trial_validity(
        self, optimization_id: UUID, trial_index: int, reason: str | None, counted: int, at: datetime
    ) -> None:
        if reason is None:
            self.invalid.pop((optimization_id, trial_index), None)
        else:
            self.invalid[(optimization_id, trial_index)] = reason
        self.optimizations[optimization_id]["invalid_trials"] += counted

    def end_round(
        self, round_id: UUID, at: datetime, extras: dict[str, Any], best_score: float | None, best_candidate: Any,
        best_so_far: float | None, candidates: list[Any] | None, stop_reason: str | None,
    ) -> None:
        round_ = self.rounds[round_id]
        first, count = round_["first_trial_index"], round_["trial_count"]
        entries = [self.trials[(round_["optimization_id"], i)].entry for i in range(first, first + count)]
        round_.update(ended=True, best_score=best_score, best_so_far=best_so_far, stop_reason=stop_reason,
                      trials="[" + ",".join(entries) + "]")

    def stamp_round_stop(self, round_id: UUID, reason: str) -> None:
        self.rounds[round_id]["stop_reason"] = reason

    def stop_optimization(self, optimization_id: UUID, reason: str | None, at: datetime) -> None:
        self.optimizations[optimization_id].update(stopped=True, stop_reason=reason)
        latest = max((r for r in self.rounds.values() if r["optimization_id"] == optimization_id),
                     key=lambda r: r["round_index"])
        latest["stopped"] = True

    def erase_owner(self, owner: str) -> None:
        mine = {i for i, row in self.optimizations.items() if row["owner"] == owner}
        self.trials = {k: row for k, row in self.trials.items() if k[0] not in mine}
        self.rounds = {k: row for k, row in self.rounds.items() if row["optimization_id"] not in mine}
        self.optimizations = {i: row for i, row in self.optimizations.items() if i not in mine}


class Run:
    """An optimization driven through its aggregates, as the command handlers drive them."""

    def __init__(self, owner: str = "alice") -> None:
        self.owner = owner
        self.session = Session.create(id=uuid4(), owner=owner, at=NOW, name="tuning", kind="optimization")
        self.session.start_optimization(at=NOW, project="p", dataset="d", optimizer="evo", direction="maximize")
        self.events: list[Any] = list(self.session.collect_events())
        self.best: float | None = None

    def round(self, index: int, previous: Round | None = None) -> Round:
        round_ = Round.start(id=uuid4(), owner=self.owner, at=at(index), optimization_id=self.session.id,
                             round_index=index, direction="maximize", previous=previous, extras={"g": index})
        self.events += round_.collect_events()
        return round_

    def trial(self, round_: Round, score: float, candidate: str) -> Trial:
        trial_id = uuid4()
        numbered = round_.attach_trial(at=NOW, trial_id=trial_id, score=score)
        trial = Trial.record(
            id=trial_id, owner=self.owner, at=NOW, optimization_id=self.session.id, round_id=round_.id,
            round_index=round_.round_index, numbered=numbered,
            candidate=Candidate(id=candidate, kind="prompts", payload={"text": candidate}), metrics={"m": score},
            dataset=None, extras={}, previous_best=self.best,
        )
        self.best = numbered.best_so_far
        self.events += [*round_.collect_events(), *trial.collect_events()]
        return trial


def optimizations() -> tuple[OptimizationsProjection, MemoryOptimizationsView]:
    view = MemoryOptimizationsView()
    return OptimizationsProjection(view), view


def test_rounds_and_trials_add_up_and_the_best_is_the_improving_trials() -> None:
    projection, view = optimizations()
    run = Run()
    first = run.round(0)
    run.trial(first, 0.5, "a")
    run.trial(first, 0.9, "b")
    first.end(at=at(1), best_score=0.9, best_candidate={"text": "b"}, stop_reason=None, candidates=None, extras={})
    run.events += first.collect_events()
    second = run.round(1, previous=first)
    run.trial(second, 0.7, "c")  # no improvement
    run.session.stop_optimization(at=at(2), reason="budget")
    run.events += run.session.collect_events()
    project(projection, run.events)

    summary = view.optimizations[run.session.id]
    assert (summary["round_count"], summary["trial_count"], summary["best_score"]) == (2, 3, 0.9)
    assert (summary["best_trial_index"], summary["best_candidate"]) == (1, {"text": "b"})
    assert (summary["stopped"], summary["stop_reason"], summary["optimizer"]) == (True, "budget", "evo")
    ended = view.rounds[first.id]
    assert [entry["candidate_id"] for entry in orjson.loads(ended["trials"])] == ["a", "b"]
    assert ended["trial_bytes"] == sum(len(t.entry) for t in view.trials.values() if t.round_index == 0)
    assert view.rounds[second.id]["stopped"] and not ended["stopped"]
    entry = orjson.loads(view.trials[(run.session.id, 2)].entry)
    assert (entry["score"], entry["best_so_far"], entry["metrics"]) == (0.7, 0.9, {"m": 0.7})


def test_invalidated_trials_are_counted_until_restored() -> None:
    projection, view = optimizations()
    run = Run()
    round_ = run.round(0)
    trial = run.trial(round_, 0.5, "a")
    trial.invalidate(at=at(1), reason="leaked test data", by="alice")
    run.events += trial.collect_events()
    project(projection, run.events)
    assert view.optimizations[run.session.id]["invalid_trials"] == 1
    assert view.invalid == {(run.session.id, 0): "leaked test data"}
    trial.restore(at=at(2), by="alice")
    project(projection, trial)
    assert (view.optimizations[run.session.id]["invalid_trials"], view.invalid) == (0, {})


def test_later_totals_keep_an_earlier_improvement_and_take_the_later_best() -> None:
    improved = TrialTotals(2, 0.9, 1, "b", at(1), 10)
    flat = TrialTotals(1, 0.9, None, None, at(2), 5)
    assert later_totals(improved, flat) == TrialTotals(3, 0.9, 1, "b", at(2), 15)
    assert later_totals(flat, improved).improved_index == 1


def test_an_erasure_leaves_nothing_of_the_user() -> None:
    projection, view = optimizations()
    alices, bobs = Run("alice"), Run("bob")
    alices.trial(alices.round(0), 1.0, "a")
    project(projection, alices.events, bobs.events, erasure_of("alice"))
    assert list(view.optimizations) == [bobs.session.id] and view.trials == {} and view.rounds == {}
