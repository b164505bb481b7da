"""The composition root builds without connecting; start() is where connections open."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
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


class Watched:
    """What this process asks of the operating system while `watching`: sockets made or
    connected, files opened, processes and threads started (Python's audit events, PEP 578;
    a hook cannot be removed, so it records only while switched on)."""

    EVENTS = ("socket.", "open", "subprocess.", "os.exec", "os.posix_spawn", "os.fork", "_thread.start_new_thread")

    def __init__(self) -> None:
        self.on = False
        self.seen: list[tuple[str, str]] = []
        sys.addaudithook(self._heard)

    def _heard(self, event: str, args: tuple[object, ...]) -> None:
        if self.on and event.startswith(self.EVENTS):
            self.seen.append((event, str(args[0]) if args else ""))

    @contextlib.contextmanager
    def watching(self) -> Iterator[list[tuple[str, str]]]:
        self.seen, self.on = [], True
        try:
            yield self.seen
        finally:
            self.on = False


WATCHED = Watched()


def test_build_makes_the_whole_graph_and_opens_no_socket_file_process_or_thread(tmp_path: Path) -> None:
    from adapters.store.memory import InMemoryEventStore
    from entrypoints.routes import ROUTES, subject

    threads = threading.active_count()
    with WATCHED.watching() as seen:
        chronicle = build(unreachable_settings(tmp_path), Overrides(store=InMemoryEventStore()))
    # (/proc/stat: the metrics' process collector reads the boot time, a file of the kernel's.)
    assert [(event, arg) for event, arg in seen if arg != "/proc/stat"] == []
    assert threading.active_count() == threads
    assert list(tmp_path.iterdir()) == []  # no embedded server, no lock: URLs were given
    # Built whole: every subject the tables declare has its endpoint, with what serves it.
    prefix = chronicle.settings.subject_prefix
    assert chronicle.subjects == [subject(prefix, entry.request) for table in ROUTES for entry in table]
    assert chronicle.engine is not None and chronicle.retention is None  # (as settings choose)
    token = chronicle.authority.issue("alice")
    assert chronicle.authority.user_of({"Authorization": f"Bearer {token}"}) == "alice"


def test_the_database_is_asked_for_only_once_its_servers_have_started(tmp_path: Path) -> None:
    settings = unreachable_settings(tmp_path).model_copy(update={"database_url": None})
    chronicle = build(settings)  # an embedded database: its URL is known once it runs
    with pytest.raises(RuntimeError, match="before Chronicle.start"):
        _ = chronicle.target.url
    assert list(tmp_path.iterdir()) == []


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


@pytest.mark.parametrize("limits, counted", [
    ({}, True),  # the defaults
    ({"limit_requests_per_minute": 0, "limit_search_per_minute": 0, "limit_export_per_minute": 0,
      "limit_heavy_per_minute": 0, "limit_in_flight_per_user": 0, "limit_heavy_in_flight_per_user": 0}, False),
    ({"limit_requests_per_minute": 0, "limit_search_per_minute": 0, "limit_export_per_minute": 0,
      "limit_heavy_per_minute": 0, "limit_in_flight_per_user": 0, "limit_heavy_in_flight_per_user": 1}, True),
])
def test_requests_are_counted_per_user_unless_every_limit_is_off(
    tmp_path: Path, limits: dict[str, int], counted: bool
) -> None:
    settings = unreachable_settings(tmp_path).model_copy(update=limits)

    chronicle = build(settings)

    assert (chronicle.service.fair_share is not None) is counted
