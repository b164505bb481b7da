"""Generation jobs: idempotent requests under concurrency, the retrieval snapshot, and the
phase steps a worker records (driven here through the command bus, as a worker does)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_contract.jobs import DescribeJob, FailJob, RecordOutcomes, StartPhase

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle, bootstrap
from tests.conftest import JWT_SECRET, ClientFactory, make_settings
from tests.servers import TestServers

QUIZ: dict[str, Any] = {
    "title": "Tulips",
    "questions": [
        {"question": "When do tulips bloom?", "options": ["spring", "winter"], "correct_answer": "spring",
         "explanation": "chunk 1 says so"},
    ],
}


@pytest.fixture
async def manual(servers: TestServers, tmp_path: Path) -> AsyncIterator[tuple[Chronicle, ClientFactory]]:
    """An instance without job workers on a fresh database: the test is the worker."""
    clients: list[ChronicleClient] = []
    with servers.fresh_database() as url:
        chronicle = await bootstrap(make_settings(url, servers.nats_url, tmp_path, job_workers=0))
        assert chronicle.engine is not None and await asyncio.to_thread(chronicle.engine.wait_prepared, 60)

        async def connect(user: str | None = None) -> ChronicleClient:
            token = TokenAuthority(secret=JWT_SECRET).issue(user or f"user-{uuid.uuid4().hex[:8]}")
            clients.append(await ChronicleClient.connect(chronicle.nats_url, token, prefix=chronicle.settings.subject_prefix))
            return clients[-1]

        yield chronicle, connect
        for client in clients:
            await client.close()
        await chronicle.stop()


async def step(chronicle: Chronicle, owner: str, name: str, **fields: Any) -> dict[str, Any]:
    model = {"job.start_phase": StartPhase, "job.describe": DescribeJob, "job.record_outcomes": RecordOutcomes,
             "job.fail": FailJob}[name]
    return await chronicle.bus.execute(model(**fields), owner)


async def run_to_validation(chronicle: Chronicle, owner: str, job_id: Any, worker: str = "w1") -> None:
    assert (await step(chronicle, owner, "job.start_phase", job_id=job_id, worker=worker))["phase"] == "planning"
    await step(chronicle, owner, "job.record_outcomes", job_id=job_id, worker=worker, plan={"outline": ["bloom"]})
    assert (await step(chronicle, owner, "job.start_phase", job_id=job_id, worker=worker))["phase"] == "generating"
    await step(chronicle, owner, "job.record_outcomes", job_id=job_id, worker=worker, result=QUIZ)
    assert (await step(chronicle, owner, "job.start_phase", job_id=job_id, worker=worker))["phase"] == "validating"


async def test_a_duplicate_while_active_is_the_same_job_and_after_completion_a_new_one(
    manual: tuple[Chronicle, ClientFactory],
) -> None:
    chronicle, connect = manual
    user = "jobs-owner-1"
    client = await connect(user)
    talk = await client.conversations.start(title="tulip facts")
    await client.conversations.add_message(talk.conversation_id, "user", "Tulips bloom in spring and love cold winters.")
    await client.conversations.add_message(talk.conversation_id, "user", "Orchids are a different story.")
    await client.conversations.list()  # the search read model holds the messages

    first = await client.jobs.request("a quiz about tulips blooming", "quiz", options={"num_questions": 3})
    assert first.created and first.status == "pending" and first.progress == 0
    again = await client.jobs.request("a quiz about tulips blooming", "quiz", options={"num_questions": 3})
    assert (again.job_id, again.created, again.status) == (first.job_id, False, "pending")
    other = await client.jobs.request("a quiz about tulips blooming", "quiz", options={"num_questions": 4})
    assert other.created and other.job_id != first.job_id

    job = await client.jobs.get(first.job_id)
    assert (job.status, job.attempt, job.snapshot_chunks, job.artifact_type) == ("pending", 1, 1, "quiz")
    started = await step(chronicle, user, "job.start_phase", job_id=first.job_id, worker="w1")
    assert [chunk["text"] for chunk in started["snapshot"]] == ["Tulips bloom in spring and love cold winters."]
    assert started["snapshot"][0]["source_id"] == str(talk.conversation_id)

    await step(chronicle, user, "job.record_outcomes", job_id=first.job_id, worker="w1", plan={"outline": ["bloom"]})
    await step(chronicle, user, "job.start_phase", job_id=first.job_id, worker="w1")
    await step(chronicle, user, "job.record_outcomes", job_id=first.job_id, worker="w1", result=QUIZ)
    await step(chronicle, user, "job.start_phase", job_id=first.job_id, worker="w1")
    done = await step(chronicle, user, "job.record_outcomes", job_id=first.job_id, worker="w1", problems=[])
    assert done["status"] == "completed" and done["progress"] == 100
    client.observed(done["position"])

    completed = await client.jobs.get(first.job_id)
    assert (completed.status, completed.progress, completed.result) == ("completed", 100, QUIZ)
    assert completed.artifact_id is not None
    artifact = await client.artifacts.get(completed.artifact_id)
    assert artifact.origin == "job" and artifact.layout["type"] == "quiz" and "When do tulips bloom?" in artifact.draft
    assert (await client.artifacts.search("tulips bloom")).items[0].artifact_id == artifact.id

    renewed = await client.jobs.request("a quiz about tulips blooming", "quiz", options={"num_questions": 3})
    assert renewed.created and renewed.job_id not in (first.job_id, other.job_id)
    listed = await client.jobs.list(status="pending")
    assert {item.job_id for item in listed.items} == {other.job_id, renewed.job_id}


async def test_fifty_identical_requests_at_once_make_one_job(
    manual: tuple[Chronicle, ClientFactory], tmp_path: Path
) -> None:
    # Two instances share the work (NATS spreads the requests): the event store's own
    # optimistic concurrency on the fingerprint's slot decides, not a check-then-insert.
    # No workers: the job stays active while the requests arrive.
    chronicle, connect = manual
    second = await bootstrap(chronicle.settings.model_copy(update={"run_projections": False, "data_dir": tmp_path / "2"}))
    try:
        client = await connect()
        replies = await asyncio.gather(*(client.jobs.request("summarise my notes", "summary") for _ in range(50)))
    finally:
        await second.stop()
    assert len({r.job_id for r in replies}) == 1
    assert sum(r.created for r in replies) == 1
    assert (await client.jobs.list()).total == 1


async def test_a_failed_validation_retries_once_with_the_same_snapshot_then_fails(
    manual: tuple[Chronicle, ClientFactory],
) -> None:
    chronicle, connect = manual
    user = "jobs-owner-2"
    client = await connect(user)
    requested = await client.jobs.request("a summary", "summary", options={"chunks": 0})
    await run_to_validation(chronicle, user, requested.job_id)
    retried = await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", problems=["summary: blank"])
    assert (retried["status"], retried["progress"]) == ("generating", 20)
    again = await step(chronicle, user, "job.start_phase", job_id=requested.job_id, worker="w1")
    assert (again["phase"], again["attempt"], again["plan"]) == ("generating", 2, {"outline": ["bloom"]})
    await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", result={"summary": ""})
    await step(chronicle, user, "job.start_phase", job_id=requested.job_id, worker="w1")
    failed = await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", problems=["summary: blank"])
    assert failed["status"] == "failed"
    client.observed(failed["position"])
    job = await client.jobs.get(requested.job_id)
    assert (job.status, job.attempt, job.error) == ("failed", 2, "the result failed validation 2 times")
    assert (await client.jobs.request("a summary", "summary", options={"chunks": 0})).created


async def test_outcomes_recorded_together_keep_every_transition_in_one_commit(
    manual: tuple[Chronicle, ClientFactory],
) -> None:
    chronicle, connect = manual
    user = "jobs-owner-4"
    client = await connect(user)
    requested = await client.jobs.request("a quiz about tulips", "quiz", options={"chunks": 0})
    await step(chronicle, user, "job.start_phase", job_id=requested.job_id, worker="w1")
    with pytest.raises(ChronicleError) as refused:  # a result while planning: nothing of it is written
        await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", result=QUIZ)
    assert refused.value.code == "conflict"
    with pytest.raises(ValueError, match="at least one"):
        RecordOutcomes(job_id=requested.job_id, worker="w1")

    done = await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1",
                      plan={"outline": ["bloom"]}, result=QUIZ, problems=[])
    assert (done["status"], done["phase"], done["progress"]) == ("completed", None, 100) and done["artifact_id"]
    events = await client.audit.events(requested.job_id)
    assert [e.type.removeprefix("Job.") for e in events] == [
        "Requested", "PhaseStarted", "PlanStored", "PhaseStarted", "Generated", "PhaseStarted", "Validated", "Completed",
    ]
    assert len({e.timestamp for e in events[2:]}) == 1  # decided together, by one command
    assert events[1].timestamp < events[2].timestamp and events[-1].position <= done["position"]
    assert [e.payload["progress"] for e in events[2:]] == [20, 20, 60, 60, 90, 100]


async def test_a_pending_job_is_claimed_by_the_first_outcome_recorded_for_it(
    manual: tuple[Chronicle, ClientFactory],
) -> None:
    chronicle, connect = manual
    user = "jobs-owner-5"
    client = await connect(user)
    requested = await client.jobs.request("a summary of tulips", "summary", options={"chunks": 0})
    described = await step(chronicle, user, "job.describe", job_id=requested.job_id, worker="w1")
    assert (described["status"], described["phase"], described["spec"]["content"]) == (
        "pending", "planning", "a summary of tulips")
    assert len(await client.audit.events(requested.job_id)) == 1  # describing records nothing

    planned = await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", plan={"p": 1})
    assert (planned["status"], planned["phase"]) == ("generating", "generating")
    with pytest.raises(ChronicleError) as refused:  # w2 was not handed the job: it must take it over openly
        await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w2", result={"summary": "x"})
    assert refused.value.code == "conflict"
    starts = [(e.payload["phase"], e.payload["worker"]) for e in await client.audit.events(requested.job_id)
              if e.type == "Job.PhaseStarted"]
    assert starts == [("planning", "w1"), ("generating", "w1")]


async def test_another_worker_takes_a_phase_over_and_the_first_is_refused(
    manual: tuple[Chronicle, ClientFactory],
) -> None:
    chronicle, connect = manual
    user = "jobs-owner-3"
    client = await connect(user)
    requested = await client.jobs.request("a layout for a tulip shop", "layout")
    await step(chronicle, user, "job.start_phase", job_id=requested.job_id, worker="w1")
    taken = await step(chronicle, user, "job.start_phase", job_id=requested.job_id, worker="w2")
    assert taken["phase"] == "planning"
    with pytest.raises(ChronicleError) as refused:
        await step(chronicle, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", plan={})
    assert refused.value.code == "conflict"
    events = await client.audit.events(requested.job_id)
    starts = [(e.payload["worker"], e.payload["taken_over_from"]) for e in events if e.type == "Job.PhaseStarted"]
    assert starts == [("w1", None), ("w2", "w1")]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"artifact_type": "poem"}, "artifact_type"),
        ({"content": ""}, "content"),
        ({"options": {"chunks": 500}}, "options.chunks"),
        ({"source_ids": ["s"] * 101}, "source_ids"),
        ({"priority": 1}, "priority"),
    ],
)
async def test_invalid_job_requests_are_refused(client: ChronicleClient, fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ChronicleError) as refused:
        await client.request("cmd.job.request", {"content": "a quiz", "artifact_type": "quiz", **fields})
    assert refused.value.code == "invalid" and refused.value.fields == [field]
    assert (await client.jobs.list()).total == 0


async def test_another_users_job_is_not_found(connect: ClientFactory) -> None:
    alice, bob = await connect(), await connect()
    requested = await alice.jobs.request("a quiz", "quiz")
    with pytest.raises(ChronicleError) as hidden:
        await bob.jobs.get(requested.job_id)
    assert hidden.value.code == "not_found"
    assert (await bob.jobs.list()).total == 0


async def test_a_quiz_recorded_before_seed_002s_field_names_reads_with_them(
    servers: TestServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job generated by an older Chronicle (a quiz's answer stored as `answer`, event v1)
    is finished, replayed and rebuilt by this one as `correct_answer`; its event is not rewritten."""
    from adapters.read_side.rebuild import rebuild
    from adapters.read_side.views import read_model_of
    from domain.job import Job
    from projections.jobs import JobsProjection

    legacy = {**QUIZ, "questions": [{**q, "answer": q["correct_answer"]} for q in QUIZ["questions"]]}
    for question in legacy["questions"]:
        del question["correct_answer"]
    user = "jobs-owner-legacy"
    with servers.fresh_database() as url:
        settings = make_settings(url, servers.nats_url, tmp_path, job_workers=0)
        token = TokenAuthority(secret=JWT_SECRET).issue(user)
        older = await bootstrap(settings)
        try:
            client = await ChronicleClient.connect(older.nats_url, token, prefix=settings.subject_prefix)
            requested = await client.jobs.request("a quiz about tulips", "quiz", options={"chunks": 0})
            await client.close()
            with monkeypatch.context() as as_before:  # what the older code wrote: no class_version, `answer`
                as_before.setattr(Job.Generated, "class_version", 1)
                await step(older, user, "job.record_outcomes", job_id=requested.job_id, worker="w1",
                           plan={"outline": ["bloom"]}, result=legacy)
        finally:
            await older.stop()

        newer = await bootstrap(settings)  # a fresh start: the job is read back from its stored events
        try:
            assert newer.engine is not None and await asyncio.to_thread(newer.engine.wait_prepared, 60)
            done = await step(newer, user, "job.record_outcomes", job_id=requested.job_id, worker="w1", problems=[])
            assert done["status"] == "completed"
            client = await ChronicleClient.connect(newer.nats_url, token, prefix=settings.subject_prefix)
            client.observed(done["position"])
            artifact = await client.artifacts.get(done["artifact_id"])
            question = artifact.layout["children"][0]
            assert [(o["label"], o["correct"]) for o in question["children"][:2]] == [("spring", True), ("winter", False)]
            events = await client.audit.events(requested.job_id)
            generated = next(e for e in events if e.type == "Job.Generated")
            assert generated.payload["result"] == legacy  # an audit shows the record as it was written
            replayed = await client.audit.stream(requested.job_id, at_version=generated.version)
            assert replayed.state is not None and replayed.state["result"] == QUIZ  # and the state as read now
            await asyncio.to_thread(rebuild, newer.target, read_model_of(JobsProjection))
            assert (await client.jobs.get(requested.job_id)).result == QUIZ
            await client.close()
        finally:
            await newer.stop()
        with newer.target.connect() as conn:
            row = conn.execute(
                "SELECT state FROM chronicle.events WHERE originator_id = %s AND topic LIKE %s",
                (requested.job_id, "%Job.Generated"),
            ).fetchone()
        assert row is not None
        (state,) = row
        assert "class_version" not in orjson.loads(state), "the stored event was left as it was written"
