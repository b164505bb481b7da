"""Signals published by the command bus's fast path and by the relay behind it, and the
projection engine's child process."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from chronicle_client.connection import ChronicleClient
from chronicle_contract.bus import signals_prefix
from chronicle_contract.hitl import run_signals

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle
from entrypoints.projection_process import ProjectionProcess
from services.hitl.coordinator import SignalRelay
from tests.conftest import ClientFactory
from tests.integration.test_hitl import conversation_with_history
from tests.waiting import eventually


@pytest.fixture
async def own(instance: tuple[Chronicle, str], authority: TokenAuthority) -> AsyncIterator[tuple[Chronicle, ChronicleClient]]:
    """A Chronicle of this test's own and a client of it."""
    chronicle, _ = instance
    token = authority.issue(f"u-{uuid.uuid4().hex[:12]}")
    client = await ChronicleClient.connect(chronicle.nats_url, token, prefix=chronicle.settings.subject_prefix)
    yield chronicle, client
    await client.close()


async def signals_of(client: ChronicleClient, run_id: str) -> tuple[list[dict[str, Any]], Any]:
    """Every message published on the run's subjects (core NATS: duplicates show too)."""
    seen: list[dict[str, Any]] = []

    async def received(message: Any) -> None:
        seen.append({"subject": message.subject.rsplit(".", 1)[-1], **orjson.loads(message.data)})

    subject = f"{run_signals(signals_prefix(client.prefix, client.user or ''), run_id)}.*"
    subscription = await client.nc.subscribe(subject, cb=received)
    await client.nc.flush()
    return seen, subscription


def relayed_up_to(chronicle: Chronicle) -> int:
    """The log position the signal relay has dealt with (published, or found published)."""
    with chronicle.target.connect() as conn:
        row = conn.execute("SELECT position FROM chronicle.projections WHERE name = %s", (SignalRelay.name,)).fetchone()
    return int(row[0]) if row else 0


async def settle(seen: list[dict[str, Any]], count: int, chronicle: Chronicle, client: ChronicleClient) -> None:
    """Wait for `count` messages, then until the relay has passed them: whatever it was going
    to publish again it has published by then, and a round trip on the client's connection
    brings anything the server routed to it before."""
    await eventually(lambda: len(seen) >= count, f"{count} signals", timeout=10)
    last = max(s["position"] for s in seen)
    await eventually(lambda: relayed_up_to(chronicle) >= last, "the relay to pass the signals", timeout=10)
    await client.nc.flush()


async def test_each_signal_is_published_once_though_two_paths_could(chronicle: Chronicle, client: ChronicleClient) -> None:
    conversation_id = await conversation_with_history(client)
    run_id = "fast-path-once"
    seen, subscription = await signals_of(client, run_id)
    await client.hitl.pause(conversation_id, step="check", prompt="Go on?", run_id=run_id)
    await client.hitl.resume(run_id, approved=True, feedback="go on")
    await settle(seen, 2, chronicle, client)
    await subscription.unsubscribe()
    assert [(s["subject"], s["run_id"]) for s in seen] == [("paused", run_id), ("resumed", run_id)]
    assert seen[0]["position"] < seen[1]["position"]


async def test_the_relay_publishes_what_the_fast_path_did_not(own: tuple[Chronicle, ChronicleClient]) -> None:
    chronicle, client = own
    chronicle.bus.commit_listeners.clear()  # as if every fast publish had failed
    conversation_id = await conversation_with_history(client)
    run_id = "relay-backstop"
    seen, subscription = await signals_of(client, run_id)
    handle = await client.hitl.pause(conversation_id, step="check", prompt="Go on?", run_id=run_id)
    waiting = asyncio.create_task(handle.wait_for_resume(timeout=10))
    await client.hitl.resume(run_id, approved=False, feedback="stop here")
    answer = await waiting
    assert answer.approved is False and answer.history[-1].content == "stop here"
    await settle(seen, 2, chronicle, client)
    await subscription.unsubscribe()
    assert [s["subject"] for s in seen] == ["paused", "resumed"]


async def test_a_killed_projection_process_is_replaced_and_catches_up(own: tuple[Chronicle, ChronicleClient]) -> None:
    chronicle, client = own
    engine = chronicle.engine
    assert isinstance(engine, ProjectionProcess) and await asyncio.to_thread(engine.wait_prepared, 60)
    assert engine.process is not None and engine.process.pid is not None
    first = engine.process.pid
    os.kill(first, signal.SIGKILL)
    started = await client.conversations.start(title="written while the read models had no runner")
    await client.conversations.add_message(started.conversation_id, "user", "still counted")
    found = await client.conversations.get(started.conversation_id)  # waits for the read model
    assert found.message_count == 1
    assert engine.restarts == 1 and engine.process.pid != first


async def test_the_job_snapshot_includes_what_the_client_just_wrote(connect: ClientFactory) -> None:
    client = await connect()
    talk = await client.conversations.start(title="bulbs")
    await client.conversations.add_message(talk.conversation_id, "user", "Crocus bulbs flower before tulips do.")
    requested = await client.jobs.request("crocus bulbs flower", "summary")  # no query in between
    job = await client.jobs.get(requested.job_id)
    assert job.snapshot_chunks == 1
