"""The agents: the offline one's determinism and valid results, the OpenAI one against a scripted endpoint."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.generation.agent_offline import OfflineAgent
from adapters.generation.agent_openai import OpenAIAgent
from domain.job import Chunk
from domain.job_results import ARTIFACT_TYPES, problems_with
from services.ports.agent import AgentFailed, JobSpec
from tests.unit.chat_endpoint import ScriptedEndpoint, completion
from tests.unit.chat_endpoint import scripted_endpoint as scripted_endpoint  # the `endpoint` fixture

CAPTURED = datetime(2024, 5, 1, tzinfo=UTC)
SNAPSHOT = [
    Chunk(
        chunk_id="chunk-a",
        source_id="biology-101",
        text="Photosynthesis converts light energy into chemical energy. Chlorophyll absorbs red and blue light.",
        score=0.9,
        embedding_version="e1",
        captured_at=CAPTURED,
    ),
    Chunk(
        chunk_id="chunk-b",
        source_id="biology-101",
        text="The Calvin cycle fixes carbon dioxide into sugars.\nIt runs in the stroma.",
        score=0.4,
        embedding_version="e1",
        captured_at=CAPTURED,
    ),
]
offline = OfflineAgent()


async def plan_and_generate(agent: Any, spec: JobSpec, snapshot: list[Chunk], attempt: int = 1) -> tuple[dict, dict]:
    plan = await agent.plan(spec, snapshot)
    return plan, await agent.generate_from_plan(spec, plan, snapshot, attempt)


async def test_offline_is_deterministic_and_an_attempt_rewords_validly() -> None:
    spec = JobSpec(artifact_type="quiz", content="Quiz me on photosynthesis", options={"questions": 6})
    first, again = (
        await plan_and_generate(offline, spec, SNAPSHOT),
        await plan_and_generate(OfflineAgent(), spec, SNAPSHOT),
    )
    assert first == again
    retried = await offline.generate_from_plan(spec, first[0], SNAPSHOT, attempt=2)
    assert retried != first[1]
    assert problems_with("quiz", retried) == [] and len(retried["questions"]) == 6


async def test_the_offline_plan_draws_on_the_snapshot() -> None:
    spec = JobSpec(artifact_type="quiz", content="Explain the Calvin cycle", options={"questions": 3})
    plan, quiz = await plan_and_generate(offline, spec, SNAPSHOT)
    assert plan["artifact_type"] == "quiz" and plan["title"] == "Explain the Calvin cycle"
    assert plan["outline"][0] == {"topic": "The Calvin cycle fixes carbon dioxide into sugars.", "source": "chunk-b"}
    assert set(plan["sources"]) <= {"chunk-a", "chunk-b"} and plan["sources"][0] == "chunk-b"
    assert "chunk-b" in quiz["questions"][0]["explanation"]
    summary_spec = JobSpec(artifact_type="summary", content="photosynthesis", options={"key_points": 20})
    summary_plan = await offline.plan(summary_spec, SNAPSHOT)
    assert len(summary_plan["outline"]) == 4  # one per sentence: key points do not repeat


@pytest.mark.parametrize(("asked", "count"), [(None, 5), (12, 12), (500, 50), (0, 1), ("many", 5), (True, 5)])
async def test_the_question_count_comes_from_the_options(asked: Any, count: int) -> None:
    spec = JobSpec(artifact_type="quiz", content="cells", options={} if asked is None else {"questions": asked})
    _, quiz = await plan_and_generate(offline, spec, SNAPSHOT)
    assert len(quiz["questions"]) == count


async def test_a_plan_from_elsewhere_still_gives_a_valid_result() -> None:
    spec = JobSpec(artifact_type="quiz", content="cells")
    plan = {
        "title": 7,
        "outline": [
            "Mitochondria make energy for the cell.",
            {"topic": "Ribosomes build proteins.", "source": "x"},
            {"topic": "Membranes hold the cell together.", "source": ["chunk-a"]},
            {"topic": "???"},
            42,
        ],
    }
    quiz = await offline.generate_from_plan(spec, plan, SNAPSHOT, 1)
    assert await offline.validate(spec, quiz) == [] and len(quiz["questions"]) == 3
    assert quiz["title"] == "cells"
    assert "x" not in quiz["questions"][1]["explanation"].split()  # an id outside the snapshot is not cited


chunks = st.lists(
    st.builds(
        Chunk,
        chunk_id=st.text("abcdef0123456789-", min_size=1, max_size=12),
        source_id=st.just("source"),
        text=st.text(max_size=300),
        score=st.floats(0, 1),
        embedding_version=st.just("e1"),
        captured_at=st.just(CAPTURED),
    ),
    max_size=4,
    unique_by=lambda chunk: chunk.chunk_id,
)
options = st.dictionaries(
    st.sampled_from(["questions", "key_points", "sections", "choices", "tone"]),
    st.none() | st.integers(-5, 80) | st.text(max_size=5),
)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(ARTIFACT_TYPES), content=st.text(max_size=300), options=options, snapshot=chunks)
async def test_offline_results_are_always_valid(
    kind: str, content: str, options: dict[str, Any], snapshot: list[Chunk]
) -> None:
    spec = JobSpec(artifact_type=kind, content=content, options=options)
    plan, result = await plan_and_generate(offline, spec, snapshot)
    assert await offline.validate(spec, result) == []
    assert {item["source"] for item in plan["outline"]} <= {chunk.chunk_id for chunk in snapshot} | {None}
    again = await offline.generate_from_plan(spec, plan, snapshot, 3)
    assert problems_with(kind, again) == []


async def test_an_unknown_artifact_type_fails() -> None:
    spec = JobSpec(artifact_type="poem", content="roses")
    with pytest.raises(AgentFailed):
        await offline.plan(spec, SNAPSHOT)
    with pytest.raises(AgentFailed):
        await offline.generate_from_plan(spec, {"outline": ["roses are red"]}, SNAPSHOT, 1)
    with pytest.raises(AgentFailed):
        await offline.validate(spec, {})


PLAN = {
    "artifact_type": "quiz",
    "title": "Photosynthesis",
    "outline": [{"topic": "light reactions", "source": "chunk-a"}],
    "sources": ["chunk-a"],
}
QUIZ = {
    "title": "Photosynthesis",
    "questions": [
        {
            "question": "What does chlorophyll absorb?",
            "options": ["Red and blue light", "Green light"],
            "correct_answer": "Red and blue light",
            "explanation": "Source chunk-a.",
        }
    ],
}
SPEC = JobSpec(artifact_type="quiz", content="Quiz me on photosynthesis, privately", options={"questions": 1})


@pytest.fixture
async def agent(endpoint: ScriptedEndpoint) -> AsyncIterator[OpenAIAgent]:
    openai = OpenAIAgent(endpoint.url, "gpt-test", "sk-agent-key", timeout=5.0, backoff_seconds=0.01, temperature=0.2)
    yield openai
    await openai.aclose()


async def test_openai_plans_then_generates_a_valid_quiz(endpoint: ScriptedEndpoint, agent: OpenAIAgent) -> None:
    endpoint.script = [completion(json.dumps(PLAN), 10), completion(json.dumps(QUIZ), 20)]
    plan, quiz = await plan_and_generate(agent, SPEC, SNAPSHOT)
    assert (plan, quiz) == (PLAN, QUIZ)
    assert await agent.validate(SPEC, quiz) == [] and len(endpoint.requests) == 2  # validating asks no model
    for headers, body in endpoint.requests:
        assert headers["authorization"] == "Bearer sk-agent-key"
        assert (body["model"], body["temperature"], body["response_format"]) == (
            "gpt-test",
            0.2,
            {"type": "json_object"},
        )
        assert [message["role"] for message in body["messages"]] == ["system", "user"]
        system, user = (message["content"] for message in body["messages"])
        assert "quiz" in system and '"correct_answer"' in system
        assert SPEC.content in user and "[1] (id chunk-a) Photosynthesis" in user and "[2] (id chunk-b)" in user
    assert json.dumps(PLAN) in endpoint.requests[1][1]["messages"][1]["content"]
    assert "sk-agent-key" not in repr(agent)


async def test_openai_retries_invalid_replies_naming_the_problem(
    endpoint: ScriptedEndpoint, agent: OpenAIAgent
) -> None:
    wrong_answer = json.loads(json.dumps(QUIZ))
    wrong_answer["questions"][0]["correct_answer"] = "Blue"
    endpoint.script = [
        completion("not json {", 3),
        completion(json.dumps(wrong_answer), 3),
        completion(json.dumps(QUIZ), 3),
    ]
    assert await agent.generate_from_plan(SPEC, PLAN, [], attempt=2) == QUIZ
    last = endpoint.requests[-1][1]["messages"]
    assert [message["role"] for message in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "not a JSON object" in last[3]["content"]
    assert "questions[0].correct_answer: must be one of the options" in last[5]["content"]
    assert "attempt 2" in last[1]["content"] and "Sources: none" in last[1]["content"]


async def test_openai_retries_a_plan_without_an_outline(endpoint: ScriptedEndpoint, agent: OpenAIAgent) -> None:
    endpoint.script = [completion(json.dumps({"title": "t"}), 3), completion(json.dumps(PLAN), 3)]
    assert await agent.plan(SPEC, SNAPSHOT) == PLAN
    assert '"outline"' in endpoint.requests[1][1]["messages"][-1]["content"]


async def test_openai_gives_up_after_max_attempts_without_quoting(
    endpoint: ScriptedEndpoint, agent: OpenAIAgent
) -> None:
    endpoint.script = [completion(json.dumps({"title": SPEC.content, "questions": []}), 3)]
    with pytest.raises(AgentFailed) as failed:
        await agent.generate_from_plan(SPEC, PLAN, SNAPSHOT, 1)
    assert len(endpoint.requests) == 3 and "after 3 attempts" in failed.value.message
    assert "privately" not in failed.value.message and "Photosynthesis" not in failed.value.message


async def test_openai_refuses_an_unknown_type_without_a_call(endpoint: ScriptedEndpoint, agent: OpenAIAgent) -> None:
    endpoint.script = [completion(json.dumps(PLAN), 3)]
    with pytest.raises(AgentFailed):
        await agent.plan(SPEC.model_copy(update={"artifact_type": "poem"}), SNAPSHOT)
    assert endpoint.requests == []
