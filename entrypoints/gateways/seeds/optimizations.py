"""Seed 003's `OptimizationResult.history`: an optimization's normalized rounds, trials and
candidates in the seed's names, a page at a time; made of optimizations.history."""

from __future__ import annotations

from chronicle_client.transport import Transport
from chronicle_contract.optimizations import HistoryPage, OptimizationHistory, RoundEntry

from entrypoints.gateways.seeds import Data


class OptimizationResult(HistoryPage):
    """Seed 003's `OptimizationResult.history`: the normalized rounds (round_index, trials,
    candidates, best_score, best_candidate, stop_reason, stopped, best_so_far, timestamp,
    extra), a page at a time like the history route (`rounds` is the same list)."""

    history: list[RoundEntry]


class OptimizationResultQuery(OptimizationHistory, reply=OptimizationResult, action=""):
    """optimizations.history's fields; sent as that request (never under a subject of its own)."""


async def optimization_result(client: Transport, asked: OptimizationResultQuery, _: str | None) -> Data:
    page = await client.send_json(OptimizationHistory(**asked.model_dump(exclude_unset=True)))
    return {**page, "history": page["rounds"]}
