"""The wire contract keeps its own limits and value types (the client needs no server
package); here the server holds them against its domain, so the two cannot drift."""

from __future__ import annotations

from typing import get_args

import pytest
from chronicle_contract import values
from pydantic import BaseModel

from domain import artifact, base, conversation, hitl, job, optimization, session, trial, variation_set

SAME_LIMITS = [
    ("SYSTEM_OWNER", base.SYSTEM_OWNER),
    ("MAX_TAGS", base.MAX_TAGS),
    ("MAX_TAG_LENGTH", base.MAX_TAG_LENGTH),
    ("MAX_TITLE", conversation.MAX_TITLE),
    ("MAX_CONTENT", conversation.MAX_CONTENT),
    ("MAX_MESSAGE_TYPE", conversation.MAX_MESSAGE_TYPE),
    ("MAX_EMBEDDING_PROVIDER", conversation.MAX_EMBEDDING_PROVIDER),
    ("MAX_QUERY", artifact.MAX_QUERY),
    ("MAX_DRAFT", artifact.MAX_DRAFT),
    ("MAX_LABEL", artifact.MAX_LABEL),
    ("MAX_LABEL", optimization.MAX_LABEL),
    ("MAX_EXAMPLE_TEXT", artifact.MAX_EXAMPLE_TEXT),
    ("MAX_REFINEMENT", artifact.MAX_REFINEMENT),
    ("MAX_TEMPERATURE", artifact.MAX_TEMPERATURE),
    ("MAX_PREVIEW_BYTES", artifact.MAX_PREVIEW_BYTES),
    ("MAX_REMOVAL_REASON", artifact.MAX_REMOVAL_REASON),
    ("MAX_VARIATIONS", variation_set.MAX_VARIATIONS),
    ("MAX_PROMPT", hitl.MAX_PROMPT),
    ("MAX_STEP", hitl.MAX_STEP),
    ("MAX_CHECKPOINT_TYPE", hitl.MAX_CHECKPOINT_TYPE),
    ("MAX_JOB_CONTENT", job.MAX_CONTENT),
    ("MAX_JOB_REASON", job.MAX_REASON),
    ("MAX_WORKER", job.MAX_WORKER),
    ("MAX_STOP_REASON", optimization.MAX_STOP_REASON),
    ("MAX_SESSION_NAME", session.MAX_SESSION_NAME),
    ("MAX_SESSION_DESCRIPTION", session.MAX_SESSION_DESCRIPTION),
    ("MAX_CANDIDATE_ID", trial.MAX_CANDIDATE_ID),
    ("MAX_INVALID_REASON", trial.MAX_INVALID_REASON),
]


@pytest.mark.parametrize(("name", "domain_value"), SAME_LIMITS, ids=[n for n, _ in SAME_LIMITS])
def test_a_limit_of_the_wire_is_the_domains(name: str, domain_value: object) -> None:
    assert getattr(values, name) == domain_value


@pytest.mark.parametrize(
    ("wire", "domain_type"),
    [(values.Origin, artifact.Origin), (values.JobStatus, job.Status), (values.Direction, optimization.Direction),
     (values.SessionKind, session.SessionKind)],
)
def test_a_choice_of_the_wire_is_the_domains(wire: object, domain_type: object) -> None:
    assert get_args(wire) == get_args(domain_type)


@pytest.mark.parametrize(
    ("wire", "domain_model"),
    [(values.GenerationStats, artifact.GenerationStats), (values.HistoryWindow, hitl.HistoryWindow),
     (values.Chunk, job.Chunk)],
)
def test_a_value_type_of_the_wire_is_the_domains(wire: type[BaseModel], domain_model: type[BaseModel]) -> None:
    assert wire.model_json_schema()["properties"] == domain_model.model_json_schema()["properties"]
    assert wire.model_config == domain_model.model_config


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize(("score", "best"), [(None, None), (1.0, None), (None, 1.0), (1.0, 2.0), (2.0, 1.0), (1.0, 1.0)])
def test_improves_agrees(direction: str, score: float | None, best: float | None) -> None:
    assert values.improves(direction, score, best) == optimization.improves(direction, score, best)  # type: ignore[arg-type]


def test_a_commands_aggregate_ids_are_the_uuids_its_id_fields_hold() -> None:
    from uuid import uuid4

    from chronicle_contract.conversations import AddMessage
    from chronicle_contract.hitl import PauseRun

    conversation_id = uuid4()
    added = AddMessage(conversation_id=conversation_id, role="user", content="hi", metadata={"other_id": str(uuid4())})
    assert added.aggregate_ids() == [conversation_id]
    for run_id in (None, "run-1"):  # (none given, or a run's own name: no aggregate to load by it)
        paused = PauseRun(conversation_id=conversation_id, run_id=run_id, step="s", prompt="p")
        assert paused.aggregate_ids() == [conversation_id]
