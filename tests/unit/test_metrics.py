"""The instruments, fed by the pieces that record into them, read back from their own registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from chronicle_contract.conversations import AddMessage, StartConversation
from chronicle_contract.errors import ChronicleError
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily

from adapters.messaging.fair_share import FairShare, Limits
from adapters.metrics import Metrics
from adapters.scraped import Scraped
from adapters.store.memory import InMemoryEventStore
from entrypoints.bootstrap import Overrides, Stage, build
from tests.unit.test_bootstrap import unreachable_settings


def value(metrics: Metrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_requests_are_counted_by_subject_and_code_and_timed_by_subject() -> None:
    metrics = Metrics()
    metrics.answered("c.cmd.conversation.add_message", "ok", 0.002)
    metrics.answered("c.cmd.conversation.add_message", "ok", 0.003)
    metrics.answered("c.cmd.conversation.add_message", "invalid", 0.001)
    metrics.answered("c.query.conversations.list", "rate_limited", None)  # refused before handling: not timed
    add = {"subject": "c.cmd.conversation.add_message"}
    assert value(metrics, "chronicle_requests_total", **add, code="ok") == 2
    assert value(metrics, "chronicle_requests_total", **add, code="invalid") == 1
    assert value(metrics, "chronicle_request_seconds_count", **add) == 3
    assert value(metrics, "chronicle_request_seconds_bucket", **add, le="0.0025") == 2
    assert value(metrics, "chronicle_request_seconds_sum", **add) == pytest.approx(0.006)
    listing = {"subject": "c.query.conversations.list"}
    assert value(metrics, "chronicle_requests_total", **listing, code="rate_limited") == 1
    assert value(metrics, "chronicle_request_seconds_count", **listing) == 0


def test_a_time_on_a_bound_falls_in_that_bucket_and_one_past_every_bound_only_in_the_last() -> None:
    metrics = Metrics()
    metrics.answered("s", "ok", 0.001)
    metrics.answered("s", "ok", 20.0)
    assert value(metrics, "chronicle_request_seconds_bucket", subject="s", le="0.0005") == 0
    assert value(metrics, "chronicle_request_seconds_bucket", subject="s", le="0.001") == 1  # (a bound is inclusive)
    assert value(metrics, "chronicle_request_seconds_bucket", subject="s", le="10.0") == 1
    assert value(metrics, "chronicle_request_seconds_bucket", subject="s", le="+Inf") == 2


def test_each_process_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.answered("s", "ok", 0.001)
    assert value(first, "chronicle_requests_total", subject="s", code="ok") == 1
    assert value(second, "chronicle_requests_total", subject="s", code="ok") == 0


def test_refusals_are_counted_by_the_budget_that_refused() -> None:
    metrics, now = Metrics(), [0.0]
    share = FairShare(Limits(per_minute={"requests": 100, "search": 1}, in_flight=1), clock=lambda: now[0], metrics=metrics)
    share.admit("alice", "conversations.search")
    for _ in range(2):
        with pytest.raises(ChronicleError):
            share.admit("alice", "conversations.search")
    with share.handling("alice"), pytest.raises(ChronicleError), share.handling("alice"):
        pass
    assert value(metrics, "chronicle_rate_limit_refusals_total", budget="search") == 2
    assert value(metrics, "chronicle_rate_limit_refusals_total", budget="in_flight") == 1
    assert value(metrics, "chronicle_rate_limit_refusals_total", budget="requests") == 0
    assert share.refused == 3


async def test_the_bus_records_each_group_commits_size_and_time(tmp_path: Path) -> None:
    chronicle = await build(unreachable_settings(tmp_path), Overrides(store=InMemoryEventStore())).start(through=Stage.BUS)
    metrics = chronicle.metrics
    try:
        started = await chronicle.bus.execute(StartConversation(title="counted"), "alice")
        await chronicle.bus.execute(AddMessage(conversation_id=started["conversation_id"], role="user", content="hi"), "alice")
    finally:
        await chronicle.stop()
    batches = chronicle.bus.batches
    assert batches >= 1
    assert value(metrics, "chronicle_group_commit_commands_count") == batches
    assert value(metrics, "chronicle_group_commit_commands_sum") == 2  # every command in some batch
    assert value(metrics, "chronicle_group_commit_seconds_count") == batches
    assert value(metrics, "chronicle_group_commit_seconds_sum") > 0
    assert value(metrics, "chronicle_commands_queued") == 0


class Figures:
    def __init__(self, position: int) -> None:
        self.position = position

    def read(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("chronicle_test_position", "a figure", value=self.position)]


class Away:
    def read(self) -> list[GaugeMetricFamily]:
        raise TimeoutError


def test_a_source_that_cannot_be_read_is_reported_down_and_the_others_still_are() -> None:
    metrics, scraped = Metrics(), Scraped()
    metrics.registry.register(scraped)
    scraped.sources.update(postgres=Figures(42), nats=Away())
    assert value(metrics, "chronicle_test_position") == 42
    assert value(metrics, "chronicle_scrape_source_up", source="postgres") == 1
    assert value(metrics, "chronicle_scrape_source_up", source="nats") == 0
    text = generate_latest(metrics.registry).decode()
    assert text.count("# TYPE chronicle_scrape_source_up gauge") == 1  # one family for every source


def test_registering_the_scraped_figures_reads_nothing(tmp_path: Path) -> None:
    chronicle = build(unreachable_settings(tmp_path))  # Postgres unreachable: a read would fail
    assert value(chronicle.metrics, "chronicle_requests_in_flight") == 0
    assert chronicle.scraped.sources == {}  # sources come with start()
