"""Job workers over JetStream: the whole pipeline, progress in order, retry, takeover."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from chronicle_client.connection import ChronicleClient
from chronicle_contract.bus import signals_prefix
from chronicle_contract.errors import ChronicleError

from adapters.auth import TokenAuthority
from adapters.generation.agent_offline import OfflineAgent
from domain.job import Chunk
from entrypoints.bootstrap import Chronicle, bootstrap
from services.ports.agent import JobSpec
from tests.conftest import JWT_SECRET, make_settings, new_prefix
from tests.servers import TestServers


class BrokenResults(OfflineAgent):
    """Generates an invalid quiz for the first `broken` attempts; remembers what each attempt was given."""

    def __init__(self, broken: int) -> None:
        super().__init__()
        self.broken = broken
        self.given: list[tuple[list[Chunk], dict[str, Any]]] = []

    async def generate_from_plan(self, spec: JobSpec, plan: dict[str, Any], snapshot: list[Chunk], attempt: int) -> Any:
        self.given.append((snapshot, plan))
        result = await super().generate_from_plan(spec, plan, snapshot, attempt)
        return {**result, "questions": []} if attempt <= self.broken else result


class StuckGenerating(OfflineAgent):
    """Never finishes generating: the worker holding the job goes quiet, as a dead one would."""

    async def generate_from_plan(self, spec: JobSpec, plan: dict[str, Any], snapshot: list[Chunk], attempt: int) -> Any:
        await asyncio.Event().wait()


Start = Callable[..., Any]


@pytest.fixture
async def start(servers: TestServers, tmp_path: Path) -> AsyncIterator[Start]:
    """`await start(url, prefix, agent, **settings)`: instances on one database and subject prefix."""
    running: list[Chronicle] = []

    async def make(url: str, prefix: str, agent: Any = None, **overrides: Any) -> Chronicle:
        settings = make_settings(url, servers.nats_url, tmp_path / uuid.uuid4().hex, **overrides)
        chronicle = await bootstrap(settings.model_copy(update={"subject_prefix": prefix}), agent=agent)
        running.append(chronicle)
        assert chronicle.engine is not None and await asyncio.to_thread(chronicle.engine.wait_prepared, 60)
        return chronicle

    yield make
    for chronicle in running:
        await chronicle.stop()


async def client_of(chronicle: Chronicle, user: str) -> ChronicleClient:
    token = TokenAuthority(secret=JWT_SECRET).issue(user)
    return await ChronicleClient.connect(chronicle.nats_url, token, prefix=chronicle.settings.subject_prefix)


async def test_a_job_runs_through_its_phases_with_progress_in_order(client: ChronicleClient) -> None:
    talk = await client.conversations.start(title="tulips")
    await client.conversations.add_message(talk.conversation_id, "user", "Tulips bloom in spring. They need cold winters.")
    await client.conversations.list()
    requested = await client.jobs.request("a quiz about tulips", "quiz", options={"num_questions": 3})
    updates: list[dict[str, Any]] = []
    job = await client.jobs.wait(requested.job_id, timeout=30, on_progress=updates.append)
    assert (job.status, job.progress, job.attempt, job.error) == ("completed", 100, 1, None)
    assert job.result is not None and job.plan is not None and job.artifact_id is not None
    assert len(job.result["questions"]) == 3 and job.plan["sources"]
    artifact = await client.artifacts.get(job.artifact_id)
    assert artifact.origin == "job" and artifact.layout["type"] == "quiz"
    progress = [u["progress"] for u in updates]
    assert progress == sorted(progress) and progress[-1] == 100


async def test_progress_events_are_the_whole_pipeline_in_order(client: ChronicleClient) -> None:
    requested = await client.jobs.request("a summary of nothing much", "summary", options={"chunks": 0})
    job = await client.jobs.wait(requested.job_id, timeout=30)
    events = [(e.type.removeprefix("Job."), e.payload.get("progress")) for e in await client.audit.events(job.job_id)]
    assert events == [
        ("Requested", None), ("PhaseStarted", 0), ("PlanStored", 20), ("PhaseStarted", 20), ("Generated", 60),
        ("PhaseStarted", 60), ("Validated", 90), ("Completed", 100),
    ]


@pytest.mark.parametrize(("broken", "status", "attempts"), [(1, "completed", 2), (2, "failed", 2)])
async def test_an_invalid_result_is_generated_again_once_with_the_same_snapshot_and_plan(
    servers: TestServers, start: Start, broken: int, status: str, attempts: int
) -> None:
    agent = BrokenResults(broken)
    with servers.fresh_database() as url:
        chronicle = await start(url, new_prefix(), agent)
        client = await client_of(chronicle, "retry-user")
        talk = await client.conversations.start(title="tulips")
        await client.conversations.add_message(talk.conversation_id, "user", "Tulips bloom in spring.")
        await client.conversations.list()
        requested = await client.jobs.request("a quiz about tulips", "quiz")
        job = await client.jobs.wait(requested.job_id, timeout=30)
        assert (job.status, job.attempt) == (status, attempts)
        assert len(agent.given) == 2 and agent.given[0] == agent.given[1] and agent.given[0][0]
        types = [e.type for e in await client.audit.events(job.job_id)]
        assert types.count("Job.RetryQueued") == 1 and types.count("Job.Generated") == 2
        if status == "failed":
            assert job.error == "the result failed validation 2 times" and job.artifact_id is None
            assert (await client.artifacts.list()).total == 0
        await client.close()


async def test_a_worker_that_goes_quiet_mid_phase_is_taken_over(servers: TestServers, start: Start) -> None:
    prefix = new_prefix()
    with servers.fresh_database() as url:
        stuck = await start(url, prefix, StuckGenerating(), job_ack_wait=1.0, job_workers=1)
        client = await client_of(stuck, "takeover-user")
        generating = asyncio.Event()

        async def progressed(message: Any) -> None:
            if orjson.loads(message.data)["status"] == "generating":
                generating.set()

        await client.nc.subscribe(f"{signals_prefix(prefix, client.user or '')}.jobs.*.progress", cb=progressed)
        requested = await client.jobs.request("a layout for a tulip shop", "layout", options={"chunks": 0})
        await asyncio.wait_for(generating.wait(), 30)  # the stuck worker holds the generating phase
        await stuck.stop()  # the worker dies with the job unfinished and its message unacked
        await start(url, prefix, OfflineAgent(), job_ack_wait=1.0, job_workers=1)
        job = await client.jobs.wait(requested.job_id, timeout=30)
        assert job.status == "completed" and job.artifact_id is not None
        starts = [e.payload for e in await client.audit.events(job.job_id) if e.type == "Job.PhaseStarted"]
        generated = [s for s in starts if s["phase"] == "generating"]
        assert len(generated) == 2 and generated[1]["taken_over_from"] == generated[0]["worker"]
        assert (await client.artifacts.list()).total == 1  # exactly one result
        await client.close()


async def test_seed_002s_options_are_honoured_and_checked(client: ChronicleClient) -> None:
    """A client written from seed 002: options={"num_questions": 3, "difficulty": ...}."""
    requested = await client.jobs.request("a quiz about tulips in spring", "quiz",
                                          options={"num_questions": 3, "difficulty": "hard"})
    job = await client.jobs.wait(requested.job_id, timeout=30)
    assert job.status == "completed" and job.result is not None and len(job.result["questions"]) == 3
    assert {len(q["options"]) for q in job.result["questions"]} == {6}  # hard: six choices each
    for question in job.result["questions"]:  # the seed's result shape, by its own field names
        assert set(question) == {"question", "options", "correct_answer", "explanation"}
        assert question["correct_answer"] in question["options"]
    for options, named in (({"num_questions": "many"}, "options.num_questions"),
                           ({"num_questions": 51}, "options.num_questions"),
                           ({"difficulty": "brutal"}, "options.difficulty"),
                           ({"colour": "red"}, "options.colour"),
                           ({"questions": 3}, "options.questions")):
        with pytest.raises(ChronicleError) as refused:
            await client.jobs.request("a quiz about tulips", "quiz", options=options)
        assert refused.value.code == "invalid" and refused.value.fields == [named]
    with pytest.raises(ChronicleError) as not_a_summary_option:
        await client.jobs.request("a summary of tulips", "summary", options={"num_questions": 3})
    assert not_a_summary_option.value.fields == ["options.num_questions"]
