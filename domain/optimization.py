"""Optimizations: a Session of kind `optimization` that numbers its rounds and keeps score.

The optimizer says what it tried and how it scored; Chronicle stamps the rest (round and
trial indices, timestamps, best-so-far in the objective's direction, stop reasons). The
rounds and trials themselves are the Round and Trial aggregates (domain/rounds.py).
Rounds run one after another: a round starts when the previous one has ended, so trial
indices run on, gap-free, from one round into the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from domain.base import Aggregate, check_text
from domain.errors import Conflict, InvalidCommand

Direction = Literal["maximize", "minimize"]
MAX_LABEL = 200
MAX_STOP_REASON = 1_000


def improves(direction: Direction, score: float | None, best: float | None) -> bool:
    """Whether `score` beats `best` (no score never does; any score beats none)."""
    if score is None:
        return False
    if best is None:
        return True
    return score > best if direction == "maximize" else score < best


@dataclass
class OptimizationState:
    direction: Direction
    next_round_index: int = 0
    last_round_id: UUID | None = None
    stopped: bool = False
    stop_reason: str | None = None


class OptimizationBegun(Aggregate.Event):
    # Stored, audited and fed out under the name it had before (the contract's reply to
    # `optimization.start` is `OptimizationStarted`): the topic its events are stored with
    # is what the audit stream and the event feed name them by, and must not change.
    TOPIC: ClassVar[str] = "domain.optimization:OptimizationStarted"
    AGGREGATE = "Session"

    project: str | None
    dataset: str | None
    optimizer: str
    direction: Direction

    def apply(self, session: Any) -> None:
        session.optimization = OptimizationState(direction=self.direction)


class RoundOpened(Aggregate.Event):
    AGGREGATE = "Session"

    round_id: UUID
    round_index: int

    def apply(self, session: Any) -> None:
        session.optimization.next_round_index = self.round_index + 1
        session.optimization.last_round_id = self.round_id


class OptimizationEnded(Aggregate.Event):
    TOPIC: ClassVar[str] = "domain.optimization:OptimizationStopped"  # (as OptimizationBegun's)
    AGGREGATE = "Session"

    reason: str

    def apply(self, session: Any) -> None:
        session.optimization.stopped = True
        session.optimization.stop_reason = self.reason


class OptimizationAlreadyStopped(Conflict):
    pass


class Optimizing:
    """Commands a Session gains when it is an optimization; `optimization` is None otherwise."""

    id: UUID
    optimization: OptimizationState | None

    def start_optimization(
        self, *, at: datetime, project: str | None, dataset: str | None, optimizer: str, direction: Direction
    ) -> None:
        check_text("optimizer", optimizer, max_length=MAX_LABEL)
        for field, value in (("project", project), ("dataset", dataset)):
            if value is not None:
                check_text(field, value, max_length=MAX_LABEL)
        self.trigger_event(  # type: ignore[attr-defined]
            OptimizationBegun, timestamp=at, project=project, dataset=dataset, optimizer=optimizer, direction=direction
        )

    def running_optimization(self) -> OptimizationState:
        """This session's optimization state; refuses a plain session and a stopped optimization."""
        state = self.optimization
        self.check_open()  # type: ignore[attr-defined]  # a closed session takes no more rounds
        if state is None:
            raise InvalidCommand(
                f"session {self.id} is not an optimization", field="optimization_id", rule="kind_optimization"
            )
        if state.stopped:
            raise OptimizationAlreadyStopped(
                f"optimization {self.id} was stopped: {state.stop_reason}",
                field="optimization_id",
                rule="not_stopped",
                context={"stop_reason": state.stop_reason},
            )
        return state

    def open_round(self, *, at: datetime, round_id: UUID, round_index: int | None) -> int:
        """The index the next round gets: the one asked for (never reused), else the next."""
        state = self.running_optimization()
        index = state.next_round_index if round_index is None else round_index
        if index < state.next_round_index:
            raise Conflict(
                f"round index {index} is taken; the next free index is {state.next_round_index}",
                field="round_index",
                rule="unused",
                context={"next_round_index": state.next_round_index},
            )
        self.trigger_event(RoundOpened, timestamp=at, round_id=round_id, round_index=index)  # type: ignore[attr-defined]
        return index

    def stop_optimization(self, *, at: datetime, reason: str) -> None:
        check_text("stop_reason", reason, max_length=MAX_STOP_REASON)
        self.running_optimization()
        self.trigger_event(OptimizationEnded, timestamp=at, reason=reason)  # type: ignore[attr-defined]


def pareto_front(points: list[tuple[Any, tuple[float, ...]]], directions: tuple[Direction, ...]) -> list[Any]:
    """The keys of the points no other point dominates (at least as good in every
    objective, better in one), in the order given; equal points are all kept.
    O(n log n) for one or two objectives; for more, O(d × n log n) to sort and d × n
    operations on sets of n bits (bit_sets_front)."""
    signs = tuple(1.0 if d == "maximize" else -1.0 for d in directions)
    oriented = [(key, tuple(s * v for s, v in zip(signs, values, strict=True))) for key, values in points]
    if len(directions) > 2:
        return [oriented[i][0] for i in bit_sets_front([values for _, values in oriented])]
    # Best first in the first objective, so a point can only be dominated by one seen before.
    order = sorted(range(len(oriented)), key=lambda i: tuple(-v for v in oriented[i][1]))
    return [oriented[i][0] for i in sorted(two_objective_front(oriented, order))]


def two_objective_front(oriented: list[tuple[Any, tuple[float, ...]]], order: list[int]) -> list[int]:
    """One sweep: a point is on the front when no point better in the first objective is
    at least as good in the second, and none equal in the first is better in the second."""
    front: list[int] = []
    best_before = -math.inf  # the best second value among points better in the first
    group_first, group_best = None, -math.inf
    for i in order:
        first, second = oriented[i][1][0], oriented[i][1][-1]
        if first != group_first:
            best_before = max(best_before, group_best)
            group_first, group_best = first, second  # (the group's best comes first)
        if second == group_best and second > best_before:
            front.append(i)
    return front


def bit_sets_front(vectors: list[tuple[float, ...]]) -> list[int]:
    """The indices of the undominated vectors (larger is better), ascending.

    Comparing each point with the front costs n × front × d, and with many objectives
    nearly every point is on the front (2,000 × 16: 4 s). Instead, per objective, walk
    the points best first and give each the set of points at least as good in it (one
    bit a point, a Python int); a point's `covering` is the intersection over the
    objectives: the points at least as good in every one. It is undominated exactly when
    those are the points equal to it (itself included)."""
    n = len(vectors)
    covering = [(1 << n) - 1] * n
    for k in range(len(vectors[0]) if vectors else 0):
        column = [values[k] for values in vectors]
        ranked = sorted(range(n), key=column.__getitem__, reverse=True)
        at_least, start = 0, 0
        while start < n:
            end, value = start, column[ranked[start]]
            while end < n and column[ranked[end]] == value:  # ties: each is at least as good as the others
                at_least |= 1 << ranked[end]
                end += 1
            for i in ranked[start:end]:
                covering[i] &= at_least
            start = end
    equal: dict[tuple[float, ...], int] = {}
    for i, values in enumerate(vectors):
        equal[values] = equal.get(values, 0) | 1 << i
    return [i for i in range(n) if covering[i] == equal[vectors[i]]]


def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b
