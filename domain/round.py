"""The Round aggregate: one round of an optimization, the trials attached to it, its end."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain.base import Aggregate, check_text
from domain.errors import Conflict
from domain.optimization import MAX_STOP_REASON, Direction, improves
from domain.snapshot import state_of


class RoundAlreadyEnded(Conflict):
    pass


class RoundAttributes:
    """What a snapshot keeps (domain/snapshot.py): every attribute the events set."""

    optimization_id: UUID
    round_index: int
    direction: Direction
    first_trial_index: int
    best_so_far: float | None
    trial_count: int
    best_score: float | None
    best_trial_id: UUID | None
    ended: bool
    stop_reason: str | None


class Round(RoundAttributes, Aggregate):
    """State: owner, optimization_id, round_index, direction, first_trial_index,
    trial_count, best_so_far, best_score, best_trial_id, ended, stop_reason."""

    State = state_of(RoundAttributes)

    class Started(Aggregate.Created):
        optimization_id: UUID
        round_index: int
        direction: Direction
        first_trial_index: int
        best_so_far: float | None  # the optimization's best before this round
        extras: dict[str, Any]

        def apply(self, round: Round) -> None:
            super().apply(round)
            round.optimization_id = self.optimization_id
            round.round_index = self.round_index
            round.direction = self.direction
            round.first_trial_index = self.first_trial_index
            round.best_so_far = self.best_so_far
            round.trial_count = 0
            round.best_score = None
            round.best_trial_id = None
            round.ended = False
            round.stop_reason = None

    class TrialAttached(Aggregate.Event):
        trial_id: UUID
        trial_index: int
        score: float | None
        best_so_far: float | None

        def apply(self, round: Round) -> None:
            round.trial_count += 1
            round.best_so_far = self.best_so_far
            if improves(round.direction, self.score, round.best_score):
                round.best_score = self.score
                round.best_trial_id = self.trial_id

    class Ended(Aggregate.Event):
        best_score: float | None
        best_candidate: Any
        best_trial_id: UUID | None
        stop_reason: str | None
        candidates: list[Any] | None
        extras: dict[str, Any]
        trial_count: int
        best_so_far: float | None

        def apply(self, round: Round) -> None:
            round.ended = True
            round.stop_reason = self.stop_reason

    class StopStamped(Aggregate.Event):
        """The optimization stopped after this round ended without saying why."""

        reason: str

        def apply(self, round: Round) -> None:
            round.stop_reason = self.reason

    @classmethod
    def start(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        optimization_id: UUID,
        round_index: int,
        direction: Direction,
        previous: Round | None,
        extras: dict[str, Any],
    ) -> Round:
        if previous is not None and not previous.ended:
            raise Conflict(
                f"round {previous.round_index} has not ended; end it before starting the next",
                field="optimization_id",
                rule="previous_round_ended",
                context={"open_round_id": str(previous.id), "open_round_index": previous.round_index},
            )
        return cls._create(
            cls.Started,
            id=id,
            timestamp=at,
            owner=owner,
            optimization_id=optimization_id,
            round_index=round_index,
            direction=direction,
            first_trial_index=previous.next_trial_index if previous else 0,
            best_so_far=previous.best_so_far if previous else None,
            extras=extras,
        )

    @property
    def next_trial_index(self) -> int:
        return self.first_trial_index + self.trial_count

    def attach_trial(self, *, at: datetime, trial_id: UUID, score: float | None) -> Round.TrialAttached:
        """Number a trial and update best-so-far; the event says what was stamped."""
        self.check_open()
        best = score if improves(self.direction, score, self.best_so_far) else self.best_so_far
        self.trigger_event(
            self.TrialAttached,
            timestamp=at,
            trial_id=trial_id,
            trial_index=self.next_trial_index,
            score=score,
            best_so_far=best,
        )
        return self.pending_events[-1]  # type: ignore[return-value]

    def end(
        self,
        *,
        at: datetime,
        best_score: float | None,
        best_candidate: Any,
        stop_reason: str | None,
        candidates: list[Any] | None,
        extras: dict[str, Any],
    ) -> Round.Ended:
        """End the round; a best score or candidate not given is the best trial's."""
        self.check_open()
        if stop_reason is not None:
            check_text("stop_reason", stop_reason, max_length=MAX_STOP_REASON)
        self.trigger_event(
            self.Ended,
            timestamp=at,
            best_score=self.best_score if best_score is None else best_score,
            best_candidate=best_candidate,
            best_trial_id=self.best_trial_id,
            stop_reason=stop_reason,
            candidates=candidates,
            extras=extras,
            trial_count=self.trial_count,
            best_so_far=self.best_so_far,
        )
        return self.pending_events[-1]  # type: ignore[return-value]

    def stamp_stop(self, *, at: datetime, reason: str, best_candidate: Any) -> None:
        """The optimization stopped: an open round ends with the reason, an ended one
        without a reason of its own gets it stamped."""
        if not self.ended:
            self.end(at=at, best_score=None, best_candidate=best_candidate, stop_reason=reason, candidates=None, extras={})
        elif self.stop_reason is None:
            self.trigger_event(self.StopStamped, timestamp=at, reason=reason)

    def check_open(self) -> None:
        if self.ended:
            raise RoundAlreadyEnded(
                f"round {self.round_index} has ended", field="round_id", rule="open", context={"round_index": self.round_index}
            )
