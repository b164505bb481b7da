"""Per-user budgets at the edge, on one instance and shared by several, on a clock the test
moves: no server, no sleeping."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable

import orjson
import pytest
from chronicle_contract.errors import ChronicleError

from adapters.auth import Caller
from adapters.messaging.fair_share import FairShare, Limits
from adapters.messaging.usage_sync import MAX_REPORT_BYTES, UsageSync


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limited(clock: Clock, **per_minute: int) -> FairShare:
    return FairShare(Limits(per_minute=per_minute, in_flight=2, bulk_factor=10), clock=clock)


def refusal(share: FairShare, user: str, action: str) -> ChronicleError:
    with pytest.raises(ChronicleError) as raised:
        share.admit(user, action)
    return raised.value


def test_a_user_gets_a_minutes_allowance_then_waits_and_others_are_untouched() -> None:
    clock = Clock()
    share = limited(clock, requests=100)
    for _ in range(100):
        share.admit("alice", "conversations.list")
    refused = refusal(share, "alice", "conversations.list")
    assert refused.code == "rate_limited" and refused.details[0]["retry_after"] == pytest.approx(0.6, abs=0.01)
    share.admit("bob", "conversations.list")  # bob's budget is his own
    clock.now += 0.6
    share.admit("alice", "conversations.list")  # one more token has come in
    assert refusal(share, "alice", "conversations.list").code == "rate_limited"


def test_searches_and_exports_have_their_own_smaller_budgets() -> None:
    clock = Clock()
    share = limited(clock, requests=100, search=10, export=5)
    for _ in range(10):
        share.admit("alice", "conversations.search")
    assert refusal(share, "alice", "artifacts.search").details[0]["rule"] == "search"
    for _ in range(5):
        share.admit("alice", "conversations.export")
    assert refusal(share, "alice", "conversations.export").details[0]["rule"] == "export"
    for _ in range(85):  # the refused ones took nothing from the request budget
        share.admit("alice", "sessions.list")
    assert refusal(share, "alice", "sessions.list").details[0]["rule"] == "requests"


def test_a_bulk_token_gets_the_factor() -> None:
    clock = Clock()
    share = limited(clock, requests=5)
    optimizer = Caller("optimizer", frozenset({"bulk"}))
    for _ in range(50):
        share.admit(optimizer, "trial.record")
    assert refusal(share, optimizer, "trial.record").code == "rate_limited"


def test_requests_at_once_are_counted_per_user() -> None:
    share = limited(Clock())
    with share.handling("alice"), share.handling("alice"):
        with pytest.raises(ChronicleError) as raised, share.handling("alice"):
            pass
        assert raised.value.details[0]["rule"] == "in_flight"
        with share.handling("bob"):
            pass
    with share.handling("alice"):  # both finished: room again
        pass


def test_a_users_heavy_queries_at_once_are_capped_before_their_other_requests() -> None:
    share = FairShare(Limits(per_minute={}, in_flight=4, heavy_in_flight=2, bulk_factor=3), clock=Clock())
    with share.handling("alice", "optimizations.pareto"), share.handling("alice", "artifacts.lineage"):
        with pytest.raises(ChronicleError) as raised, share.handling("alice", "artifacts.by_example"):
            pass
        assert raised.value.code == "rate_limited"
        assert raised.value.details[0]["rule"] == "heavy_in_flight" and raised.value.details[0]["retry_after"] > 0
        with share.handling("alice", "conversations.list"), share.handling("bob", "optimizations.pareto"):
            pass  # her other requests, and another user's heavy one, still go
    with share.handling("alice", "optimizations.pareto"):  # both finished: room again
        pass
    # A bulk token's budgets and requests at once are raised, not its heavy queries at once
    # (each is a core's work): it too runs two.
    optimizer = Caller("optimizer", frozenset({"bulk"}))
    with contextlib.ExitStack() as held:
        for _ in range(2):
            held.enter_context(share.handling(optimizer, "optimizations.pareto"))
        with pytest.raises(ChronicleError), share.handling(optimizer, "optimizations.pareto"):
            pass
        for _ in range(6):  # (its other requests at once: 4 × 3)
            held.enter_context(share.handling(optimizer, "conversations.list"))


def test_zero_means_no_limit() -> None:
    share = limited(Clock(), requests=0)
    for _ in range(10_000):
        share.admit("alice", "conversations.list")


# One budget across instances: FairShares exchanging reports through UsageSync on an
# in-memory bus, the clock moved by the test.


class FakeMsg:
    def __init__(self, data: bytes) -> None:
        self.data = data


class FakeBus:
    """Delivers every message published on a subject to every subscriber, at once."""

    def __init__(self) -> None:
        self.subscribers: list[tuple[str, Callable[[FakeMsg], Awaitable[None]]]] = []
        self.messages: list[bytes] = []


class FakeNats:
    def __init__(self, bus: FakeBus) -> None:
        self.bus = bus
        self.is_connected = True

    async def subscribe(self, subject: str, cb: Callable[[FakeMsg], Awaitable[None]]) -> None:
        self.bus.subscribers.append((subject, cb))

    async def flush(self) -> None:
        pass

    async def publish(self, subject: str, data: bytes) -> None:
        self.bus.messages.append(data)
        for wanted, deliver in list(self.bus.subscribers):
            if wanted == subject:
                await deliver(FakeMsg(data))


SUBJECT = "t.internal.usage"
EVERY = 0.2


class Fleet:
    """N instances, each a FairShare and its UsageSync (not started: the test reports)."""

    def __init__(self, clock: Clock, size: int, **per_minute: int) -> None:
        self.bus = FakeBus()
        self.shares = [
            FairShare(Limits(per_minute=per_minute), clock=clock, report_every=EVERY) for _ in range(size)
        ]
        self.syncs = [
            UsageSync(FakeNats(self.bus), SUBJECT, share, every=EVERY, instance=f"i{n}")  # type: ignore[arg-type]
            for n, share in enumerate(self.shares)
        ]

    async def start(self) -> Fleet:
        for sync in self.syncs:
            await sync.nc.subscribe(SUBJECT, cb=sync._received)
        await self.report()  # everyone has heard everyone
        return self

    async def report(self, *which: int) -> None:
        for n in which or range(len(self.syncs)):
            await self.syncs[n].report()


def served(share: FairShare, user: str, action: str = "conversations.list") -> bool:
    try:
        share.admit(user, action)
    except ChronicleError:
        return False
    return True


async def test_two_instances_serve_one_allowance_between_them_and_only_one() -> None:
    clock = Clock()
    fleet = await Fleet(clock, 2, requests=100).start()
    assert [share.peers() for share in fleet.shares] == [1, 1]
    burst = [served(fleet.shares[n % 2], "alice", "sessions.list") for n in range(1000)]  # within one interval
    assert burst.count(True) == 100
    await fleet.report()
    assert not any(served(share, "alice") for share in fleet.shares)
    assert all(served(share, "bob") for share in fleet.shares)  # bob's budget is his own
    for _ in range(int(60 / EVERY)):  # a minute later (reporting all along), a minute's allowance again
        clock.now += EVERY
        await fleet.report()
    again = [served(fleet.shares[n % 2], "alice") for n in range(1000)]
    assert again.count(True) == 100


async def test_a_user_on_one_instance_gets_the_allowance_as_its_reports_go_out() -> None:
    clock = Clock()
    fleet = await Fleet(clock, 2, requests=100).start()
    total = 0
    for _ in range(20):  # one instance takes all of alice's requests; the clock stands still
        total += sum(served(fleet.shares[0], "alice") for _ in range(200))
        await fleet.report()
    assert 95 <= total <= 100
    assert not served(fleet.shares[1], "alice")  # the other instance knows


async def test_a_refusal_says_when_to_retry() -> None:
    clock = Clock()
    fleet = await Fleet(clock, 2, requests=100).start()
    while served(fleet.shares[0], "alice"):
        pass
    refused = refusal(fleet.shares[0], "alice", "sessions.list")  # its half is spent: until its next report
    assert refused.details[0]["retry_after"] == pytest.approx(EVERY, abs=0.01)
    await fleet.report()
    while served(fleet.shares[0], "alice"):
        await fleet.report()
    # The bucket holds under 2 tokens, the least that serves one of two instances a request.
    clock.now += refusal(fleet.shares[0], "alice", "sessions.list").details[0]["retry_after"]
    assert served(fleet.shares[0], "alice")


async def test_whatever_the_instances_and_the_timing_the_overshoot_stays_within_its_bound() -> None:
    """Requests landing at random on three instances whose reports are staggered: what they
    serve stays within the allowance, what comes in, and (N-1)/N of (the allowance plus an
    interval's refill); over a long run the rate is the allowance's."""
    rng = random.Random(18)
    for _ in range(20):
        clock = Clock()
        size, allowance = 3, 100
        fleet = await Fleet(clock, size, requests=allowance).start()
        start, total, next_report = clock.now, 0, [clock.now + EVERY * (n + 1) / size for n in range(size)]
        for _ in range(20_000):
            clock.now += rng.choice((0.0, 0.0, 0.001, 0.01))
            for n in range(size):
                if clock.now >= next_report[n]:
                    await fleet.report(n)
                    next_report[n] += EVERY
            total += served(fleet.shares[rng.randrange(size)], "mallory")
            came_in = allowance + (clock.now - start) * allowance / 60
            assert total <= came_in + (size - 1) / size * (allowance + EVERY * allowance / 60)
        assert total >= allowance


async def test_an_instance_that_hears_nobody_counts_alone() -> None:
    """NATS gone: after peer_ttl without a report, an instance's buckets are its own again
    (per-instance limits, never closed for everyone)."""
    clock = Clock()
    fleet = await Fleet(clock, 2, requests=100).start()
    for sync in fleet.syncs:
        sync.nc.is_connected = False  # type: ignore[misc]
    clock.now += fleet.shares[0].peer_ttl + 0.1
    assert [share.peers() for share in fleet.shares] == [0, 0]
    assert sum(served(fleet.shares[0], "alice") for _ in range(200)) == 100
    await fleet.report()  # dropped, not queued
    assert sum(served(fleet.shares[1], "alice") for _ in range(200)) == 100


async def test_an_instance_that_stops_is_no_longer_counted() -> None:
    fleet = await Fleet(Clock(), 2, requests=100).start()
    served(fleet.shares[0], "alice")
    await fleet.syncs[0].stop()
    assert fleet.shares[1].peers() == 0
    assert sum(served(fleet.shares[1], "alice") for _ in range(200)) == 99  # its last report counted


async def test_reports_it_cannot_read_are_dropped_and_unknown_fields_ignored() -> None:
    fleet = await Fleet(Clock(), 2, requests=100).start()
    other = FakeNats(fleet.bus)
    for forged in (b"nope", b"[]", b'{"instance": "x", "usage": [["alice", "requests", 100, "99"]]}',
                   b'{"instance": "x", "usage": [["alice", "requests", 100, true]]}',
                   b'{"instance": "x", "usage": [["alice", "requests", 100, -5]]}'):
        await other.publish(SUBJECT, forged)
    assert fleet.syncs[0].dropped == 5 and fleet.shares[0].peers() == 1
    newer = {"instance": "i9", "version": 2, "usage": [["alice", "requests", 100, 40]], "usage2": [{"u": "alice"}]}
    await other.publish(SUBJECT, orjson.dumps(newer))
    assert fleet.shares[0].peers() == 2
    assert sum(served(fleet.shares[0], "alice") for _ in range(200)) <= 60 / 3  # 60 left, shared by three


async def test_a_report_of_its_own_is_skipped() -> None:
    fleet = await Fleet(Clock(), 1, requests=100).start()
    for _ in range(50):
        served(fleet.shares[0], "alice")
    await fleet.report()
    assert fleet.shares[0].peers() == 0
    assert sum(served(fleet.shares[0], "alice") for _ in range(100)) == 50


async def test_a_large_report_is_split_and_arrives_whole() -> None:
    clock = Clock()
    fleet = await Fleet(clock, 2, requests=100, search=10).start()
    users = [f"user-{n}-" + "x" * 200 for n in range(1000)]
    for user in users:
        assert served(fleet.shares[0], user, "conversations.search")
    before = len(fleet.bus.messages)
    await fleet.report(0)
    sent = fleet.bus.messages[before:]
    assert len(sent) > 1 and all(len(message) <= MAX_REPORT_BYTES + 200 for message in sent)
    for user in users:  # both budgets of every user came off the other instance's buckets
        assert fleet.shares[1]._buckets[(user, "search")][0] == pytest.approx(9, abs=0.01)
        assert fleet.shares[1]._buckets[(user, "requests")][0] == pytest.approx(99, abs=0.01)


async def test_a_request_refused_on_its_second_budget_reports_nothing_spent() -> None:
    fleet = await Fleet(Clock(), 2, requests=100, search=2).start()
    assert served(fleet.shares[0], "alice", "conversations.search")
    assert not served(fleet.shares[0], "alice", "conversations.search")  # (2 tokens, one peer: one search here)
    assert sorted(fleet.shares[0].take_report()) == [("alice", "requests", 100, 1), ("alice", "search", 2, 1)]


async def test_a_reported_debt_is_bounded_to_a_minutes_allowance() -> None:
    clock = Clock()
    share = FairShare(Limits(per_minute={"requests": 100}), clock=clock, report_every=EVERY)
    share.spent_elsewhere("other", [("alice", "requests", 100, 10**9)])
    share.left("other")
    assert refusal(share, "alice", "sessions.list").details[0]["retry_after"] == pytest.approx(60.6, abs=0.01)  # 101 tokens to come in
