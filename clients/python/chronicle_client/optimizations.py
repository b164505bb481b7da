"""The client's optimization side: the raw commands and queries, and OptimizationState,
the helper an optimizer author drives (start_round, record_trial, end_round, finalize_stop)."""

from __future__ import annotations

import asyncio
import builtins  # the client's `list` methods shadow the name inside their classes
import copy
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from chronicle_contract.base import Page
from chronicle_contract.optimizations import (
    CandidateLineage,
    CompareOptimizations,
    Comparison,
    EndRound,
    GetOptimization,
    HistoryPage,
    InvalidateTrial,
    Lineage,
    ListOptimizations,
    OptimizationHistory,
    OptimizationStarted,
    OptimizationStopped,
    OptimizationView,
    ParetoFront,
    ParetoQuery,
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
    normalized_round,
)

from chronicle_client.trial_outbox import TrialOutbox

if TYPE_CHECKING:
    from chronicle_client.transport import Transport

# Planned history pages asked for at a time, in order, each validated as it comes. All at
# once, the service and Postgres share the cores out among them and they come back
# together, late; a few at a time, the first comes sooner and the service cuts the next
# ones while the client validates it (measured: 3-8 ms less per 100 x 100 history).
PAGES_IN_FLIGHT = 3


class Optimizations:
    """`client.optimizations`: one method per command and query."""

    def __init__(self, client: Transport):
        self._client = client

    async def start(self, *, idempotency_key: str | None = None, **fields: Any) -> OptimizationStarted:
        request = self._client.build(StartOptimization, **fields)
        return await self._client.command(request, idempotency_key)

    async def start_round(
        self, optimization_id: UUID, *, idempotency_key: str | None = None, **fields: Any
    ) -> RoundStarted:
        request = self._client.build(StartRound, optimization_id=optimization_id, **fields)
        return await self._client.command(request, idempotency_key)

    async def record_trial(
        self, round_id: UUID, *, idempotency_key: str | None = None, **fields: Any
    ) -> TrialRecorded:
        request = self._client.build(RecordTrial, round_id=round_id, **fields)
        return await self._client.command(request, idempotency_key)

    async def record_trials(
        self, round_id: UUID, trials: builtins.list[dict[str, Any]], *, idempotency_key: str | None = None
    ) -> TrialsRecorded:
        """Up to 1,000 trials (each: candidate, score, metrics, dataset, extras, candidate_id) at once."""
        request = self._client.build(RecordTrials, round_id=round_id, trials=trials)
        return await self._client.command(request, idempotency_key)

    async def invalidate_trial(
        self, trial_id: UUID, reason: str, *, idempotency_key: str | None = None
    ) -> TrialValidity:
        """Mark a trial unsound: it stays in the history, marked, and bests, fronts and
        comparisons leave it out (the history also keeps the curve as first recorded)."""
        request = self._client.build(InvalidateTrial, trial_id=trial_id, reason=reason)
        return await self._client.command(request, idempotency_key)

    async def restore_trial(self, trial_id: UUID, *, idempotency_key: str | None = None) -> TrialValidity:
        request = self._client.build(RestoreTrial, trial_id=trial_id)
        return await self._client.command(request, idempotency_key)

    async def end_round(self, round_id: UUID, *, idempotency_key: str | None = None, **fields: Any) -> RoundEnded:
        request = self._client.build(EndRound, round_id=round_id, **fields)
        return await self._client.command(request, idempotency_key)

    async def stop(
        self, optimization_id: UUID, stop_reason: str, *, idempotency_key: str | None = None
    ) -> OptimizationStopped:
        request = self._client.build(StopOptimization, optimization_id=optimization_id, stop_reason=stop_reason)
        return await self._client.command(request, idempotency_key)

    async def get(self, optimization_id: UUID) -> OptimizationView:
        request = self._client.build(GetOptimization, optimization_id=optimization_id)
        return await self._client.query(request)

    async def list(self, **fields: Any) -> Page[OptimizationView]:
        request = self._client.build(ListOptimizations, **fields)
        return await self._client.query(request)

    async def history_page(self, optimization_id: UUID, **fields: Any) -> HistoryPage:
        request = self._client.build(OptimizationHistory, optimization_id=optimization_id, **fields)
        return await self._client.query(request)

    async def history_page_json(self, optimization_id: UUID, **fields: Any) -> dict[str, Any]:
        """One page as `history_page` gives it, as plain JSON values (what `history` joins)."""
        request = self._client.build(OptimizationHistory, optimization_id=optimization_id, **fields)
        return await self._client.query_json(request)

    async def history(self, optimization_id: UUID, *, max_trials: int = 2_000) -> builtins.list[dict[str, Any]]:
        """Every round in the normalized history shape, as `OptimizationState.entries()` gives
        it: dicts, ids and times as Python values. Follows the pages (a reply must fit in one
        NATS message) and joins the parts of a round too big for one. The pages a reply plans
        are asked for ahead, a few at a time: the service cuts the next ones while this
        client parses the ones that came. They are parsed as plain JSON: a model per trial
        cost more client CPU than everything else a big history needs (10,000 trials: ~55
        of ~75 ms)."""
        rounds: builtins.list[dict[str, Any]] = []
        cursor: dict[str, Any] = {}
        while True:
            first = await self.history_page_json(optimization_id, max_trials=max_trials, **cursor)
            planned = await self._planned_pages(optimization_id, max_trials, first["planned"])
            last = first
            join_rounds(rounds, first)
            for cut, page in zip(first["planned"], planned, strict=True):
                if (last["next_after_round"], last.get("next_after_trial")) != (cut["after_round"], None):
                    break  # the history grew between the plan and this page: go on from what agrees
                join_rounds(rounds, page)
                last = page
            if last["next_after_round"] is None:
                return [history_entry(entry) for entry in rounds]
            cursor = {"after_round": last["next_after_round"]}
            if last.get("next_after_trial") is not None:
                cursor["after_trial"] = last["next_after_trial"]

    async def _planned_pages(
        self, optimization_id: UUID, max_trials: int, cuts: builtins.list[dict[str, int]]
    ) -> builtins.list[dict[str, Any]]:
        in_flight = asyncio.Semaphore(PAGES_IN_FLIGHT)  # its waiters go in turn: the pages are asked for in order

        async def page(cut: dict[str, int]) -> dict[str, Any]:
            async with in_flight:
                return await self.history_page_json(optimization_id, max_trials=max_trials, **cut)

        return await asyncio.gather(*(page(cut) for cut in cuts))

    async def pareto(self, optimization_id: UUID, **fields: Any) -> ParetoFront:
        request = self._client.build(ParetoQuery, optimization_id=optimization_id, **fields)
        return await self._client.query(request)

    async def compare(self, optimization_ids: builtins.list[UUID]) -> Comparison:
        request = self._client.build(CompareOptimizations, optimization_ids=optimization_ids)
        return await self._client.query(request)

    async def lineage(self, optimization_id: UUID, candidate_id: str, **fields: Any) -> Lineage:
        request = self._client.build(
            CandidateLineage, optimization_id=optimization_id, candidate_id=candidate_id, **fields
        )
        return await self._client.query(request)


