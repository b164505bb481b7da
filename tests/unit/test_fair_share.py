"""Per-user budgets at the edge, on a clock the test moves: no server, no sleeping."""

from __future__ import annotations

import pytest

from adapters.auth import Caller
from adapters.messaging.fair_share import FairShare, Limits
from services.contract.errors import ChronicleError


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


def test_zero_means_no_limit() -> None:
    share = limited(Clock(), requests=0)
    for _ in range(10_000):
        share.admit("alice", "conversations.list")
