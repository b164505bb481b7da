"""What a metrics scrape reads from Postgres: the tracking rows and parked events of the
consumers this deployment runs, none of another's, and a database away reported down."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from adapters.scraped import Scraped, Tracking
from adapters.store.postgres import PostgresTarget


def scraped_from(*sources: tuple[str, Tracking]) -> CollectorRegistry:
    registry, scraped = CollectorRegistry(), Scraped()
    registry.register(scraped)
    scraped.sources.update(dict(sources))
    return registry


def test_positions_lag_and_parked_events_of_the_named_consumers_only(target: PostgresTarget) -> None:
    with target.connect(autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronicle.events (originator_id, originator_version, topic, state)"
            " SELECT gen_random_uuid(), 1, 'test:Event', '\\x'::bytea FROM generate_series(1, 7)"
        )
        conn.execute(
            "INSERT INTO chronicle.projections (name, position, version) VALUES"
            " ('history', 5, 1), ('event_feed:ours', 7, 1), ('event_feed:theirs', 2, 1)"
        )
        conn.execute(
            "INSERT INTO chronicle.parked (consumer, position, topic, error) VALUES"
            " ('history', 3, 'test:Event', 'ValueError'), ('history', 4, 'test:Event', 'ValueError'),"
            " ('event_feed:theirs', 1, 'test:Event', 'ValueError')"
        )
    tracking = Tracking(target, ["history", "stats"])
    tracking.relays["event_feed"] = "event_feed:ours"
    registry = scraped_from(("postgres", tracking))
    assert registry.get_sample_value("chronicle_scrape_source_up", {"source": "postgres"}) == 1
    assert registry.get_sample_value("chronicle_log_head_position") == 7
    assert registry.get_sample_value("chronicle_projection_position", {"read_model": "history"}) == 5
    assert registry.get_sample_value("chronicle_projection_lag_events", {"read_model": "history"}) == 2
    assert registry.get_sample_value("chronicle_projection_lag_events", {"read_model": "stats"}) == 7  # no row yet
    assert registry.get_sample_value("chronicle_relay_position", {"relay": "event_feed"}) == 7
    assert registry.get_sample_value("chronicle_parked_events", {"consumer": "history"}) == 2
    assert registry.get_sample_value("chronicle_parked_events", {"consumer": "event_feed"}) == 0
    names = {sample.labels.get("relay") or sample.labels.get("consumer") for m in registry.collect() for sample in m.samples}
    assert "event_feed:theirs" not in names  # another deployment's consumer adds no series


def test_a_database_away_is_reported_down_and_its_figures_left_out() -> None:
    away = Tracking(PostgresTarget("postgresql://nobody@127.0.0.1:9/none"), ["history"])  # port 9: nothing listens
    registry = scraped_from(("postgres", away))
    assert registry.get_sample_value("chronicle_scrape_source_up", {"source": "postgres"}) == 0
    assert registry.get_sample_value("chronicle_projection_position", {"read_model": "history"}) is None
