"""A reply model carries the same bytes as the dict its handler answered before it had one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import orjson
import pytest
from chronicle_contract.artifacts import Generated
from chronicle_contract.conversations import MessageAdded
from chronicle_contract.optimizations import RoundEnded, TrialRecorded, TrialsRecorded
from chronicle_contract.values import GenerationStats

from adapters.messaging.nats_service import envelope_ok
from services.conversations.commands import ConversationWritten
from services.runtime.replies import Wire, wire

A, B = UUID(int=1), UUID(int=2)
AT = datetime(2025, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)


def trial(index: int) -> tuple[TrialRecorded, dict[str, Any]]:
    fields: dict[str, Any] = dict(trial_id=A, round_id=B, round_index=0, trial_index=index, candidate_id=None,
                                  score=0.5, best_so_far=0.75, timestamp=AT)
    before = {**fields, "trial_id": str(A), "round_id": str(B), "timestamp": AT.isoformat()}
    return TrialRecorded(**fields), before


# (the reply model a handler returns now, the dict the same handler returned before)
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "conversation.add_message": (
        MessageAdded(conversation_id=A, message_id=B, title="t"),
        {"conversation_id": str(A), "message_id": str(B), "title": "t"},
    ),
    "conversation.delete (the id the contract does not promise, no title)": (
        ConversationWritten(conversation_id=A),
        {"conversation_id": str(A)},
    ),
    "round.end (a time, an explicit None, any JSON)": (
        RoundEnded(round_id=A, round_index=2, best_score=None, best_candidate={"x": [1, 2.5]}, best_so_far=1.0,
                   stop_reason=None, stopped=False, trial_count=3, timestamp=AT),
        {"round_id": str(A), "round_index": 2, "best_score": None, "best_candidate": {"x": [1, 2.5]},
         "best_so_far": 1.0, "stop_reason": None, "stopped": False, "trial_count": 3, "timestamp": AT.isoformat()},
    ),
    "trial.record_many (models inside a model)": (
        TrialsRecorded(trials=[trial(0)[0], trial(1)[0]]),
        {"trials": [trial(0)[1], trial(1)[1]]},
    ),
    "artifact.store_generated (a nested model given in full)": (
        Generated(artifact_id=A, session_id=B, parent_id=None, generation=0, layout={"type": "page"}, draft="d",
                  model=None, provider="offline", stats=GenerationStats(attempts=1, tokens=7, retries=0, duration_ms=0.0)),
        {"artifact_id": str(A), "session_id": str(B), "parent_id": None, "generation": 0, "layout": {"type": "page"},
         "draft": "d", "model": None, "provider": "offline",
         "stats": {"attempts": 1, "tokens": 7, "retries": 0, "duration_ms": 0.0}},
    ),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_reply_model_sends_the_bytes_its_dict_did(case: str) -> None:
    model, before = CASES[case]
    now = wire(model)
    assert now == before  # what the bus's callers see, and a replayed reply gives
    now["position"], before["position"] = 41, 41  # the bus adds it after the handler
    assert envelope_ok(now) == envelope_ok(before)


def test_data_already_shaped_for_the_wire_goes_as_it_is() -> None:
    rows = Wire[MessageAdded]({"conversation_id": A, "extra": orjson.Fragment(b"[1]")})
    assert wire(rows) is rows
