"""The Trial aggregate: one evaluated candidate, as numbered and scored in its round."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from domain.base import Aggregate, check_text
from domain.errors import Conflict, InvalidCommand

MAX_CANDIDATE_ID = 200
MAX_ORIGIN = 100
MAX_PARENTS = 100
MAX_INVALID_REASON = 2_000

CandidateKind = Literal["chat", "prompts", "tools", "parameters", "text", "other"]


class Candidate(BaseModel):
    """What was tried: the optimizer's payload, a stable id, and where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: CandidateKind
    payload: Any
    parents: tuple[str, ...] = ()
    origin: str | None = None
    ops: list[Any] | None = None


def candidate_kind(payload: Any) -> CandidateKind:
    """chat prompt (messages), multi-agent prompts (name -> text), tool bundle, parameter set."""
    if isinstance(payload, str):
        return "text"
    if isinstance(payload, dict):
        if isinstance(payload.get("messages"), list):
            return "chat"
        if isinstance(payload.get("tools"), list):
            return "tools"
        if payload and all(isinstance(v, str) for v in payload.values()):
            return "prompts"
        if payload and all(isinstance(v, int | float | bool) or v is None for v in payload.values()):
            return "parameters"
    return "other"


def candidate_id_for(payload: Any) -> str:
    """A stable id: the payload's own string `id`, else a digest of its canonical JSON,
    so the same candidate tried in two rounds has one id."""
    if isinstance(payload, dict) and isinstance(payload.get("id"), str) and payload["id"]:
        return payload["id"]
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "c" + hashlib.sha256(canonical.encode()).hexdigest()[:24]


def make_candidate(payload: Any, candidate_id: str | None, extras: dict[str, Any]) -> Candidate | None:
    """The candidate of a trial, with its lineage from extras (parents, origin, ops)."""
    if payload is None:
        return None
    ident = candidate_id or candidate_id_for(payload)
    check_text("candidate_id", ident, max_length=MAX_CANDIDATE_ID)
    parents = extras.get("parents", [])
    if not isinstance(parents, list) or not all(isinstance(p, str) and p for p in parents):
        raise InvalidCommand("extras.parents must be a list of candidate ids", field="extras.parents", rule="type")
    if len(parents) > MAX_PARENTS:
        raise InvalidCommand(f"extras.parents may hold at most {MAX_PARENTS} ids", field="extras.parents", rule="max_items")
    origin = extras.get("origin")
    if origin is not None and not (isinstance(origin, str) and 0 < len(origin) <= MAX_ORIGIN):
        raise InvalidCommand(
            f"extras.origin must be text of 1 to {MAX_ORIGIN} characters", field="extras.origin", rule="type"
        )
    ops = extras.get("ops")
    if ops is not None and not isinstance(ops, list):
        raise InvalidCommand("extras.ops must be a list", field="extras.ops", rule="type")
    return Candidate(
        id=ident,
        kind=candidate_kind(payload),
        payload=payload,
        parents=tuple(dict.fromkeys(p for p in parents if p != ident)),
        origin=origin,
        ops=ops,
    )


class TrialAttributes:
    # What its events set (declared here, not on the aggregate: see domain/snapshot.py state_of).
    optimization_id: UUID
    round_id: UUID
    trial_index: int
    candidate: Candidate | None
    score: float | None
    invalid_reason: str | None  # set while the trial is invalidated


class Trial(TrialAttributes, Aggregate):
    """State: owner, optimization_id, round_id, trial_index, candidate, score, invalid_reason.

    A trial found to be unsound (scored on a leaked test set, by a buggy metric) is
    invalidated: it stays in the history, marked, and the read models recompute bests and
    fronts without it; restoring it undoes that. Both are events, so an audit shows who
    did which and when."""

    class Recorded(Aggregate.Created):
        optimization_id: UUID
        round_id: UUID
        round_index: int
        trial_index: int
        candidate: Candidate | None
        score: float | None
        metrics: dict[str, Any]
        dataset: str | None
        extras: dict[str, Any]
        best_so_far: float | None
        improved: bool  # this trial set a new best for the optimization

        def apply(self, trial: Trial) -> None:
            super().apply(trial)
            trial.optimization_id = self.optimization_id
            trial.round_id = self.round_id
            trial.trial_index = self.trial_index
            trial.candidate = self.candidate
            trial.score = self.score
            trial.invalid_reason = None

    class Invalidated(Aggregate.Event):
        optimization_id: UUID
        trial_index: int
        reason: str
        by: str  # the user who invalidated it

        def apply(self, trial: Trial) -> None:
            trial.invalid_reason = self.reason

    class Restored(Aggregate.Event):
        optimization_id: UUID
        trial_index: int
        by: str

        def apply(self, trial: Trial) -> None:
            trial.invalid_reason = None

    @classmethod
    def record(
        cls,
        *,
        id: UUID,
        owner: str,
        at: datetime,
        optimization_id: UUID,
        round_id: UUID,
        round_index: int,
        numbered: Any,  # the round's TrialAttached event
        candidate: Candidate | None,
        metrics: dict[str, Any],
        dataset: str | None,
        extras: dict[str, Any],
        previous_best: float | None,
    ) -> Trial:
        return cls._create(
            cls.Recorded,
            id=id,
            timestamp=at,
            owner=owner,
            optimization_id=optimization_id,
            round_id=round_id,
            round_index=round_index,
            trial_index=numbered.trial_index,
            candidate=candidate,
            score=numbered.score,
            metrics=metrics,
            dataset=dataset,
            extras=extras,
            best_so_far=numbered.best_so_far,
            improved=numbered.best_so_far != previous_best,
        )

    def invalidate(self, *, at: datetime, reason: str, by: str) -> None:
        check_text("reason", reason, max_length=MAX_INVALID_REASON)
        if self.invalid_reason is not None:
            raise Conflict(f"trial {self.trial_index} is already invalid", field="trial_id", rule="valid")
        self.trigger_event(
            self.Invalidated, timestamp=at, optimization_id=self.optimization_id, trial_index=self.trial_index,
            reason=reason, by=by,
        )

    def restore(self, *, at: datetime, by: str) -> None:
        if self.invalid_reason is None:
            raise Conflict(f"trial {self.trial_index} is not invalid", field="trial_id", rule="invalid")
        self.trigger_event(
            self.Restored, timestamp=at, optimization_id=self.optimization_id, trial_index=self.trial_index, by=by
        )
