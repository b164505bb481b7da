"""/metrics of `chronicle serve` (and of a standalone `chronicle projections run`), scraped over
HTTP while a client drives commands, queries, a refused and an invalid request: the figures move."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from prometheus_client.parser import text_string_to_metric_families

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from adapters.metrics import Metrics, MetricsEndpoint
from tests.conftest import JWT_SECRET, new_prefix
from tests.servers import TestServers
from tests.waiting import eventually

READ_MODELS = ("history", "stats", "search", "hitl", "optimizations", "lineage", "audit", "artifacts", "jobs")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def start(command: list[str], env: dict[str, str], ready: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """A `chronicle` command in a process group of its own, once it logged `ready`, with that
    line; the rest of its log is read and dropped."""
    process = subprocess.Popen(
        [sys.executable, "-m", "entrypoints.cli", *command], env=env, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        entry = orjson.loads(line)
        if entry.get("msg") == ready:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, entry
    raise AssertionError(f"{command} exited before it was ready")


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(60)


async def scrape(url: str) -> tuple[str, Samples]:
    async with httpx.AsyncClient() as web:
        response = await web.get(url, timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return response.text, samples


def at(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def environment(servers: TestServers, tmp_path: Path) -> Iterator[dict[str, str]]:
    with servers.fresh_database() as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        env.update({
            "CHRONICLE_DATABASE_URL": url, "CHRONICLE_NATS_URL": servers.nats_url,
            "CHRONICLE_SUBJECT_PREFIX": new_prefix("metrics"), "CHRONICLE_JWT_SECRET": JWT_SECRET,
            "CHRONICLE_DATA_DIR": str(tmp_path), "CHRONICLE_HTTP_PORT": "0",
            "CHRONICLE_METRICS_PORT": str(free_port()),
            "CHRONICLE_LIMIT_SEARCH_PER_MINUTE": "1",  # the second search is refused
            "CHRONICLE_JOB_WORKERS": "0",  # a requested job stays on the queue
        })
        yield env


@pytest.mark.timeout(240)
async def test_the_figures_move_under_load(environment: dict[str, str], servers: TestServers) -> None:
    prefix, port = environment["CHRONICLE_SUBJECT_PREFIX"], environment["CHRONICLE_METRICS_PORT"]
    service, ready = await asyncio.to_thread(start, ["serve"], environment, "ready")
    url = f"http://127.0.0.1:{port}/metrics"
    user = f"user-{uuid.uuid4().hex[:12]}"
    client = await ChronicleClient.connect(
        servers.nats_url, TokenAuthority(secret=JWT_SECRET).issue(user), prefix=prefix
    )
    try:
        assert ready["metrics"] == url
        _, before = await scrape(url)
        assert at(before, "chronicle_scrape_source_up", source="postgres") == 1
        assert at(before, "chronicle_scrape_source_up", source="nats") == 1

        started = await client.conversations.start(title="watched", tags=["metrics"])
        secret = "the lighthouse keeper's secret"
        written = await asyncio.gather(
            *(client.conversations.add_message(started.conversation_id, "user", f"{secret} {n}") for n in range(40))
        )
        await client.conversations.list(tags=["metrics"])
        await client.conversations.search("lighthouse", min_position=max(w.position or 0 for w in written))
        with pytest.raises(ChronicleError) as refused:
            await client.conversations.search("keeper")
        assert refused.value.code == "rate_limited"
        with pytest.raises(ChronicleError) as invalid:
            await client.request("cmd.conversation.add_message", {"conversation_id": "not an id", "role": "user"})
        assert invalid.value.code == "invalid"
        job = await client.jobs.request("a quiz about lighthouses", "quiz")

        text, after = await scrape(url)
        add, search = f"{prefix}.cmd.conversation.add_message", f"{prefix}.query.conversations.search"
        assert at(after, "chronicle_requests_total", subject=add, code="ok") == 40
        assert at(after, "chronicle_requests_total", subject=add, code="invalid") == 1
        assert at(after, "chronicle_request_seconds_count", subject=add) == 40  # (the invalid one: refused, not timed)
        assert at(after, "chronicle_requests_total", subject=search, code="ok") == 1
        assert at(after, "chronicle_requests_total", subject=search, code="rate_limited") == 1
        assert at(after, "chronicle_rate_limit_refusals_total", budget="search") == 1
        commits = at(after, "chronicle_group_commit_commands_count") - at(before, "chronicle_group_commit_commands_count")
        assert 1 <= commits <= 42  # the start, 40 messages and the job; together where they met
        assert at(after, "chronicle_group_commit_commands_sum") >= 42
        assert at(after, "chronicle_group_commit_seconds_count") == at(after, "chronicle_group_commit_commands_count")
        assert at(after, "chronicle_job_queue_depth", state="waiting") == 1  # no worker takes it
        assert at(after, "chronicle_requests_in_flight") == 0
        # Nothing of a user's on the endpoint: no user id, no content.
        assert user not in text and "lighthouse" not in text and str(started.conversation_id) not in text

        async def caught_up() -> Samples | None:
            _, now = await scrape(url)
            head = at(now, "chronicle_log_head_position")
            lags = [at(now, "chronicle_projection_lag_events", read_model=name) for name in READ_MODELS]
            feed = at(now, "chronicle_relay_position", relay="event_feed")
            jobs = at(now, "chronicle_relay_position", relay="job_signals")  # it relayed the job's request
            return now if head > 0 and lags == [0] * len(READ_MODELS) and feed == head and jobs >= (job.position or 1) else None

        now = await eventually(caught_up, "every read model, the event feed and the job relay at the log's head")
        for name in READ_MODELS:
            assert at(now, "chronicle_projection_position", read_model=name) >= max(w.position or 0 for w in written)
        assert ("chronicle_relay_position", frozenset({("relay", "hitl_signals")})) in now
        assert at(now, "chronicle_parked_events", consumer="history") == 0
    finally:
        await client.close()
        assert await asyncio.to_thread(stop, service) == 0


@pytest.mark.timeout(240)
async def test_a_standalone_projection_engine_serves_its_read_models_figures(
    environment: dict[str, str], servers: TestServers
) -> None:
    engine_port = str(free_port())
    engine, running = await asyncio.to_thread(
        start, ["projections", "run"], {**environment, "CHRONICLE_METRICS_PORT": engine_port}, "projections running"
    )
    service = None
    try:
        url = f"http://127.0.0.1:{engine_port}/metrics"
        assert running["metrics"] == url
        service, _ = await asyncio.to_thread(
            start, ["serve"], {**environment, "CHRONICLE_RUN_PROJECTIONS": "false"}, "ready"
        )
        client = await ChronicleClient.connect(
            servers.nats_url, TokenAuthority(secret=JWT_SECRET).issue("standalone"),
            prefix=environment["CHRONICLE_SUBJECT_PREFIX"],
        )
        try:
            started = await client.conversations.start(title="built elsewhere")
        finally:
            await client.close()

        async def applied() -> bool:
            _, now = await scrape(url)
            return all(
                at(now, "chronicle_projection_position", read_model=name) >= (started.position or 1)
                and at(now, "chronicle_projection_lag_events", read_model=name) == 0
                for name in READ_MODELS
            )

        await eventually(applied, "the engine's read models at the conversation's position")
        _, now = await scrape(url)
        assert not [name for name, _ in now if name == "chronicle_requests_total"]  # an engine answers no request
        assert at(now, "chronicle_scrape_source_up", source="postgres") == 1
        assert ("chronicle_scrape_source_up", frozenset({("source", "nats")})) not in now  # nor has it a bus
    finally:
        if service is not None:
            assert await asyncio.to_thread(stop, service) == 0
        assert await asyncio.to_thread(stop, engine) == 0


def test_a_port_already_taken_leaves_the_endpoint_off_and_the_process_running(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = MetricsEndpoint(Metrics().registry, "127.0.0.1", taken.getsockname()[1]).start()
    assert endpoint.url is None
    assert [r.message for r in caplog.records if r.levelname == "ERROR"] == [
        "metrics endpoint not served: cannot listen (set CHRONICLE_METRICS_PORT to a free port, or 0)"
    ]
    endpoint.stop()  # (nothing to stop)


@pytest.mark.timeout(240)
async def test_the_rest_gateway_counts_its_requests_by_route_template_and_status(
    environment: dict[str, str], servers: TestServers
) -> None:
    service, _ = await asyncio.to_thread(start, ["serve"], environment, "ready")
    gateway_env = {**environment, "CHRONICLE_HTTP_PORT": str(free_port()), "CHRONICLE_METRICS_PORT": str(free_port())}
    gateway, ready = await asyncio.to_thread(start, ["http"], gateway_env, "ready")
    try:
        url = f"http://127.0.0.1:{gateway_env['CHRONICLE_METRICS_PORT']}/metrics"
        assert ready["metrics"] == url
        api = f"http://127.0.0.1:{gateway_env['CHRONICLE_HTTP_PORT']}"
        headers = {"Authorization": f"Bearer {TokenAuthority(secret=JWT_SECRET).issue('gateway-user')}"}
        missing = uuid.uuid4()
        async with httpx.AsyncClient(base_url=api, timeout=30) as web:
            assert (await web.get("/api/conversations", headers=headers)).status_code == 200
            assert (await web.get(f"/api/conversations/{missing}", headers=headers)).status_code == 404
            assert (await web.get("/api/conversations")).status_code == 401
            assert (await web.get(f"/api/no/such/{missing}")).status_code == 404  # (outside /api: the console's page)
        text, samples = await scrape(url)
        listed = "chronicle_http_requests_total"
        assert at(samples, listed, route="/api/conversations", method="GET", status="200") == 1
        assert at(samples, listed, route="/api/conversations", method="GET", status="401") == 1
        assert at(samples, listed, route="/api/conversations/{conversationId}", method="GET", status="404") == 1
        assert at(samples, listed, route="unmatched", method="GET", status="404") == 1
        assert at(samples, "chronicle_http_request_seconds_count", route="/api/conversations") == 2
        assert str(missing) not in text and "gateway-user" not in text  # templates, never paths or callers
    finally:
        assert await asyncio.to_thread(stop, gateway) == 0
        assert await asyncio.to_thread(stop, service) == 0
