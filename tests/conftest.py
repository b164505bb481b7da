"""Shared fixtures: real servers, a fresh database per session, a running Chronicle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import nats
import pytest
from chronicle_client.connection import ChronicleClient

from adapters.auth import TokenAuthority
from adapters.store.event_store import EventStore
from adapters.store.postgres import PostgresTarget, migrate
from bench.scratch import remove_streams
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.settings import Settings
from tests.servers import DataDirWatch, ServerChoice, TestServers, test_servers

JWT_SECRET = "chronicle-test-secret-that-is-long-enough-for-hs256"
PREFIXES_USED: list[str] = []  # subject prefixes of this session's instances: their streams go at its end


def new_prefix(kind: str = "t") -> str:
    """A fresh subject prefix, so instances never share streams; removed at the session's end."""
    prefix = f"{kind}{uuid.uuid4().hex[:10]}"
    PREFIXES_USED.append(prefix)
    return prefix


WATCH = pytest.StashKey[DataDirWatch]()
TEMPROOT = "PYTEST_DEBUG_TEMPROOT"  # where pytest makes its pytest-of-USER directory of temporary paths
OWN_TEMPROOT = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Temporary paths under a directory of this run's own. Embedded servers keep their data
    there, and as root pgserver runs Postgres as another user, which must be let through
    pytest-of-root; every pytest run that starts on the machine makes that directory private
    again (pytest does so for its shared one), which pulled the data dir from under a running
    Postgres (PANIC: could not open pg_control: Permission denied)."""
    if TEMPROOT not in os.environ:
        config.stash[OWN_TEMPROOT] = os.environ[TEMPROOT] = tempfile.mkdtemp(prefix="chronicle-tests-")


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(OWN_TEMPROOT, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
        del os.environ[TEMPROOT]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say which servers this run uses (with -q too), and begin watching the repository's
    own data dir, which no test may write to."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(ServerChoice.of(os.environ).describe())
    session.config.stash[WATCH] = DataDirWatch.begin()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when a test wrote under the repository's own data dir."""
    watch = session.config.stash.get(WATCH, None)
    changed = watch.changed() if watch is not None else []
    if watch is None or not changed:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")  # (after the progress line)
        reporter.write_line(f"FAILED: tests wrote under {watch.data_dir} (the developer's own): {', '.join(changed[:10])}",
                            red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestServers]:
    with test_servers(tmp_path_factory.mktemp("servers")) as found:
        yield found
        # JetStream keeps streams for days: the session's own go when it ends, so test
        # runs do not pile them up on the machine's NATS.
        asyncio.run(remove_streams_of_this_session(found.nats_url))


async def remove_streams_of_this_session(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        for prefix in PREFIXES_USED:
            await remove_streams(nc.jetstream(), prefix)
    finally:
        await nc.close()


@pytest.fixture(scope="session")
def database_url(servers: TestServers) -> Iterator[str]:
    with servers.fresh_database() as url:
        yield url


def make_settings(database_url: str, nats_url: str, data_dir: Path, **overrides: object) -> Settings:
    return Settings(
        database_url=database_url,
        nats_url=nats_url,
        data_dir=data_dir,
        subject_prefix=new_prefix(),
        jwt_secret=JWT_SECRET,
        check_replies=True,  # a reply that breaks its contract model fails the test that sent it
        # Tests make requests far faster than a person; tests/integration/test_fair_share.py
        # turns the per-user limits back on.
        limit_requests_per_minute=0, limit_search_per_minute=0, limit_export_per_minute=0,
        limit_heavy_per_minute=0, limit_in_flight_per_user=0, limit_heavy_in_flight_per_user=0,
        # Tests send refused requests by the hundred on purpose; tests/integration/
        # test_flood_brake.py turns the brake back on.
        **{"flood_refusals": 0, **overrides},  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def settings(database_url: str, servers: TestServers, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_settings(database_url, servers.nats_url, tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
async def chronicle(settings: Settings) -> AsyncIterator[Chronicle]:
    instance = await bootstrap(settings)
    # A fresh database's read models are built at first start: tests begin once they exist.
    assert instance.engine is not None and await asyncio.to_thread(instance.engine.wait_prepared, 120)
    yield instance
    await instance.stop()


@pytest.fixture(scope="session")
def authority() -> TokenAuthority:
    return TokenAuthority(secret=JWT_SECRET)


ClientFactory = Callable[..., Awaitable[ChronicleClient]]


@pytest.fixture(scope="session")
async def connect(chronicle: Chronicle, authority: TokenAuthority) -> AsyncIterator[ClientFactory]:
    """`await connect(user_id=None, roles=())`: a client for that user (a fresh random user
    by default), with those roles in its token."""
    clients: list[ChronicleClient] = []

    async def make(user_id: str | None = None, roles: tuple[str, ...] = ()) -> ChronicleClient:
        claims = {"roles": list(roles)} if roles else None
        client = await ChronicleClient.connect(
            chronicle.nats_url,
            authority.issue(user_id or f"user-{uuid.uuid4().hex[:12]}", claims=claims),
            prefix=chronicle.settings.subject_prefix,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def client(connect: ClientFactory) -> ChronicleClient:
    return await connect()


@pytest.fixture
async def second_instance(chronicle: Chronicle) -> AsyncIterator[Chronicle]:
    """Another instance on the same database and subjects: NATS spreads requests over both."""
    instance = await bootstrap(chronicle.settings.model_copy(update={"run_projections": False}))
    yield instance
    await instance.stop()


@contextlib.asynccontextmanager
async def fresh_chronicle(
    servers: TestServers, data_dir: Path, nats_url: str | None, **overrides: object,
) -> AsyncIterator[tuple[Chronicle, str]]:
    """A Chronicle started on a fresh database of its own (and that database's URL), with
    `make_settings` and `overrides`; stopped afterwards. `nats_url` None: an embedded NATS
    of its own (with `embedded_nats_auth=True`, one that requires credentials)."""
    with servers.fresh_database() as url:
        chronicle = await bootstrap(make_settings(url, nats_url, data_dir, **overrides))  # type: ignore[arg-type]
        try:
            yield chronicle, url
        finally:
            await chronicle.stop()


@pytest.fixture
async def instance(servers: TestServers, tmp_path: Path) -> AsyncIterator[tuple[Chronicle, str]]:
    """A Chronicle of this test's own, on a fresh database, and that database's URL."""
    async with fresh_chronicle(servers, tmp_path, servers.nats_url) as started:
        yield started


@pytest.fixture
def target(servers: TestServers) -> Iterator[PostgresTarget]:
    """A fresh, migrated database of this test's own, free to tamper with."""
    with servers.fresh_database() as url:
        found = PostgresTarget(url)
        migrate(found)
        yield found


@pytest.fixture
def store(target: PostgresTarget) -> Iterator[EventStore]:
    opened = EventStore(target, pool_size=1)
    yield opened
    opened.close()
