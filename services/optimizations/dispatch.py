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
from services.runtime.dispatch import Read, Routes

ROUTES: Routes = {
    StartOptimization: commands.start_optimization,
    StopOptimization: commands.stop_optimization,
    StartRound: commands.start_round,
    EndRound: commands.end_round,
    RecordTrial: commands.record_trial,
    RecordTrials: commands.record_trials,
    InvalidateTrial: commands.invalidate_trial,
    RestoreTrial: commands.restore_trial,
    ListOptimizations: Read(queries.list_optimizations, reads=("optimizations",)),
    GetOptimization: Read(queries.get, reads=("optimizations",)),
    OptimizationHistory: Read(queries.history, reads=("optimizations",)),
    ParetoQuery: Read(queries.pareto, reads=("optimizations",)),
    CompareOptimizations: Read(queries.compare, reads=("optimizations",)),
    CandidateLineage: Read(queries.lineage, reads=("lineage", "optimizations")),
}
