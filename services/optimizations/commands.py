"""Command handlers of optimization history: optimizations, rounds, trials."""

from __future__ import annotations

from typing import Any

from chronicle_contract.optimizations import (
    EndRound,
    InvalidateTrial,
    OptimizationStarted,
    OptimizationStopped,
    RecordTrial,
    RecordTrials,
    RestoreTrial,
    RoundEnded,
    RoundStarted,
    StartOptimization,
    StartRound,
    StopOptimization,
    TrialFields,
    TrialRecorded,
    TrialsRecorded,
    TrialValidity,
)
from chronicle_contract.sessions import CreateSession

from domain.round import Round
from domain.session import Session
from domain.trial import Trial, make_candidate
from services.runtime.sessions import open_session
from services.runtime.unit_of_work import UnitOfWork


def start_optimization(cmd: StartOptimization, uow: UnitOfWork) -> OptimizationStarted:
    fields = cmd.model_dump(include={"name", "description", "tags", "metadata"})
    session = open_session(CreateSession(kind="optimization", **fields), uow)
    session.start_optimization(
        at=uow.now, project=cmd.project, dataset=cmd.dataset, optimizer=cmd.optimizer, direction=cmd.direction
    )
    return OptimizationStarted(optimization_id=session.id)


def start_round(cmd: StartRound, uow: UnitOfWork) -> RoundStarted:
    optimization = uow.get(Session, cmd.optimization_id)
    state = optimization.running_optimization()
    previous = uow.get(Round, state.last_round_id) if state.last_round_id else None
    round_id = uow.new_id()
    index = optimization.open_round(at=uow.now, round_id=round_id, round_index=cmd.round_index)
    round = uow.add(
        Round.start(
            id=round_id,
            owner=uow.user_id,
            at=uow.now,
            optimization_id=optimization.id,
            round_index=index,
            direction=state.direction,
            previous=previous,
            extras=cmd.extras,
        )
    )
    return RoundStarted(
        optimization_id=optimization.id,
        round_id=round.id,
        round_index=index,
        first_trial_index=round.first_trial_index,
        best_so_far=round.best_so_far,
        timestamp=round.created_on,
    )


def record_trial(cmd: RecordTrial, uow: UnitOfWork) -> TrialRecorded:
    return record_in(uow.get(Round, cmd.round_id), cmd, uow)


def record_trials(cmd: RecordTrials, uow: UnitOfWork) -> TrialsRecorded:
    """Many trials of one round in one request, numbered in the order given."""
    round = uow.get(Round, cmd.round_id)
    return TrialsRecorded(trials=[record_in(round, trial, uow) for trial in cmd.trials])


def record_in(round: Round, cmd: TrialFields, uow: UnitOfWork) -> TrialRecorded:
    candidate = make_candidate(cmd.candidate, cmd.candidate_id, cmd.extras)
    best_before = round.best_so_far
    trial_id = uow.new_id()
    numbered = round.attach_trial(at=uow.now, trial_id=trial_id, score=cmd.score)
    uow.add(
        Trial.record(
            id=trial_id,
            owner=uow.user_id,
            at=uow.now,
            optimization_id=round.optimization_id,
            round_id=round.id,
            round_index=round.round_index,
            numbered=numbered,
            candidate=candidate,
            metrics=cmd.metrics,
            dataset=cmd.dataset,
            extras=cmd.extras,
            previous_best=best_before,
        )
    )
    return TrialRecorded(
        trial_id=trial_id,
        round_id=round.id,
        round_index=round.round_index,
        trial_index=numbered.trial_index,
        candidate_id=candidate.id if candidate else None,
        score=cmd.score,
        best_so_far=numbered.best_so_far,
        timestamp=numbered.timestamp,
    )


def best_trial_candidate(round: Round, uow: UnitOfWork) -> Any:
    if round.best_trial_id is None:
        return None
    trial = uow.get(Trial, round.best_trial_id)
    return trial.candidate.payload if trial.candidate else None


def end_round(cmd: EndRound, uow: UnitOfWork) -> RoundEnded:
    round = uow.get(Round, cmd.round_id)
    round.check_open()
    given = cmd.model_fields_set
    ended = round.end(
        at=uow.now,
        best_score=cmd.best_score,
        best_candidate=cmd.best_candidate if "best_candidate" in given else best_trial_candidate(round, uow),
        stop_reason=cmd.stop_reason,
        candidates=cmd.candidates,
        extras=cmd.extras,
    )
    if cmd.stop_reason is not None:
        uow.get(Session, round.optimization_id).stop_optimization(at=uow.now, reason=cmd.stop_reason)
    return RoundEnded(
        round_id=round.id,
        round_index=round.round_index,
        best_score=ended.best_score,
        best_candidate=ended.best_candidate,
        best_so_far=ended.best_so_far,
        stop_reason=ended.stop_reason,
        stopped=cmd.stop_reason is not None,
        trial_count=ended.trial_count,
        timestamp=ended.timestamp,
    )


def stop_optimization(cmd: StopOptimization, uow: UnitOfWork) -> OptimizationStopped:
    optimization = uow.get(Session, cmd.optimization_id)
    state = optimization.running_optimization()
    last = uow.get(Round, state.last_round_id) if state.last_round_id else None
    optimization.stop_optimization(at=uow.now, reason=cmd.stop_reason)
    if last is not None:
        candidate = None if last.ended else best_trial_candidate(last, uow)
        last.stamp_stop(at=uow.now, reason=cmd.stop_reason, best_candidate=candidate)
    return OptimizationStopped(
        optimization_id=optimization.id,
        stop_reason=cmd.stop_reason,
        last_round_index=last.round_index if last else None,
    )


def invalidate_trial(cmd: InvalidateTrial, uow: UnitOfWork) -> TrialValidity:
    trial = uow.get(Trial, cmd.trial_id)
    trial.invalidate(at=uow.now, reason=cmd.reason, by=uow.user_id)
    return validity(trial, uow)


def restore_trial(cmd: RestoreTrial, uow: UnitOfWork) -> TrialValidity:
    trial = uow.get(Trial, cmd.trial_id)
    trial.restore(at=uow.now, by=uow.user_id)
    return validity(trial, uow)


def validity(trial: Trial, uow: UnitOfWork) -> TrialValidity:
    return TrialValidity(
        trial_id=trial.id,
        optimization_id=trial.optimization_id,
        trial_index=trial.trial_index,
        valid=trial.invalid_reason is None,
        reason=trial.invalid_reason,
        timestamp=uow.now,
    )
