"""Per-user limits over NATS (seed 001's defaults): one user's flood leaves everyone else served,
and two instances count one budget between them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import nats
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_contract.optimizations import ParetoFront, ParetoQuery

from adapters.auth import TokenAuthority
from adapters.messaging.fair_share import FairShare, Limits
from adapters.messaging.nats_service import NatsService, Route
from entrypoints.bootstrap import Chronicle, bootstrap
from entrypoints.settings import Settings
from tests.conftest import new_prefix
from tests.waiting import eventually


def with_default_limits(chronicle: Chronicle) -> Settings:
    """The session's database and read models, subjects of its own, the default limits."""
    defaults = Settings.model_fields
    return chronicle.settings.model_copy(update={
        "subject_prefix": new_prefix(), "run_projections": False, "query_wait_timeout": 1.0,
        **{name: defaults[name].default for name in defaults if name.startswith("limit_")},
    })


@pytest.fixture
async def limited(chronicle: Chronicle) -> AsyncIterator[Chronicle]:
    """An instance with the default limits."""
    instance = await bootstrap(with_default_limits(chronicle))
    yield instance
    await instance.stop()


@pytest.fixture
async def two_limited(chronicle: Chronicle) -> AsyncIterator[list[Chronicle]]:
    """Two instances with the default rate limits in one queue group, each having heard the
    other; no per-user in-flight limit (counted per instance), so that the shared rate alone
    decides how much of a flood is served."""
    settings = with_default_limits(chronicle).model_copy(update={"limit_in_flight_per_user": 0})
    pair = [await bootstrap(settings)]
    try:
        pair.append(await bootstrap(settings))
        await eventually(lambda: all(i.service.fair_share is not None and i.service.fair_share.peers() == 1 for i in pair),
                         "each instance to hear the other's usage reports")
        yield pair
    finally:
        for instance in pair:
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
        # What the flood's requests at once did not spend (refused as too many at once), one by one.
        with pytest.raises(ChronicleError) as refused:
            for _ in range(200):
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
        # Those refused for being too many at once spent nothing of her minute's requests.
        allowance = limited.settings.limit_requests_per_minute
        later = await asyncio.gather(*(outcome(mallory.sessions.list()) for _ in range(allowance - limit)))
        assert set(later) == {"ok"}
    finally:
        await mallory.close()
        await alice.close()


async def test_two_instances_serve_a_user_one_allowance_between_them(
    two_limited: list[Chronicle], authority: TokenAuthority
) -> None:
    """Counted per instance, a flood spread over two instances got twice the allowance;
    shared, it gets the allowance and at most the overshoot fair_share.py documents."""
    first, second = two_limited
    shares = [instance.service.fair_share for instance in two_limited]
    assert shares[0] is not None and shares[1] is not None
    mallory = await client_of(first, authority, f"mallory-{uuid.uuid4().hex[:6]}")
    bob = await client_of(second, authority, f"bob-{uuid.uuid4().hex[:6]}")
    try:
        started = time.monotonic()
        flood = [asyncio.ensure_future(mallory.sessions.list()) for _ in range(1000)]
        served = [asyncio.ensure_future(bob.sessions.list()) for _ in range(20)]
        results = await asyncio.gather(*flood, return_exceptions=True)
        allowance, interval = first.settings.limit_requests_per_minute, first.settings.limit_sync_interval
        came_in = allowance * (1 + (time.monotonic() - started) / 60)
        overshoot = (2 - 1) / 2 * (allowance + interval * allowance / 60)
        ok = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, ChronicleError) and r.code == "rate_limited"]
        assert shares[0].refused > 0 and shares[1].refused > 0  # both instances took part
        assert 0.9 * allowance <= len(ok) <= came_in + overshoot < 2 * allowance
        assert len(refused) == len(flood) - len(ok)
        assert all(0 < r.details[0]["retry_after"] <= 61 for r in refused)
        assert set(await asyncio.gather(*(outcome(f) for f in served))) == {"ok"}
    finally:
        await mallory.close()
        await bob.close()


def handled(instance: Chronicle, subject: str) -> float:
    """Requests on `subject` handed to their handler (timed), as the service's metrics count them."""
    value = instance.metrics.registry.get_sample_value("chronicle_request_seconds_count", {"subject": subject})
    return value or 0.0


def answered(instance: Chronicle, subject: str, code: str) -> float:
    value = instance.metrics.registry.get_sample_value("chronicle_requests_total", {"subject": subject, "code": code})
    return value or 0.0


def forged(token: str) -> str:
    head, body, _ = token.split(".")
    return f"{head}.{body}.{'A' * 43}"


