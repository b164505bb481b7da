"""Optimization history's dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.optimizations import (
    CandidateLineage,
    CompareOptimizations,
    EndRound,
    GetOptimization,
    InvalidateTrial,
    ListOptimizations,
    OptimizationHistory,
    ParetoQuery,
    RecordTrial,
    RecordTrials,
    RestoreTrial,
    StartOptimization,
    StartRound,
    StopOptimization,
)

from services.optimizations import commands, queries
from services.runtime.dispatch import Decide, Read

ROUTES = (
    Decide(StartOptimization, commands.start_optimization),
    Decide(StopOptimization, commands.stop_optimization),
    Decide(StartRound, commands.start_round),
    Decide(EndRound, commands.end_round),
    Decide(RecordTrial, commands.record_trial),
    Decide(RecordTrials, commands.record_trials),
    Decide(InvalidateTrial, commands.invalidate_trial),
    Decide(RestoreTrial, commands.restore_trial),
    Read(ListOptimizations, queries.list_optimizations, reads=("optimizations",)),
    Read(GetOptimization, queries.get, reads=("optimizations",)),
    Read(OptimizationHistory, queries.history, reads=("optimizations",)),
    Read(ParetoQuery, queries.pareto, reads=("optimizations",)),
    Read(CompareOptimizations, queries.compare, reads=("optimizations",)),
    Read(CandidateLineage, queries.lineage, reads=("lineage", "optimizations")),
)