def join_rounds(rounds: builtins.list[dict[str, Any]], page: dict[str, Any]) -> None:
    """Add a page's rounds; a round's part joins the part before it."""
    for entry in page["rounds"]:
        if rounds and rounds[-1]["round_index"] == entry["round_index"] and not rounds[-1]["complete"]:
            entry["trials"][:0] = rounds[-1]["trials"]
            rounds[-1] = entry
        else:
            rounds.append(entry)


def history_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A page's round as `entries()` shapes it: its id and times as Python values, and no
    paging mark (`complete`)."""
    del entry["complete"]
    entry["round_id"] = UUID(entry["round_id"])
    entry["timestamp"] = datetime.fromisoformat(entry["timestamp"])
    if entry["ended_at"] is not None:
        entry["ended_at"] = datetime.fromisoformat(entry["ended_at"])
    for trial in entry["trials"]:
        trial["timestamp"] = datetime.fromisoformat(trial["timestamp"])
    return entry


@dataclass
class RoundHandle:
    """A started round, as start_round returns it; pass it to record_trial and end_round."""

    round_id: UUID
    round_index: int
    first_trial_index: int


class OptimizationState:
    """An optimization as its optimizer drives it. Everything it records is stamped by
    Chronicle (indices, timestamps, best-so-far, stop reasons); `entries()` gives what this
    state recorded in the normalized history shape, `history()` what the service holds."""

    def __init__(self, client: Transport, optimization_id: UUID | None = None, **fields: Any):
        self._client = client
        self._api = Optimizations(client)
        self._fields = fields
        self._start_lock = asyncio.Lock()
        self.optimization_id = optimization_id
        self.direction: str = fields.get("direction", "maximize")
        self._rounds: dict[int, dict[str, Any]] = {}
        self._outboxes: dict[UUID, TrialOutbox] = {}  # by round id

    async def start(self) -> UUID:
        """Start the optimization (start_round does it when needed); returns its id."""
        async with self._start_lock:
            if self.optimization_id is None:
                started = await self._api.start(**self._fields)
                self.optimization_id = started.optimization_id
            elif "direction" not in self._fields:  # an existing optimization: learn its direction once
                self.direction = (await self._api.get(self.optimization_id)).direction
                self._fields["direction"] = self.direction
        return self.optimization_id

    async def start_round(self, *, round_index: int | None = None, extras: dict[str, Any] | None = None) -> RoundHandle:
        optimization_id = await self.start()
        fields: dict[str, Any] = {"extras": extras or {}}
        if round_index is not None:
            fields["round_index"] = round_index
        started = await self._api.start_round(optimization_id, **fields)
        self._rounds[started.round_index] = {
            "round_index": started.round_index,
            "round_id": started.round_id,
            "trials": [],
            "candidates": None,
            "best_score": None,
            "best_candidate": None,
            "stop_reason": None,
            "stopped": False,
            "best_so_far": started.best_so_far,
            "started_at": started.timestamp,
            "ended_at": None,
            "start_extras": extras or {},
            "end_extras": None,
            "latest_trial_index": -1,
        }
        return RoundHandle(started.round_id, started.round_index, started.first_trial_index)

    async def record_trial(
        self,
        round: RoundHandle,
        *,
        candidate: Any = None,
        score: float | None = None,
        metrics: dict[str, Any] | None = None,
        dataset: str | None = None,
        extra: dict[str, Any] | None = None,
        candidate_id: str | None = None,
    ) -> TrialRecorded:
        """Record one evaluated candidate; safe to call from many tasks at once. Calls that
        overlap (a population evaluated concurrently) go to the service together, as one
        trial.record_many request, and each returns its own trial once it is committed."""
        fields = trial_fields(candidate, score, metrics, dataset, extra, candidate_id)
        wire = self._client.build(TrialFields, **fields).model_dump(mode="json", exclude_unset=True)
        outbox = self._outboxes.get(round.round_id)
        if outbox is None:
            outbox = self._outboxes[round.round_id] = TrialOutbox(self._client, round.round_id)
        recorded = await outbox.record(wire)
        self._remember(round, fields, recorded)
        return recorded

    async def record_trials(self, round: RoundHandle, trials: list[dict[str, Any]]) -> list[TrialRecorded]:
        """Record many evaluated candidates in one request (each dict takes record_trial's
        keyword arguments); numbered in the order given. The fast way for a population."""
        fields = [trial_fields(**trial) for trial in trials]
        recorded = (await self._api.record_trials(round.round_id, fields)).trials
        for one, reply in zip(fields, recorded, strict=True):
            self._remember(round, one, reply)
        return recorded

    def _remember(self, round: RoundHandle, fields: dict[str, Any], recorded: TrialRecorded) -> None:
        entry = self._rounds.get(round.round_index)
        if entry is None:  # a worker's state, recording into a round another state started
            return
        entry["trials"].append(
            {
                "trial_index": recorded.trial_index,
                "score": recorded.score,
                "candidate": fields["candidate"],
                "candidate_id": recorded.candidate_id,
                "metrics": fields["metrics"],
                "dataset": fields.get("dataset"),
                "extra": fields["extras"],
                "best_so_far": recorded.best_so_far,
                "timestamp": recorded.timestamp,
            }
        )
        # Replies of concurrent trials arrive in any order: the highest index's best-so-far
        # includes every earlier trial.
        if entry["ended_at"] is None and recorded.trial_index > entry["latest_trial_index"]:
            entry["latest_trial_index"] = recorded.trial_index
            entry["best_so_far"] = recorded.best_so_far

    async def end_round(self, round: RoundHandle, **fields: Any) -> RoundEnded:
        """`fields`: best_score, best_candidate (default: the best trial's), stop_reason
        (also stops the optimization), candidates, extras (e.g. pareto_front, selection_meta)."""
        ended = await self._api.end_round(round.round_id, **fields)
        self._outboxes.pop(round.round_id, None)
        self._rounds[round.round_index].update(
            candidates=fields.get("candidates"),
            best_score=ended.best_score,
            best_candidate=ended.best_candidate,
            stop_reason=ended.stop_reason,
            stopped=ended.stopped,
            best_so_far=ended.best_so_far,
            ended_at=ended.timestamp,
            end_extras=fields.get("extras") or {},
        )
        return ended

    async def finalize_stop(self, reason: str) -> OptimizationStopped:
        """Stop the optimization; the last round gets the reason if it has none (an open
        round is ended with it)."""
        stopped = await self._api.stop(await self.start(), reason)
        if stopped.last_round_index is not None and stopped.last_round_index in self._rounds:
            last = self._rounds[stopped.last_round_index]
            last["stopped"] = True
            last["stop_reason"] = last["stop_reason"] or reason
            if last["ended_at"] is None:  # ended by the stop: refresh it from the service
                [fresh] = [r for r in await self.history() if r["round_index"] == stopped.last_round_index]
                last.update(
                    best_score=fresh["best_score"],
                    best_candidate=fresh["best_candidate"],
                    best_so_far=fresh["best_so_far"],
                    ended_at=fresh["ended_at"],
                    end_extras={},
                )
        return stopped

    def entries(self) -> list[dict[str, Any]]:
        """What this state recorded, in the normalized history shape, rounds and trials in order."""
        rounds = []
        for index in sorted(self._rounds):
            row = copy.deepcopy(self._rounds[index])
            row["trials"].sort(key=lambda trial: trial["trial_index"])
            rounds.append(normalized_round(row, self.direction))  # type: ignore[arg-type]
        return rounds

    async def history(self) -> list[dict[str, Any]]:
        """The service's history of this optimization, in the shape `entries()` gives."""
        return await self._api.history(await self.start())


def trial_fields(
    candidate: Any = None,
    score: float | None = None,
    metrics: dict[str, Any] | None = None,
    dataset: str | None = None,
    extra: dict[str, Any] | None = None,
    candidate_id: str | None = None,
) -> dict[str, Any]:
    """A trial as the wire wants it, from record_trial's arguments."""
    fields = {"candidate": candidate, "score": score, "metrics": metrics or {}, "extras": extra or {}}
    if dataset is not None:
        fields["dataset"] = dataset
    if candidate_id is not None:
        fields["candidate_id"] = candidate_id
    return fields
