"""The composition root builds without connecting; start() is where connections open."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Overrides, build
from entrypoints.settings import Settings

SECRET = "a-test-secret-that-is-long-enough-for-hs256-signing"


def unreachable_settings(data_dir: Path) -> Settings:
    # Port 9 (discard) on loopback: nothing answers; building must not try.
    return Settings(
        database_url="postgresql://nobody@127.0.0.1:9/none", nats_url="nats://127.0.0.1:9", data_dir=data_dir,
        jwt_secret=SECRET,
    )


def test_build_resolves_the_settings_choices_and_connects_to_nothing(tmp_path: Path) -> None:
    chronicle = build(unreachable_settings(tmp_path))
    token = chronicle.authority.issue("alice")
    assert chronicle.authority.user_of({"Authorization": f"Bearer {token}"}) == "alice"
    with pytest.raises(AttributeError):
        _ = chronicle.store  # the event store exists once start() has opened it
    assert list(tmp_path.iterdir()) == []  # no embedded server, no lock: URLs were given


def test_overrides_take_the_place_of_what_settings_would_build(tmp_path: Path) -> None:
    authority = TokenAuthority(secret=SECRET + "-other")
    chronicle = build(unreachable_settings(tmp_path), Overrides(authority=authority))
    assert chronicle.authority is authority


async def test_an_in_memory_store_runs_the_bus_with_no_server(tmp_path: Path) -> None:
    from chronicle_contract.conversations import AddMessage, StartConversation

    from adapters.store.memory import InMemoryEventStore
    from entrypoints.bootstrap import Stage

    store = InMemoryEventStore()
    chronicle = await build(unreachable_settings(tmp_path), Overrides(store=store)).start(through=Stage.BUS)
    try:
        started = await chronicle.bus.execute(StartConversation(title="offline"), "alice")
        await chronicle.bus.execute(AddMessage(conversation_id=started["conversation_id"], role="user", content="hi"), "alice")
    finally:
        await chronicle.stop()
    assert len(store.recorder.events) == 2


async def test_an_in_memory_store_cannot_serve_the_read_side(tmp_path: Path) -> None:
    from adapters.store.memory import InMemoryEventStore

    chronicle = build(unreachable_settings(tmp_path), Overrides(store=InMemoryEventStore()))
    with pytest.raises(ValueError, match="through=Stage.BUS"):
        await chronicle.start()
