"""Prometheus instruments of one process, in a registry of its own, and the /metrics endpoint.

The composition root builds one `Metrics` per process and hands it to the pieces that
record (the NATS edge, the fair share, the command bus); a piece built without one
records nothing. Recording sits on the command path, so each figure is one cached
child's `inc` or `observe` (`labels()` once per subject and code, not per request), and
each request's own count and time a plain dict's (RequestTally).
Labels come from fixed sets only: a route table's subjects, the error codes, the
budgets; never a user id or anything else a request carries. Figures read from Postgres or NATS are not recorded
but read when scraped (adapters/scraped.py).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from services.ports.metrics import CommitMetrics

log = logging.getLogger(__name__)

# Seconds: a request answered from cache takes well under a millisecond, a group commit a
# few, a search or an export may take seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # commands per group commit


class RequestTally(Collector):
    """chronicle_requests and chronicle_request_seconds: every answer of the NATS edge,
    counted in plain dicts by the one thread that answers (the event loop's) and read when
    scraped. A prometheus Counter and Histogram take a lock in each of their three
    increments: ~8% of the event loop's samples under add_message load."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}  # (subject, code) -> requests
        self.timed: dict[str, list[float]] = {}  # subject -> a count per bucket (the last: past them all), then the sum

    def answered(self, subject: str, code: str, seconds: float | None) -> None:
        key = (subject, code)
        self.counts[key] = self.counts.get(key, 0) + 1
        if seconds is None:
            return
        timed = self.timed.get(subject)
        if timed is None:
            timed = self.timed[subject] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        timed[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1  # (the first bucket whose bound it is within)
        timed[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        # (copies made at C speed, while the answering thread may add a key)
        counts, timed = dict(self.counts), {subject: list(tally) for subject, tally in dict(self.timed).items()}
        requests = CounterMetricFamily(
            "chronicle_requests", "Requests answered, by subject and outcome code (ok or the error's code)",
            labels=["subject", "code"],
        )
        for (subject, code), count in sorted(counts.items()):
            requests.add_metric([subject, code], count)
        yield requests
        seconds = HistogramMetricFamily(
            "chronicle_request_seconds",
            "Seconds from a request's dispatch to its reply, by subject (requests handed to their handler: refusals"
            " before it are counted in chronicle_requests only)",
            labels=["subject"],
        )
        for subject, tally in sorted(timed.items()):
            cumulative, so_far = [], 0.0
            for bound, in_bucket in zip([*map(str, LATENCY_BUCKETS), "+Inf"], tally[:-1], strict=True):
                so_far += in_bucket
                cumulative.append((bound, so_far))
            seconds.add_metric([subject], cumulative, sum_value=tally[-1])
        yield seconds


class Metrics(CommitMetrics):
    """The instruments Chronicle records into, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.tally = RequestTally()
        r.register(self.tally)
        self.in_flight = Gauge("chronicle_requests_in_flight", "Requests being handled by this process", registry=r)
        self.refusals = Counter(
            "chronicle_rate_limit_refusals",
            "Requests refused rate_limited, by budget (requests, search, export, heavy, in_flight, heavy_in_flight: a user's; "
            "instance: this process's max_in_flight)",
            ["budget"], registry=r,
        )
        self.commit_batch = Histogram(
            "chronicle_group_commit_commands", "Commands decided and saved together in one group commit",
            buckets=BATCH_BUCKETS, registry=r,
        )
        self.commit_seconds = Histogram(
            "chronicle_group_commit_seconds",
            "Seconds the writer spent on one group commit: deciding its commands and saving them in one transaction",
            buckets=COMMIT_BUCKETS, registry=r,
        )
        self.commit_conflicts = Counter(
            "chronicle_group_commit_conflicts", "Group commits re-run because another writer saved first", registry=r
        )
        self.commands_queued = Gauge(
            "chronicle_commands_queued", "Commands waiting for the writer's next group commit", registry=r
        )
        ProcessCollector(registry=r)  # CPU seconds, memory, open file descriptors

    def answered(self, subject: str, code: str, seconds: float | None) -> None:
        """A request on `subject` (a route's, never a caller's) answered with `code` after
        `seconds` (None: refused before it was handled, not timed); from the NATS edge's
        event loop only (RequestTally)."""
        self.tally.answered(subject, code, seconds)

    def refused(self, budget: str) -> None:
        self.refusals.labels(budget).inc()

    def watch_queue(self, size: Callable[[], int]) -> None:
        self.commands_queued.set_function(size)

    def committed(self, commands: int, seconds: float) -> None:
        self.commit_batch.observe(commands)
        self.commit_seconds.observe(seconds)

    def conflicted(self) -> None:
        self.commit_conflicts.inc()


class GatewayMetrics:
    """A gateway's own instruments (REST or MCP over HTTP): requests by route template,
    method and status, and their latency. In `chronicle serve` they join the service's
    registry; `chronicle http` and `chronicle mcp --http` have a registry of their own."""

    METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        if registry is None:
            ProcessCollector(registry=self.registry)
        self.requests = Counter(
            "chronicle_http_requests", "HTTP requests answered, by route template, method and status",
            ["route", "method", "status"], registry=self.registry,
        )
        self.seconds = Histogram(
            "chronicle_http_request_seconds", "Seconds from an HTTP request's arrival to its response's start, by route",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def answered(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in self.METHODS else "other"  # (a client names the method: bounded here)
        key = (route, method, status)  # (a route template and a status: a bounded set)
        children = self._children.get(key)
        if children is None:  # (labels() takes a lock and checks its values: once per key)
            children = self._children[key] = (self.requests.labels(route, method, str(status)),
                                               self.seconds.labels(route))
        children[0].inc()
        children[1].observe(seconds)


class MetricsEndpoint:
    """/metrics in Prometheus's text format on its own port, served by prometheus_client's
    threaded server: a scrape's reads (adapters/scraped.py) run in its thread,
    never on the event loop. A port already taken is logged and the endpoint left off:
    the process's work does not depend on being watched."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int):
        self.registry = registry
        self.host = host
        self.port = port
        self.url: str | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsEndpoint:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as error:
            log.error(
                "metrics endpoint not served: cannot listen (set CHRONICLE_METRICS_PORT to a free port, or 0)",
                extra={"host": self.host, "port": self.port, "error_type": type(error).__name__},
            )
            return self
        host, port = str(self._server.server_address[0]), self._server.server_address[1]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
