"""Optimizations read model: each optimization's summary, its rounds and its trials."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import orjson

from domain.optimization import OptimizationBegun, OptimizationEnded
from domain.round import Round
from domain.session import Session
from domain.trial import Trial
from projections.view import Projection, View, handles


def trial_entry(e: Trial.Recorded) -> bytes:
    """The trial as optimizations.history shows it (contract_optimization.TrialEntry), as JSON."""
    return orjson.dumps(
        {
            "trial_index": e.trial_index,
            "score": e.score,
            "candidate": e.candidate.payload if e.candidate else None,
            "candidate_id": e.candidate.id if e.candidate else None,
            "metrics": e.metrics,
            "dataset": e.dataset,
            "extra": e.extras,
            "best_so_far": e.best_so_far,
            "timestamp": e.timestamp,
        }
    )


class TrialRow(NamedTuple):
    optimization_id: UUID
    trial_index: int
    id: UUID
    round_index: int
    candidate_id: str | None
    candidate_kind: str | None
    candidate: Any  # the candidate's payload
    score: float | None
    metrics: dict[str, Any]
    dataset: str | None
    extra: dict[str, Any]
    best_so_far: float | None
    improved: bool
    created_at: datetime
    entry: str  # the trial in the history's shape, as JSON (trial_entry)


class TrialTotals(NamedTuple):
    """What trials add to their round and optimization: how many, the best so far after
    them, the improving trial's index and candidate (None: none improved), the latest
    time, and the bytes of their history entries."""

    added: int
    best_so_far: float | None
    improved_index: int | None
    improved_candidate: Any
    at: datetime
    entry_bytes: int


def later_totals(earlier: TrialTotals, later: TrialTotals) -> TrialTotals:
    """Two runs of trials as one: the later's best wins, an improvement sticks."""
    improved = later.improved_index is not None
    return TrialTotals(
        earlier.added + later.added,
        later.best_so_far,
        later.improved_index if improved else earlier.improved_index,
        later.improved_candidate if improved else earlier.improved_candidate,
        max(earlier.at, later.at),
        earlier.entry_bytes + later.entry_bytes,
    )


class OptimizationsView(View):
    @abstractmethod
    def add_optimization(self, optimization_id: UUID, owner: str, name: str, at: datetime) -> None: ...

    @abstractmethod
    def rename_optimization(self, optimization_id: UUID, name: str) -> None: ...

    @abstractmethod
    def describe_optimization(
        self, optimization_id: UUID, project: str | None, dataset: str | None, optimizer: str | None, direction: str
    ) -> None: ...

    @abstractmethod
    def start_round(
        self, optimization_id: UUID, round_index: int, round_id: UUID, first_trial_index: int,
        extras: dict[str, Any], best_so_far: float | None, at: datetime,
    ) -> None:
        """A new round, counted in its optimization (updated at `at` unless later)."""

    @abstractmethod
    def add_trial(self, row: TrialRow) -> None: ...

    @abstractmethod
    def count_trials(self, round_id: UUID, optimization_id: UUID, totals: TrialTotals) -> None:
        """Trials added to the round and the optimization (whose best is the improving trial's);
        an optimization with invalid trials has its corrected history brought up to date."""

    @abstractmethod
    def set_trial_validity(
        self, optimization_id: UUID, trial_index: int, reason: str | None, counted: int, at: datetime
    ) -> None:
        """The trial invalid for `reason` since `at` (None: valid again), `counted` (+1 or -1)
        in the optimization's invalid trials, and its corrected history brought up to date."""

    @abstractmethod
    def end_round(
        self, round_id: UUID, at: datetime, extras: dict[str, Any], best_score: float | None, best_candidate: Any,
        best_so_far: float | None, candidates: list[Any] | None, stop_reason: str | None,
    ) -> None:
        """The round ended: it takes no more trials, and its history entries are joined once."""

    @abstractmethod
    def stamp_round_stop(self, round_id: UUID, reason: str) -> None: ...

    @abstractmethod
    def stop_optimization(self, optimization_id: UUID, reason: str | None, at: datetime) -> None:
        """The optimization stopped, and its latest round with it."""


class OptimizationsProjection(Projection[OptimizationsView]):
    name = "optimizations"
    version = 6  # v5: invalidated trials; v6: content sealed under its owner's key

    @handles(Session.Created)
    def session_created(self, e: Session.Created) -> None:
        if e.kind == "optimization":
            self.view.add_optimization(e.originator_id, e.owner, e.name, e.timestamp)

    @handles(Session.Renamed)
    def session_renamed(self, e: Session.Renamed) -> None:
        self.view.rename_optimization(e.originator_id, e.name)

    @handles(OptimizationBegun)
    def optimization_begun(self, e: OptimizationBegun) -> None:
        self.view.describe_optimization(e.originator_id, e.project, e.dataset, e.optimizer, e.direction)

    @handles(Round.Started)
    def round_started(self, e: Round.Started) -> None:
        self.view.start_round(
            e.optimization_id, e.round_index, e.originator_id, e.first_trial_index, e.extras, e.best_so_far, e.timestamp
        )

    @handles(Trial.Recorded)
    def trial_recorded(self, e: Trial.Recorded) -> None:
        candidate = e.candidate
        entry = trial_entry(e)
        self.view.add_trial(TrialRow(
            e.optimization_id, e.trial_index, e.originator_id, e.round_index,
            candidate.id if candidate else None, candidate.kind if candidate else None,
            candidate.payload if candidate else None, e.score, e.metrics, e.dataset, e.extras, e.best_so_far,
            e.improved, e.timestamp, entry.decode(),
        ))
        improved_index = e.trial_index if e.improved else None
        improved_candidate = candidate.payload if (candidate and e.improved) else None
        totals = TrialTotals(1, e.best_so_far, improved_index, improved_candidate, e.timestamp, len(entry))
        self.view.count_trials(e.round_id, e.optimization_id, totals)

    @handles(Trial.Invalidated)
    def trial_invalidated(self, e: Trial.Invalidated) -> None:
        self.view.set_trial_validity(e.optimization_id, e.trial_index, e.reason, 1, e.timestamp)

    @handles(Trial.Restored)
    def trial_restored(self, e: Trial.Restored) -> None:
        self.view.set_trial_validity(e.optimization_id, e.trial_index, None, -1, e.timestamp)

    @handles(Round.Ended)
    def round_ended(self, e: Round.Ended) -> None:
        self.view.end_round(
            e.originator_id, e.timestamp, e.extras, e.best_score, e.best_candidate, e.best_so_far, e.candidates,
            e.stop_reason,
        )

    @handles(Round.StopStamped)
    def round_stop_stamped(self, e: Round.StopStamped) -> None:
        self.view.stamp_round_stop(e.originator_id, e.reason)

    @handles(OptimizationEnded)
    def optimization_ended(self, e: OptimizationEnded) -> None:
        self.view.stop_optimization(e.originator_id, e.reason, e.timestamp)
