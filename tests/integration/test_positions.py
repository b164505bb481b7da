"""Read-your-writes waits: ProjectionPositions against a real Postgres, listening only while needed."""

from __future__ import annotations

import asyncio

import pytest
from chronicle_contract.errors import ChronicleError

from adapters.read_side.positions import ProjectionPositions
from adapters.read_side.tracking import PROGRESS_CHANNEL
from adapters.store.postgres import PostgresTarget
from tests.waiting import eventually

NAME = "history"


def move(target: PostgresTarget, position: int) -> None:
    """What a projection batch's commit does: its tracking row moves and it says so."""
    with target.connect(autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronicle.projections (name, position, version) VALUES (%s, %s, 1)"
            " ON CONFLICT (name) DO UPDATE SET position = excluded.position",
            (NAME, position),
        )
        conn.execute("SELECT pg_notify(%s, %s)", (PROGRESS_CHANNEL, f"{NAME}:{position}"))


async def test_a_wait_is_answered_by_the_notification_and_later_ones_after_an_idle_spell(
    target: PostgresTarget,
) -> None:
    positions = ProjectionPositions(target, [NAME], poll_interval=0.05, linger=0.2)
    await positions.start()
    try:
        waiting = asyncio.create_task(positions.wait_for([NAME], 5, timeout=5))
        await eventually(lambda: positions.listening, "the listener to start for the waiter")
        assert not waiting.done()
        await asyncio.to_thread(move, target, 5)
        await asyncio.wait_for(waiting, 5)

        await eventually(lambda: not positions.listening, "the listener to stop after the linger")
        await asyncio.to_thread(move, target, 9)  # nobody hears it: nobody listens
        assert positions.positions[NAME] == 5
        await positions.wait_for([NAME], 9, timeout=5)  # but a new wait reads where things are
        await positions.wait_for([NAME], 9, timeout=0.01)  # and then it is known at once
    finally:
        await positions.stop()


async def test_a_position_never_reached_times_out_as_unavailable(target: PostgresTarget) -> None:
    positions = ProjectionPositions(target, [NAME], poll_interval=0.05)
    await positions.start()
    try:
        await asyncio.to_thread(move, target, 3)
        with pytest.raises(ChronicleError) as raised:
            await positions.wait_for([NAME], 4, timeout=0.3)
        assert raised.value.code == "unavailable" and raised.value.fields == ["min_position"]
        assert positions.positions[NAME] == 3
    finally:
        await positions.stop()


async def test_the_listener_comes_back_after_its_connection_is_killed(target: PostgresTarget) -> None:
    positions = ProjectionPositions(target, [NAME], poll_interval=0.05, linger=5)
    await positions.start()
    try:
        await asyncio.to_thread(move, target, 1)
        await positions.wait_for([NAME], 1, timeout=5)
        with target.connect(autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        listens = positions.listens
        waiting = asyncio.create_task(positions.wait_for([NAME], 2, timeout=10))
        await eventually(lambda: positions.listens > listens, "the listener to listen again on a new connection")
        await asyncio.to_thread(move, target, 2)
        await asyncio.wait_for(waiting, 10)
    finally:
        await positions.stop()


def log_head(target: PostgresTarget) -> int:
    with target.connect(autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(max(notification_id), 0) FROM chronicle.events").fetchone()
        return int(row[0]) if row else 0


async def test_a_position_beyond_the_logs_head_is_refused_as_a_conflict(target: PostgresTarget) -> None:
    """No reply ever gave a position past the last committed event: waiting for one could
    only time out, so when it does it is refused by name, a conflict with the store's state,
    not `unavailable` (which says: retry later)."""
    positions = ProjectionPositions(target, [NAME], poll_interval=0.05, log=target)
    await positions.start()
    try:
        beyond = await asyncio.to_thread(log_head, target) + 1_000_000
        with pytest.raises(ChronicleError) as raised:
            await positions.wait_for([NAME], beyond, timeout=0.3)
        assert raised.value.code == "conflict" and raised.value.fields == ["min_position"]
        assert raised.value.details[0]["rule"] == "committed"
        assert "beyond the store's last committed position" in raised.value.message
    finally:
        await positions.stop()
