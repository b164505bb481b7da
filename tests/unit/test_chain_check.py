"""audit.verify without a server: a stream's span of stored rows walked from its anchor, and
who may ask (the owner, an auditor whose check is recorded; anyone else hears not_found)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from chronicle_contract.audit import AuditVerify
from chronicle_contract.errors import ChronicleError

from adapters.auth import Caller
from adapters.store.hash_chains import GENESIS, PostgresChains, event_hash
from services.audit.chains import ChainCheck
from services.audit.queries import Audit
from services.ports.audit import EventDecoder
from tests.unit.fake_queries import FakeQueries

OWNER = "alice"
TOPIC = "domain.conversation:Conversation.MessageAdded"


def stored_stream(stream: uuid.UUID, count: int) -> list[dict[str, Any]]:
    """Rows as the insert trigger chains them: each hash over the one before it."""
    rows, prev = [], GENESIS
    for version in range(1, count + 1):
        state = f'{{"n": {version}}}'.encode()
        prev = event_hash(prev, stream, version, TOPIC, state)
        rows.append({"originator_version": version, "topic": TOPIC, "state": state, "hash": prev})
    return rows


class StoredEvents(FakeQueries):
    """chronicle.events of one stream, answering audit's first-event look-up and STREAM_SPAN."""

    def __init__(self, stream: uuid.UUID, rows: list[dict[str, Any]]) -> None:
        self.stream = stream
        self.rows = rows
        self.spans: list[dict[str, Any]] = []

    async def fetch_all(self, query: Any, params: Any, *, binary: bool = False) -> list[dict[str, Any]]:
        if isinstance(params, dict):  # a span: the anchor at or before `after`, then `most` after it
            self.spans.append(params)
            before = [row for row in self.rows if row["originator_version"] <= params["after"]]
            after = [row for row in self.rows if row["originator_version"] > params["after"]]
            return before[-1:] + after[: params["most"]] if params["stream"] == self.stream else []
        aggregate_id, = params  # the first event, whose owner says who may read the stream
        first = [row for row in self.rows if row["originator_version"] == 1]
        return first if aggregate_id == self.stream else []



class ClearEvents(EventDecoder):
    """Every stream here is alice's conversation."""

    def event(self, row: dict[str, Any]) -> Any:
        raise NotImplementedError

    def owner_and_type(self, row: dict[str, Any]) -> tuple[str, str]:
        return OWNER, "Conversation"

    def described(self, row: dict[str, Any], aggregate_type: str) -> dict[str, Any]:
        raise NotImplementedError

    def snapshot(self, row: dict[str, Any]) -> Any:
        raise NotImplementedError


def checker(events: StoredEvents, recorded: list[tuple[str, dict[str, Any]]]) -> ChainCheck:
    async def record_read(auditor: str, read: dict[str, Any]) -> None:
        recorded.append((auditor, read))

    return ChainCheck(Audit(events, record_read, ClearEvents()), PostgresChains(events))


def verify(check: ChainCheck, caller: str, stream: uuid.UUID, **fields: Any) -> dict[str, Any]:
    return dict(asyncio.run(check.verify(caller, AuditVerify(aggregate_id=stream, **fields))))


def test_an_untouched_stream_holds_and_pages_on_from_the_stored_hash() -> None:
    stream = uuid.uuid4()
    events = StoredEvents(stream, stored_stream(stream, 7))
    check = checker(events, [])
    whole = verify(check, OWNER, stream)
    assert (whole["events_checked"], whole["intact"], whole["breaks"]) == (7, True, [])
    assert (whole["through_version"], whole["next_after_version"]) == (7, None)
    first = verify(check, OWNER, stream, limit=3)
    assert (first["events_checked"], first["through_version"], first["next_after_version"]) == (3, 3, 3)
    second = verify(check, OWNER, stream, after_version=3, limit=3)
    assert (second["events_checked"], second["intact"], second["next_after_version"]) == (3, True, 6)
    last = verify(check, OWNER, stream, after_version=6, limit=3)
    assert (last["events_checked"], last["through_version"], last["next_after_version"]) == (1, 7, None)
    # A page asks for one row more than it checks, to know whether more follow.
    assert [span["most"] for span in events.spans] == [1_001, 4, 4, 4]
    beyond = verify(check, OWNER, stream, after_version=7)
    assert (beyond["events_checked"], beyond["intact"], beyond["through_version"]) == (0, True, None)


def test_a_changed_event_is_one_break_at_its_version_in_every_page_that_holds_it() -> None:
    stream = uuid.uuid4()
    rows = stored_stream(stream, 6)
    rows[3] = {**rows[3], "state": b'{"n": 400}'}  # version 4's content rewritten, its hash kept
    check = checker(StoredEvents(stream, rows), [])
    whole = verify(check, OWNER, stream)
    assert (whole["intact"], whole["breaks"]) == (False, [{"version": 4, "reason": "hash mismatch"}])
    assert verify(check, OWNER, stream, after_version=3, limit=1)["breaks"] == [{"version": 4, "reason": "hash mismatch"}]
    # The page after it is anchored on version 4's stored hash, which version 5 still covers.
    assert verify(check, OWNER, stream, after_version=4)["intact"]


def test_a_removed_event_is_missing_and_its_successor_mismatches() -> None:
    stream = uuid.uuid4()
    rows = [row for row in stored_stream(stream, 6) if row["originator_version"] != 3]
    check = checker(StoredEvents(stream, rows), [])
    expected = [{"version": 3, "reason": "missing"}, {"version": 4, "reason": "hash mismatch"}]
    assert verify(check, OWNER, stream)["breaks"] == expected
    # A page asked to start after the removed version is anchored on the one before it.
    assert verify(check, OWNER, stream, after_version=3)["breaks"] == expected


def test_another_user_hears_what_a_missing_id_answers_and_an_auditors_check_is_recorded() -> None:
    stream, unknown = uuid.uuid4(), uuid.uuid4()
    recorded: list[tuple[str, dict[str, Any]]] = []
    events = StoredEvents(stream, stored_stream(stream, 2))
    check = checker(events, recorded)
    with pytest.raises(ChronicleError) as hidden:
        verify(check, "mallory", stream)
    with pytest.raises(ChronicleError) as absent:
        verify(check, "mallory", unknown)
    assert hidden.value.code == absent.value.code == "not_found"
    assert hidden.value.message.replace(str(stream), "ID") == absent.value.message.replace(str(unknown), "ID")
    assert events.spans == [], "nothing was hashed for a caller who may not read the stream"

    assert verify(check, Caller("carol", roles=frozenset({"auditor"})), stream)["intact"]
    assert recorded == [("carol", {"what": "verify", "aggregate_id": stream, "aggregate_owner": OWNER})]
    verify(check, OWNER, stream)
    assert len(recorded) == 1, "an owner's own check is not recorded"
