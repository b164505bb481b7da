"""Figures read when /metrics is scraped rather than recorded: read-model and relay positions,
the log's head, parked events, and the job queue's depth.

They are the fleet's, not the process's: the tracking rows and the work queue are shared,
so every instance reports the same values (aggregate them with max, not sum). A scrape
costs one connection with one short transaction and one JetStream request, each bounded
by a timeout, in the scrape's own thread (adapters/metrics.py MetricsEndpoint): nothing
blocking runs on the event loop, and nothing costs anything between scrapes. A source that
does not answer in time is reported down (`chronicle_scrape_source_up`) and its figures
left out of that scrape.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Protocol

import psycopg
from nats.js import JetStreamContext
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from adapters.read_side.parking import parked_on
from adapters.read_side.tracking import tracking
from adapters.store.postgres import PostgresTarget

log = logging.getLogger(__name__)

TIMEOUT = 2.0  # seconds a scrape waits for Postgres or NATS (libpq's connect timeout is 2 s at least)


class Source(Protocol):
    def read(self) -> list[GaugeMetricFamily]:
        """This source's figures now; raises when it cannot tell."""
        ...


class Scraped(Collector):
    """The figures of each source registered under its name (`postgres`, `nats`), and whether
    each could be read (`chronicle_scrape_source_up`). One scrape reads at a time: scrapes
    sent in a loop cost Postgres one connection and NATS one request at once, no more."""

    def __init__(self) -> None:
        self.sources: dict[str, Source] = {}
        self._lock = threading.Lock()

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # (registering must not read anything)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "chronicle_scrape_source_up", "Whether this scrape could read the source some figures come from",
            labels=["source"],
        )
        families: list[GaugeMetricFamily] = []
        with self._lock:
            for name, source in list(self.sources.items()):
                try:
                    families += source.read()
                except Exception as error:  # away, or too slow: this scrape goes without its figures
                    log.info("metrics source not read", extra={"source": name, "error_type": type(error).__name__})
                    up.add_metric([name], 0)
                else:
                    up.add_metric([name], 1)
        yield up
        yield from families


class Tracking:
    """Each read model's position and lag, each relay's position and every consumer's parked
    events, from the tracking rows and chronicle.parked (the reads of `chronicle projections
    status`). Only the consumers named here are reported, under their label: a database
    shared with another deployment (another subject prefix) adds no series."""

    def __init__(self, target: PostgresTarget, read_models: list[str], timeout: float = TIMEOUT):
        self.target = target
        self.read_models = list(read_models)
        self.relays: dict[str, str] = {}  # label -> tracking row name (the event feed's names its prefix)
        self.timeout = timeout

    def read(self) -> list[GaugeMetricFamily]:
        with (
            psycopg.connect(self.target.url, autocommit=True, connect_timeout=max(2, round(self.timeout))) as conn,
            conn.transaction(),
        ):
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{round(self.timeout * 1000)}ms",))
            head, rows = tracking(conn)
            set_aside = parked_on(conn)
        position = GaugeMetricFamily(
            "chronicle_projection_position", "The log position each read model has applied up to", labels=["read_model"]
        )
        lag = GaugeMetricFamily(
            "chronicle_projection_lag_events", "Log positions each read model trails the head by", labels=["read_model"]
        )
        for name in self.read_models:
            at = rows.get(name, (0, 0, None))[0]
            position.add_metric([name], at)
            lag.add_metric([name], max(head - at, 0))
        relayed = GaugeMetricFamily(
            "chronicle_relay_position",
            "The log position each relay has published up to (it moves when it has something to publish;"
            " the event feed's follows every event)",
            labels=["relay"],
        )
        relays = list(self.relays.items())  # (the service adds its relays as it starts them)
        for label, name in relays:
            relayed.add_metric([label], rows.get(name, (0, 0, None))[0])
        parked = GaugeMetricFamily(
            "chronicle_parked_events", "Events a read model or relay set aside after failing on them", labels=["consumer"]
        )
        counts = {p.consumer: p.count for p in set_aside}
        for name in self.read_models:
            parked.add_metric([name], counts.get(name, 0))
        for label, name in relays:
            parked.add_metric([label], counts.get(name, 0))
        head_family = GaugeMetricFamily("chronicle_log_head_position", "The notification log's last position", value=head)
        return [head_family, position, lag, relayed, parked]


class JobQueue:
    """Jobs requested and not yet finished, from the work queue's shared consumer: waiting for a
    worker, and with one. Asked on the service's event loop, where nats-py's connection lives."""

    def __init__(
        self, js: JetStreamContext, stream: str, consumer: str, loop: asyncio.AbstractEventLoop, timeout: float = TIMEOUT
    ):
        self.js = js
        self.stream = stream
        self.consumer = consumer
        self.loop = loop
        self.timeout = timeout

    def read(self) -> list[GaugeMetricFamily]:
        future = asyncio.run_coroutine_threadsafe(self.js.consumer_info(self.stream, self.consumer), self.loop)
        try:
            info = future.result(self.timeout)
        except BaseException:
            future.cancel()
            raise
        depth = GaugeMetricFamily(
            "chronicle_job_queue_depth", "Jobs requested and not finished: waiting for a worker, or running",
            labels=["state"],
        )
        depth.add_metric(["waiting"], info.num_pending or 0)
        depth.add_metric(["running"], info.num_ack_pending or 0)
        return [depth]
