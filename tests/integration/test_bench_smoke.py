"""Benchmarks that drive the service through its contract, run at a tiny scale: they broke
once when the contract grew stricter (job options admit only the named ones) and again when
a fresh store needed a key-encryption key, and nothing ran them until they were next needed."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from bench import jobs, pair, snapshots
from bench.report import Report
from tests.servers import TestServers

pytestmark = pytest.mark.slow


def value_of(report: Report, metric: str) -> float:
    return next(row.value for row in report.rows if row.metric == metric)


def test_the_jobs_bench_runs_its_jobs_to_completion(servers: TestServers) -> None:
    plan = jobs.Plan(jobs=4, sequential=2, workers=(1,), warmup=1, in_flight=2, timeout=60.0,
                     database_url=servers.admin_url, nats_url=servers.nats_url)

    report, _ = jobs.run(plan)

    assert value_of(report, "failed, unfinished or wrong jobs") == 0, report.details.get("failures")
    assert not math.isnan(value_of(report, "1 worker: throughput"))
    assert not math.isnan(value_of(report, "1 worker: pipeline overhead per job p50"))


def test_the_snapshots_bench_loads_and_audits_its_conversations(servers: TestServers) -> None:
    report, _ = snapshots.run(events=120, every=50, keep=0, runs=2, database_url=servers.admin_url)

    timed = [row for row in report.rows if not math.isnan(row.value)]
    assert len(timed) == len(report.rows) == 12  # load_many and two state_at, with and without snapshots, p50 and p95


def test_the_pair_bench_measures_both_sides_in_turns(servers: TestServers) -> None:
    tree = Path(pair.__file__).resolve().parent.parent  # (this tree against itself: no worktree made)
    args = argparse.Namespace(base=str(tree), rounds=2, seconds=0.5, service_setting=[],
                              database_url=servers.admin_url, nats_url=servers.nats_url)

    report, _ = pair.run(args)

    assert [row.metric for row in report.rows] == [name for name, _, _ in pair.FIGURES]
    assert all(len(report.details[side][name]) == 2 for side in ("this", "base") for name, _, _ in pair.FIGURES)
    assert value_of(report, "add_message/s, 100 in flight") > 0
    assert value_of(report, "conversations.get (100 messages) p50") > 0
