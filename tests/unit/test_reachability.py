"""Reachability: fail at once while Postgres is away, go through the moment it is back."""

from __future__ import annotations

import psycopg
import pytest
from eventsourcing.persistence import OperationalError

from adapters.store.reachability import PROBE_TIMEOUT, Reachability, Unreachable


class FakeServer:
    """Connections as Postgres would answer them: `refusing`, `silent` (each attempt waits out
    the probe's timeout on a fake clock), or up."""

    def __init__(self) -> None:
        self.now = 0.0
        self.state = "up"
        self.attempts = 0

    def connect(self) -> FakeServer:
        self.attempts += 1
        if self.state == "silent":
            self.now += PROBE_TIMEOUT
        if self.state != "up":
            raise psycopg.OperationalError("connection failed")
        return self

    def close(self) -> None:
        pass


def reachability(server: FakeServer) -> Reachability:
    return Reachability(
        "postgresql://nowhere", 2.0, is_statement_failure=lambda error: "statement" in str(error),
        connect=server.connect, clock=lambda: server.now,
    )


def test_a_refused_connection_is_asked_again_by_every_caller_so_the_return_is_seen_at_once() -> None:
    server = FakeServer()
    seen = reachability(server)
    server.state = "refusing"
    assert [seen.answers() for _ in range(3)] == [False] * 3 and server.attempts == 3
    server.state = "up"
    assert seen.answers() and server.attempts == 4


def test_a_silent_server_costs_one_probe_its_timeout_and_the_callers_behind_it_take_that_answer() -> None:
    server = FakeServer()
    seen = reachability(server)
    server.state = "silent"
    assert not seen.answers() and server.attempts == 1
    assert not seen.answers() and server.attempts == 1  # answered without waiting again
    server.now += PROBE_TIMEOUT
    server.state = "up"
    assert seen.answers() and server.attempts == 2


def test_once_down_a_call_is_not_made_until_a_probe_connects() -> None:
    server = FakeServer()
    seen = reachability(server)
    calls: list[str] = []

    def lost() -> str:
        calls.append("lost")
        raise OperationalError("server closed the connection")

    server.state = "refusing"
    with pytest.raises(OperationalError):
        seen.run(lost)  # tried once: the probe says Postgres is away, no retry
    assert seen.down and calls == ["lost"]
    with pytest.raises(Unreachable):
        seen.run(lambda: calls.append("not made"))
    assert calls == ["lost"]
    server.state = "up"
    assert seen.run(lambda: "made") == "made" and not seen.down


def test_a_dropped_connection_is_tried_again_while_postgres_answers_and_a_statement_failure_is_not() -> None:
    server = FakeServer()
    seen = reachability(server)
    outcomes = iter([OperationalError("server closed the connection"), "saved"])

    def once_dropped() -> object:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert seen.run(once_dropped) == "saved"
    failures = []

    def refused_statement() -> None:
        failures.append(1)
        raise OperationalError("statement refused its value")

    with pytest.raises(OperationalError):
        seen.run(refused_statement)
    assert failures == [1] and not seen.down
