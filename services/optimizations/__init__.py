"""Optimization history: rounds, trials, candidates; history, pareto, lineage; the report."""
