"""Chronicle with a part of it killed or restarted under load (bench/faults.py): a node of
a three-node NATS cluster, a service instance beside a standalone projection engine, the
projection child process, Postgres, nats-server. Nothing acknowledged is lost or
duplicated, every HITL answer arrives once, every job ends, the read models equal a
rebuild and the hash chains verify."""

from __future__ import annotations

import pytest

from bench.faults import SCENARIOS, run_scenario
from tests.servers import TestServers


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_part_killed_under_load_loses_and_duplicates_nothing(scenario: str, servers: TestServers) -> None:
    report, failures = run_scenario(
        scenario, users=4, seconds=8, database_url=servers.admin_url, nats_url=servers.nats_url
    )
    figures = {row.metric: row.value for row in report.rows}
    assert failures == []
    assert figures["messages acknowledged"] > 100  # the load really ran, across the kill
    assert figures["lost"] == figures["duplicated"] == 0