async def test_refused_requests_never_reach_a_handler(limited: Chronicle, authority: TokenAuthority) -> None:
    """Over budget, a forged token, a payload the contract refuses (a Pareto front whose
    directions name objectives it does not ask for was refused by its handler, after it read
    the optimization): each is answered before any handler runs, and only a handler takes
    a database connection."""
    mallory = await client_of(limited, authority, f"mallory-{uuid.uuid4().hex[:6]}")
    prefix = limited.settings.subject_prefix
    pareto, sessions = f"{prefix}.query.optimizations.pareto", f"{prefix}.query.sessions.list"
    bad_front = {"optimization_id": str(uuid.uuid4()), "directions": {"speed": "maximize"}}
    try:
        before = {subject: handled(limited, subject) for subject in (pareto, sessions)}
        invalid = await asyncio.gather(*(outcome(mallory.request("query.optimizations.pareto", bad_front))
                                         for _ in range(20)))  # (within her 30 heavy requests a minute)
        assert set(invalid) == {"invalid"}
        assert handled(limited, pareto) == before[pareto]
        assert answered(limited, pareto, "invalid") == 20

        good = mallory.token
        mallory.token = forged(good)
        unauthorized = await asyncio.gather(*(outcome(mallory.sessions.list()) for _ in range(50)))
        mallory.token = good
        assert set(unauthorized) == {"unauthorized"}
        assert handled(limited, sessions) == before[sessions]

        allowance = limited.settings.limit_requests_per_minute
        flood = await asyncio.gather(*(outcome(mallory.sessions.list()) for _ in range(allowance + 200)))
        assert flood.count("rate_limited") >= 200 - 10  # (her bucket refills while the flood is answered)
        assert handled(limited, sessions) - before[sessions] == flood.count("ok")  # only those served were handled
    finally:
        await mallory.close()


async def test_a_flood_of_refused_requests_leaves_another_user_served(limited: Chronicle, authority: TokenAuthority) -> None:
    """One user's thousands of refused requests (over budget, a forged token, invalid) while
    another user reads one request after another: every one of hers answers ok, none
    `unavailable` (one such flood once made another user's read wait out the pool)."""
    mallory = await client_of(limited, authority, f"mallory-{uuid.uuid4().hex[:6]}")
    forger = await client_of(limited, authority, f"forger-{uuid.uuid4().hex[:6]}")
    forger.token = forged(forger.token)
    alice = await client_of(limited, authority, f"alice-{uuid.uuid4().hex[:6]}")
    flooded = asyncio.Event()

    async def flood() -> list[str]:
        window = asyncio.Semaphore(200)

        async def one(n: int) -> str:
            async with window:
                if n % 3 == 0:
                    return await outcome(mallory.sessions.list())
                if n % 3 == 1:
                    return await outcome(forger.sessions.list())
                return await outcome(mallory.request("query.sessions.list", {"limit": 0}))

        try:
            return await asyncio.gather(*(one(n) for n in range(6_000)))
        finally:
            flooded.set()

    async def reads() -> list[str]:
        codes: list[str] = []
        while not flooded.is_set() or not codes:
            codes.append(await outcome(alice.sessions.list()))
        return codes

    try:
        refused, hers = await asyncio.gather(flood(), reads())
        assert refused.count("ok") <= limited.settings.limit_requests_per_minute
        assert set(refused) <= {"ok", "rate_limited", "unauthorized", "invalid"}
        assert set(hers) == {"ok"}, hers
    finally:
        for client in (mallory, forger, alice):
            await client.close()


class HeldQueries:
    """A heavy query's handler that holds every request until `done` is set, counting those
    it holds by user: a query 'runs' for exactly as long as the test says."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.done = asyncio.Event()

    async def __call__(self, user: str, request: object, key: str | None) -> dict[str, object]:
        self.running[str(user)] = self.running.get(str(user), 0) + 1
        await self.done.wait()
        return {"points": []}


async def test_a_users_third_heavy_query_at_once_is_refused_and_another_users_runs(
    chronicle: Chronicle, authority: TokenAuthority
) -> None:
    """Eight Pareto fronts at once from one user took the cores from everyone else; now a
    user's heavy queries past CHRONICLE_LIMIT_HEAVY_IN_FLIGHT_PER_USER (2) are refused in the
    subscription's callback, before a handler runs, while other users' still run."""
    prefix = new_prefix()
    held = HeldQueries()
    limits = Limits(per_minute={}, in_flight=64, heavy_in_flight=Settings().limit_heavy_in_flight_per_user)
    nc = await nats.connect(chronicle.nats_url)
    route = Route(f"{prefix}.query.optimizations.pareto", ParetoQuery, ParetoFront, held)
    service = NatsService(nc, [route], authority, fair_share=FairShare(limits))
    await service.start()
    alice_id, bob_id = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    alice, bob = [await ChronicleClient.connect(chronicle.nats_url, authority.issue(user), prefix=prefix)
                  for user in (alice_id, bob_id)]
    front = {"optimization_id": str(uuid.uuid4())}
    try:
        two = [asyncio.ensure_future(alice.request("query.optimizations.pareto", front)) for _ in range(2)]
        await eventually(lambda: held.running.get(alice_id) == 2, "alice's two heavy queries to run")
        with pytest.raises(ChronicleError) as refused:
            await alice.request("query.optimizations.pareto", front)
        assert refused.value.code == "rate_limited" and refused.value.details[0]["rule"] == "heavy_in_flight"
        assert refused.value.details[0]["retry_after"] > 0
        assert held.running[alice_id] == 2  # refused before its handler ran
        bobs = asyncio.ensure_future(bob.request("query.optimizations.pareto", front))
        await eventually(lambda: held.running.get(bob_id) == 1, "bob's heavy query to run beside hers")
        held.done.set()
        assert [await query for query in (*two, bobs)] == [{"points": []}] * 3
        assert await alice.request("query.optimizations.pareto", front) == {"points": []}  # room again
    finally:
        held.done.set()
        for client in (alice, bob):
            await client.close()
        await service.stop()
        await nc.close()
