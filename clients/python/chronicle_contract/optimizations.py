"""The wire contract of optimization history: rounds, trials, candidates and their queries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, Field, FiniteFloat, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from chronicle_contract.base import (
    Command,
    JsonObject,
    Offset,
    Page,
    PageCursor,
    Query,
    Reply,
    Request,
    Tags,
    Text,
    Written,
    check_json_size,
    check_json_values,
    empty_list,
    empty_object,
)
from chronicle_contract.values import (
    MAX_CANDIDATE_ID,
    MAX_INVALID_REASON,
    MAX_LABEL,
    MAX_SESSION_DESCRIPTION,
    MAX_SESSION_NAME,
    MAX_STOP_REASON,
    Direction,
    improves,
)

JsonValue = Annotated[Any, AfterValidator(check_json_values), AfterValidator(check_json_size)]


MAX_TRIALS_PER_REQUEST = 1_000
MAX_INDEX = 2**31 - 1  # round and trial indexes (a Postgres integer)


Label = Annotated[str, Text(MAX_LABEL)]


StopReason = Annotated[str, Text(MAX_STOP_REASON)]


class TrialFields(Request):
    candidate: JsonValue = Field(default=None, description="chat prompt, prompts by agent, tool bundle, parameters")
    candidate_id: Annotated[str, Text(MAX_CANDIDATE_ID)] | None = Field(
        default=None, description="stable id; default: the candidate's own `id`, else a digest of it"
    )
    score: FiniteFloat | None = None
    metrics: JsonObject = empty_object()
    dataset: Label | None = None
    extras: JsonObject = empty_object(description="parents, origin and ops here feed candidate lineage")


def normalized_round(row: dict[str, Any], direction: Direction) -> dict[str, Any]:
    """A round in the normalized history shape, from what a client recorded (the service
    builds the same from its read model, services/optimizations/queries.py); an open round's best is its
    best trial so far, candidates are those given when the round ended."""
    trials = row["trials"]
    ended = row["ended_at"] is not None
    best_trial = None
    for trial in trials:
        if improves(direction, trial["score"], best_trial["score"] if best_trial else None):
            best_trial = trial
    return {
        "round_index": row["round_index"],
        "round_id": row["round_id"],
        "trials": trials,
        "candidates": row["candidates"] or [],
        "best_score": row["best_score"] if ended else (best_trial["score"] if best_trial else None),
        "best_candidate": row["best_candidate"] if ended else (best_trial["candidate"] if best_trial else None),
        "stop_reason": row["stop_reason"],
        "stopped": row["stopped"],
        "best_so_far": row["best_so_far"],
        "timestamp": row["started_at"],
        "ended_at": row["ended_at"],
        "extra": {**row["start_extras"], **(row["end_extras"] or {})},
    }


class OptimizationStarted(Written):
    optimization_id: UUID


class RoundStarted(Written):
    optimization_id: UUID
    round_id: UUID
    round_index: int
    first_trial_index: int
    best_so_far: float | None
    timestamp: datetime


class TrialRecorded(Written):
    trial_id: UUID
    round_id: UUID
    round_index: int
    trial_index: int
    candidate_id: str | None
    score: float | None
    best_so_far: float | None
    timestamp: datetime


class TrialsRecorded(Written):
    trials: list[TrialRecorded]


class TrialValidity(Written):
    trial_id: UUID
    optimization_id: UUID
    trial_index: int
    valid: bool
    reason: str | None  # why it was invalidated, while it is
    timestamp: datetime


class RoundEnded(Written):
    round_id: UUID
    round_index: int
    best_score: float | None
    best_candidate: Any
    best_so_far: float | None
    stop_reason: str | None
    stopped: bool
    trial_count: int
    timestamp: datetime


class OptimizationStopped(Written):
    optimization_id: UUID
    stop_reason: str
    last_round_index: int | None


class OptimizationView(Reply):
    optimization_id: UUID
    name: str
    project: str | None
    dataset: str | None
    optimizer: str
    direction: Direction
    rounds: int
    trials: int
    best_score: float | None
    best_candidate: Any
    best_trial_index: int | None
    stopped: bool
    stop_reason: str | None
    invalid_trials: int = 0  # invalidated: the best (and compare's curve) leave them out
    created_at: datetime
    updated_at: datetime


class Invalidity(Reply):
    reason: str
    at: datetime


class TrialEntry(Reply):
    trial_index: int
    score: float | None
    candidate: Any
    candidate_id: str | None
    metrics: dict[str, Any]
    dataset: str | None
    extra: dict[str, Any]
    best_so_far: float | None  # as recorded
    timestamp: datetime
    # Only while the optimization has invalidated trials: the running best without them,
    # and on an invalidated trial, why and since when.
    corrected_best_so_far: float | None = None
    invalid: Invalidity | None = None


class RoundEntry(Reply):
    """One round in the normalized history shape (every key always present)."""

    round_index: int
    round_id: UUID
    trials: list[TrialEntry]
    candidates: list[Any]
    best_score: float | None
    best_candidate: Any
    stop_reason: str | None
    stopped: bool
    best_so_far: float | None
    timestamp: datetime
    ended_at: datetime | None
    extra: dict[str, Any]
    complete: bool = True  # False: part of a round too big for one reply; more trials follow
    # Only while the optimization has invalidated trials: the round's bests without them.
    corrected_best_score: float | None = None
    corrected_best_candidate: Any = None
    corrected_best_so_far: float | None = None


class PlannedPage(Reply):
    after_round: int
    until_round: int


class HistoryPage(Reply):
    optimization_id: UUID
    direction: Direction
    rounds: list[RoundEntry]
    next_after_round: int | None
    next_after_trial: int | None = None
    planned: list[PlannedPage] = []  # the pages after this one, cut as they would be: fetch them at once


class ParetoPoint(Reply):
    trial_index: int
    round_index: int
    candidate_id: str | None
    candidate: Any
    objectives: dict[str, float]


class ParetoFront(Reply):
    optimization_id: UUID
    scope: str
    objectives: list[str]
    directions: dict[str, Direction]
    front: list[ParetoPoint]
    considered: int


class CurvePoint(Reply):
    trial_index: int
    best_so_far: float


class Curve(Reply):
    optimization_id: UUID
    name: str
    direction: Direction
    trials: int
    best_score: float | None
    points: list[CurvePoint]


class Comparison(Reply):
    curves: list[Curve]


class Ancestor(Reply):
    candidate_id: str
    depth: int
    parents: list[str]
    origin: str | None
    ops: list[Any] | None
    first_round_index: int
    first_trial_index: int
    best_score: float | None


class Lineage(Reply):
    """The candidate (depth 0) and its ancestors across rounds, nearest first."""

    optimization_id: UUID
    candidate_id: str
    lineage: list[Ancestor]


class StartOptimization(Command[OptimizationStarted], action="optimization.start"):
    name: Annotated[str, Text(MAX_SESSION_NAME)]
    optimizer: Label
    direction: Direction = "maximize"
    project: Label | None = None
    dataset: Label | None = None
    description: Annotated[str, Text(MAX_SESSION_DESCRIPTION, may_be_blank=True)] = ""
    tags: Tags = empty_list()
    metadata: JsonObject = empty_object()


class StartRound(Command[RoundStarted], action="round.start"):
    optimization_id: UUID
    round_index: int | None = Field(default=None, ge=0, le=MAX_INDEX, description="the next index when absent")
    extras: JsonObject = empty_object()


class RecordTrial(TrialFields, Command[TrialRecorded], action="trial.record"):
    round_id: UUID


class RecordTrials(Command[TrialsRecorded], action="trial.record_many"):
    """Up to 1,000 trials of one round at once (an evaluated population), numbered in order."""

    round_id: UUID
    trials: list[TrialFields] = Field(min_length=1, max_length=MAX_TRIALS_PER_REQUEST)


class EndRound(Command[RoundEnded], action="round.end"):
    round_id: UUID
    best_score: FiniteFloat | None = Field(default=None, description="default: the round's best trial score")
    best_candidate: JsonValue = Field(default=None, description="default: the round's best trial's candidate")
    stop_reason: StopReason | None = Field(default=None, description="also stops the optimization")
    candidates: list[JsonValue] | None = Field(default=None, max_length=10_000)
    extras: JsonObject = empty_object(description="e.g. pareto_front, selection_meta")


class InvalidateTrial(Command[TrialValidity], action="trial.invalidate"):
    """The trial stays in the history, marked invalid; bests, fronts and comparisons leave it out."""

    trial_id: UUID
    reason: Annotated[str, Text(MAX_INVALID_REASON)] = Field(description="why, e.g. scored on a leaked test set")


class RestoreTrial(Command[TrialValidity], action="trial.restore"):
    """Undo an invalidation: the trial counts again."""

    trial_id: UUID


class StopOptimization(Command[OptimizationStopped], action="optimization.stop"):
    optimization_id: UUID
    stop_reason: StopReason


class ListOptimizations(Query[Page[OptimizationView]], action="optimizations.list"):
    limit: int = Field(default=50, ge=1, le=100)
    offset: Offset = 0
    cursor: PageCursor = None
    project: Label | None = None
    optimizer: Label | None = None
    stopped: bool | None = None


class GetOptimization(Query[OptimizationView], action="optimizations.get"):
    optimization_id: UUID


class OptimizationHistory(Query[HistoryPage], action="optimizations.history"):
    optimization_id: UUID
    after_round: int | None = Field(default=None, ge=-1, le=MAX_INDEX, description="rounds with a greater index (paging)")
    after_trial: int | None = Field(
        default=None, ge=-1, le=MAX_INDEX, description="continue the round after `after_round` from this trial (a split round)"
    )
    until_round: int | None = Field(
        default=None, ge=0, le=MAX_INDEX, description="rounds up to this index only: a page another page planned"
    )
    max_trials: int = Field(
        default=2_000, ge=1, le=5_000, description="at most this many trials per page (replies also stay under ~768 KiB)"
    )


class ParetoQuery(Query[ParetoFront], action="optimizations.pareto"):
    optimization_id: UUID
    scope: Literal["last_round", "all"] = "last_round"
    objectives: list[Label] | None = Field(
        default=None, min_length=1, max_length=16, description="`score` or metric names; default: the score"
    )
    directions: dict[str, Direction] = empty_object(description="per objective, naming only objectives asked for (else invalid); default the optimization's")

    @field_validator("directions")
    @classmethod
    def names_objectives_asked_for(cls, directions: dict[str, Direction], info: ValidationInfo) -> dict[str, Direction]:
        # Refused as the request is decoded, before anything is read (objectives come first).
        if "objectives" not in info.data:  # (refused already)
            return directions
        unknown = set(directions) - set(info.data["objectives"] or ["score"])
        if unknown:
            raise PydanticCustomError(
                "objective", "directions name objectives not asked for: {names}", {"names": ", ".join(sorted(unknown))}
            )
        return directions


class CompareOptimizations(Query[Comparison], action="optimizations.compare"):
    optimization_ids: list[UUID] = Field(min_length=2, max_length=10)


class CandidateLineage(Query[Lineage], action="candidates.lineage"):
    optimization_id: UUID
    candidate_id: Annotated[str, Text(MAX_CANDIDATE_ID)]
    depth: int = Field(default=20, ge=1, le=1_000)
