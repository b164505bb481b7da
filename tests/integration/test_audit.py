"""Audit over NATS: one aggregate's events and past states, timelines, auditors' reads recorded."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError

from domain.audit import AuditTrail
from entrypoints.bootstrap import Chronicle
from tests.conftest import ClientFactory
from tests.tampering import flipped_byte


async def chat(client: ChronicleClient, session_id: uuid.UUID | None = None) -> uuid.UUID:
    started = await client.conversations.start(title="audit me", session_id=session_id)
    for n in range(4):
        await client.conversations.add_message(started.conversation_id, "user", f"message {n}")
    await client.conversations.update(started.conversation_id, title="renamed")
    return started.conversation_id


async def test_stream_pages_through_events_and_rebuilds_past_states(client: ChronicleClient) -> None:
    conversation_id = await chat(client)
    events = await client.audit.events(conversation_id)
    assert [e.version for e in events] == list(range(1, 7))
    assert [e.type for e in events] == ["Conversation.Started"] + ["Conversation.MessageAdded"] * 4 + ["Conversation.Retitled"]
    assert events[1].payload["content"] == "message 0" and all(len(e.hash or "") == 64 for e in events)
    assert [e.position for e in events] == sorted(e.position for e in events)

    page = await client.audit.stream(conversation_id, limit=2, after_version=2)
    assert [e.version for e in page.events] == [3, 4] and page.next_after_version == 4

    at_three = await client.audit.stream(conversation_id, at_version=3, limit=1)
    assert at_three.state_version == 3 and at_three.state is not None
    assert at_three.state["message_count"] == 2 and at_three.state["title"] == "audit me"
    before_rename = events[-1].timestamp - timedelta(microseconds=1)
    at_time = await client.audit.stream(conversation_id, at_time=before_rename, limit=1)
    assert at_time.state_version == 5 and at_time.state is not None and at_time.state["title"] == "audit me"
    latest = await client.audit.stream(conversation_id, at_version=100, limit=1)
    assert latest.state_version == 6 and latest.state is not None and latest.state["title"] == "renamed"

    # Both: the earlier of the two points.
    both = await client.audit.stream(conversation_id, at_version=2, at_time=before_rename, limit=1)
    assert both.state_version == 2
    assert (await client.audit.stream(conversation_id, at_version=6, at_time=before_rename, limit=1)).state_version == 5


async def test_only_the_owner_or_an_auditor_reads_a_stream_and_auditor_reads_are_recorded(
    client: ChronicleClient, connect: ClientFactory
) -> None:
    conversation_id = await chat(client)
    stranger = await connect()
    with pytest.raises(ChronicleError) as hidden:
        await stranger.audit.stream(conversation_id)
    assert hidden.value.code == "not_found"
    missing = await connect()
    missing_id = uuid.uuid4()
    with pytest.raises(ChronicleError) as absent:
        await missing.audit.stream(missing_id)
    assert absent.value.code == "not_found" and absent.value.message.startswith("aggregate")
    assert hidden.value.message.replace(str(conversation_id), "ID") == absent.value.message.replace(str(missing_id), "ID")

    auditor_id = f"auditor-{uuid.uuid4().hex[:8]}"
    auditor = await connect(auditor_id, roles=("auditor",))
    seen = await auditor.audit.stream(conversation_id, at_version=2)
    assert len(seen.events) == 6 and seen.owner != auditor_id
    trail = await auditor.audit.events(AuditTrail.id_for(auditor_id))
    reads = [e.payload for e in trail if e.type == "AuditTrail.StreamRead"]
    assert reads == [
        {"what": "aggregate", "aggregate_id": str(conversation_id), "aggregate_owner": seen.owner,
         "at_version": 2, "at_time": None}
    ]
    own = await auditor.conversations.start(title="the auditor's own")
    await auditor.audit.stream(own.conversation_id)
    assert len(await auditor.audit.events(AuditTrail.id_for(auditor_id))) == len(trail), "own reads not recorded"


async def test_timeline_gathers_a_session_across_aggregates_in_global_order(
    client: ChronicleClient, connect: ClientFactory
) -> None:
    session = await client.sessions.create("incident 42")
    conversation_id = await chat(client, session.session_id)
    handle = await client.hitl.pause(conversation_id, step="approve", prompt="Ship it?")
    await client.hitl.resume(handle.run_id, approved=True, feedback="yes")
    other = await chat(client)  # not in the session

    timeline = await client.audit.timeline(session.session_id)
    ids = {e.aggregate_id for e in timeline.events}
    assert session.session_id in ids and conversation_id in ids and other not in ids
    assert {e.aggregate_type for e in timeline.events} == {"Session", "Conversation", "HitlRun"}
    assert timeline.aggregates == 3
    positions = [e.position for e in timeline.events]
    assert positions == sorted(positions) and len(positions) == 1 + (6 + 2 + 2) + 1

    first = await client.audit.timeline(session.session_id, limit=4)
    rest = await client.audit.timeline(session.session_id, after_position=first.next_after_position)
    assert [e.position for e in first.events + rest.events] == positions

    conversation_only = await client.audit.timeline(conversation_id)
    assert {e.aggregate_type for e in conversation_only.events} == {"Conversation", "HitlRun"}

    stranger = await connect()
    with pytest.raises(ChronicleError) as hidden:
        await stranger.audit.timeline(session.session_id)
    missing_id = uuid.uuid4()
    with pytest.raises(ChronicleError) as absent:
        await stranger.audit.timeline(missing_id)
    # The same answer, word for word but the id: nothing tells that the id exists.
    assert hidden.value.code == absent.value.code == "not_found"
    assert hidden.value.message.replace(str(session.session_id), "ID") == absent.value.message.replace(str(missing_id), "ID")


async def test_an_optimization_timeline_holds_its_rounds_and_trials(client: ChronicleClient) -> None:
    state = client.optimization(name="audited", optimizer="grid")
    round = await state.start_round()
    await state.record_trial(round, candidate={"x": 1}, score=1.0)
    await state.end_round(round)
    timeline = await client.audit.timeline(await state.start())
    assert [e.type for e in timeline.events] == [
        "Session.Created", "OptimizationStarted", "RoundOpened", "Round.Started", "Round.TrialAttached",
        "Trial.Recorded", "Round.Ended",
    ]



async def test_replay_command_prints_events_and_a_past_state(
    chronicle: Chronicle, client: ChronicleClient, tmp_path: Path
) -> None:
    conversation_id = await chat(client)
    env = {
        **os.environ,
        "CHRONICLE_DATABASE_URL": chronicle.settings.database_url or "",
        "CHRONICLE_NATS_URL": chronicle.nats_url,
        "CHRONICLE_DATA_DIR": str(tmp_path),
    }

    def replay(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "entrypoints.cli", "replay", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    shown = await asyncio.to_thread(replay, str(conversation_id), "--at-version", "3")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"Conversation {conversation_id}") and lines[0].endswith("6 events")
    assert [line.split()[3] for line in lines[3:9]] == ["Conversation.Started"] + ["Conversation.MessageAdded"] * 4 + [
        "Conversation.Retitled"
    ]
    state = orjson.loads("\n".join(lines[lines.index("state at version 3:") + 1:]))
    assert state["message_count"] == 2 and state["version"] == 3
    missing = await asyncio.to_thread(replay, str(uuid.uuid4()))
    assert missing.returncode != 0 and "not found" in missing.stderr


async def test_verify_reports_a_changed_event_where_an_untouched_chain_holds(
    chronicle: Chronicle, client: ChronicleClient, connect: ClientFactory
) -> None:
    conversation_id, bystander = await chat(client), await chat(client)
    held = await client.audit.verify(conversation_id)
    assert (held.events_checked, held.intact, held.breaks) == (6, True, [])
    assert (held.through_version, held.next_after_version) == (6, None)
    span = await client.audit.verify(conversation_id, after_version=2, limit=3)
    assert (span.events_checked, span.through_version, span.next_after_version) == (3, 5, 5)

    auditor_id = f"auditor-{uuid.uuid4().hex[:8]}"
    auditor = await connect(auditor_id, roles=("auditor",))
    with flipped_byte(chronicle.target, conversation_id, 3):
        broken = await client.audit.verify(conversation_id)
        assert not broken.intact and [(b.version, b.reason) for b in broken.breaks] == [(3, "hash mismatch")]
        assert broken.events_checked == 6
        assert (await client.audit.verify(conversation_id, after_version=3)).intact  # anchored on the stored hash
        assert (await client.audit.verify(bystander)).intact
        seen = await auditor.audit.verify(conversation_id)
        assert [b.version for b in seen.breaks] == [3]
    assert (await client.audit.verify(conversation_id)).intact

    trail = await auditor.audit.events(AuditTrail.id_for(auditor_id))
    assert [e.payload["what"] for e in trail if e.type == "AuditTrail.StreamRead"] == ["verify"]
    stranger, missing_id = await connect(), uuid.uuid4()
    with pytest.raises(ChronicleError) as hidden:
        await stranger.audit.verify(conversation_id)
    with pytest.raises(ChronicleError) as absent:
        await stranger.audit.verify(missing_id)
    assert hidden.value.code == absent.value.code == "not_found"
    assert hidden.value.message.replace(str(conversation_id), "ID") == absent.value.message.replace(str(missing_id), "ID")
