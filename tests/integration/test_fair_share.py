"""Per-user limits over NATS (seed 001's defaults): one user's flood leaves everyone else served."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from adapters.auth import TokenAuthority
from services.client.connection import ChronicleClient, ChronicleError
from services.entrypoints.bootstrap import Chronicle, bootstrap
from services.entrypoints.settings import Settings
from tests.conftest import new_prefix


@pytest.fixture
async def limited(chronicle: Chronicle) -> AsyncIterator[Chronicle]:
    """An instance with the default limits, on the session's database and read models."""
    defaults = Settings.model_fields
    settings = chronicle.settings.model_copy(update={
        "subject_prefix": new_prefix(), "run_projections": False, "query_wait_timeout": 1.0,
        **{name: defaults[name].default for name in defaults if name.startswith("limit_")},
    })
    instance = await bootstrap(settings)
    yield instance
    await instance.stop()


async def client_of(chronicle: Chronicle, authority: TokenAuthority, user: str) -> ChronicleClient:
    return await ChronicleClient.connect(chronicle.nats_url, authority.issue(user), prefix=chronicle.settings.subject_prefix)


async def outcome(call: asyncio.Future | asyncio.Task | object) -> str:
    try:
        await call  # type: ignore[misc]
    except ChronicleError as error:
        return error.code
    return "ok"


async def test_a_flooding_user_is_limited_and_nobody_else_is(limited: Chronicle, authority: TokenAuthority) -> None:
    mallory = await client_of(limited, authority, f"mallory-{uuid.uuid4().hex[:6]}")
    others = [await client_of(limited, authority, f"user-{n}-{uuid.uuid4().hex[:6]}") for n in range(20)]
    try:
        flood = [asyncio.ensure_future(mallory.sessions.list()) for _ in range(1000)]
        served = [asyncio.ensure_future(user.sessions.list()) for user in others for _ in range(5)]
        outcomes = await asyncio.gather(*(outcome(f) for f in flood))
        assert outcomes.count("ok") <= 100 and outcomes.count("rate_limited") >= 900
        assert set(await asyncio.gather(*(outcome(f) for f in served))) == {"ok"}
        with pytest.raises(ChronicleError) as refused:
            await mallory.sessions.list()
        assert refused.value.code == "rate_limited" and 0 < refused.value.details[0]["retry_after"] <= 1
    finally:
        for client in (mallory, *others):
            await client.close()


async def test_search_has_its_own_budget(limited: Chronicle, authority: TokenAuthority) -> None:
    alice = await client_of(limited, authority, f"alice-{uuid.uuid4().hex[:6]}")
    try:
        for _ in range(10):
            await alice.conversations.search("tulips")
        with pytest.raises(ChronicleError) as refused:
            await alice.conversations.search("tulips")
        assert (refused.value.code, refused.value.details[0]["rule"]) == ("rate_limited", "search")
        await alice.conversations.list()  # the other requests still go through
    finally:
        await alice.close()


async def test_parked_waits_count_against_their_users_requests_in_flight(
    limited: Chronicle, authority: TokenAuthority
) -> None:
    """Queries waiting for a log position nobody reaches used to fill the instance's whole
    in-flight cap; now they fill their own user's share only."""
    mallory = await client_of(limited, authority, f"mallory-{uuid.uuid4().hex[:6]}")
    alice = await client_of(limited, authority, f"alice-{uuid.uuid4().hex[:6]}")
    try:
        parked = [asyncio.ensure_future(mallory.request("query.sessions.list", {"min_position": 10**15}))
                  for _ in range(100)]
        served = await asyncio.gather(*(outcome(alice.sessions.list()) for _ in range(20)))
        outcomes = await asyncio.gather(*(outcome(p) for p in parked))
        assert set(served) == {"ok"}
        limit = limited.settings.limit_in_flight_per_user
        assert outcomes.count("rate_limited") >= 100 - limit and outcomes.count("ok") == 0
    finally:
        await mallory.close()
        await alice.close()
