"""Artifacts over their whole life: failed variations, retention by events, the audit timeline."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chronicle_client.connection import ChronicleClient

from adapters.auth import TokenAuthority
from adapters.generation.generator_offline import OfflineGenerator
from entrypoints.bootstrap import Chronicle, bootstrap
from services.ports.generator import Generation, GenerationFailed, GenerationRequest
from tests.conftest import JWT_SECRET, make_settings
from tests.servers import TestServers


class FailsOneVariation:
    """The offline generator, except that variation 2 always fails (as an overloaded model would)."""

    name = "flaky"

    def __init__(self) -> None:
        self.offline = OfflineGenerator()

    async def generate(self, request: GenerationRequest) -> Generation:
        if request.variation_index == 2:
            raise GenerationFailed("the model is overloaded")
        return await self.offline.generate(request)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


OwnInstance = Callable[..., Any]


@pytest.fixture
async def own_instance(servers: TestServers, tmp_path: Path) -> AsyncIterator[OwnInstance]:
    """`await own_instance(**settings)`: a Chronicle on a fresh database (retention sweeps
    touch every user's artifacts, so it must not share the session's database), its clock
    and a client factory."""
    started: list[tuple[Chronicle, Any]] = []
    clients: list[ChronicleClient] = []

    async def start(generator: Any = None, **overrides: Any) -> tuple[Chronicle, Clock, Callable[[], Any]]:
        database = servers.fresh_database()
        url = database.__enter__()
        clock = Clock()
        chronicle = await bootstrap(
            make_settings(url, servers.nats_url, tmp_path, **overrides), clock=clock, generator=generator
        )
        started.append((chronicle, database))

        async def connect() -> ChronicleClient:
            token = TokenAuthority(secret=JWT_SECRET).issue(f"user-{uuid.uuid4().hex[:8]}")
            client = await ChronicleClient.connect(chronicle.nats_url, token, prefix=chronicle.settings.subject_prefix)
            clients.append(client)
            return client

        return chronicle, clock, connect

    yield start
    for client in clients:
        await client.close()
    for chronicle, database in started:
        await chronicle.stop()
        database.__exit__(None, None, None)


async def test_a_failed_variation_is_recorded_as_failed_not_dropped(own_instance: OwnInstance) -> None:
    _, _, connect = await own_instance(generator=FailsOneVariation())
    client = await connect()
    made = await client.artifacts.variations("tulip shop", count=4)
    assert [(m.index, m.status) for m in made.members] == [(0, "stored"), (1, "stored"), (2, "failed"), (3, "stored")]
    assert made.members[2].error == "the model is overloaded" and made.members[2].artifact_id is None
    assert sorted(made.rankings["depth"]) == [0, 1, 3]
    stored = await client.artifacts.variation_set(made.variation_set_id)
    assert stored.members == made.members
    assert (await client.artifacts.list()).total == 3


async def test_retention_removes_by_age_and_by_session_limit_through_events(own_instance: OwnInstance) -> None:
    # A sweep an hour away: the test runs the one that counts itself.
    chronicle, clock, connect = await own_instance(
        artifact_retention_days=5, artifact_max_per_session=3, retention_interval=3600
    )
    assert chronicle.retention is not None
    client = await connect()
    clock.now -= timedelta(days=10)
    old = await client.artifacts.store({"type": "page", "label": "old"}, stats={"tokens": 7})
    clock.now += timedelta(days=10)
    kept = []
    for n in range(5):
        clock.now += timedelta(seconds=1)
        kept.append(await client.artifacts.store({"type": "page", "label": f"new {n}"}, parent_id=old.artifact_id))
    await client.artifacts.list()  # the read models hold all six

    # The sweep records removals as events and waits until the read models dropped them.
    assert await chronicle.retention.sweep() == 3
    assert await chronicle.retention.sweep() == 0
    listed = await client.artifacts.list()
    assert [a.id for a in listed.items] == [a.artifact_id for a in kept[:1:-1]]
    session = await client.sessions.get(old.session_id)
    assert (session.artifact_count, session.total_tokens) == (3, 7)

    # Removal is history: the events say what went and why, and lineage still traces it.
    events = await client.audit.stream(old.artifact_id)
    removed = events.events[-1]
    assert removed.type == "Artifact.Removed" and removed.payload["reason"] == "retention: older than 5 days"
    lineage = await client.artifacts.lineage(kept[-1].artifact_id, direction="ancestors")
    assert [(a.id, a.removed) for a in lineage.ancestors] == [(old.artifact_id, True)]
    over_limit = await client.audit.stream(kept[0].artifact_id)
    assert over_limit.events[-1].payload["reason"] == "retention: session over 3 artifacts"


async def test_the_audit_timeline_of_a_session_holds_its_artifacts(client: ChronicleClient) -> None:
    made = await client.artifacts.generate("tulip newsletter")
    refined = await client.artifacts.refine(made.artifact_id, "shorter")
    await client.artifacts.variations("tulip variants", count=2, base_artifact_id=made.artifact_id)
    timeline = await client.audit.timeline(made.session_id)
    types = [e.type for e in timeline.events]
    assert types.count("Artifact.Stored") == 4 and "VariationSet.Created" in types and "Session.Created" in types
    assert refined.artifact_id in {e.aggregate_id for e in timeline.events}
