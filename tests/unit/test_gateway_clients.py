"""When a gateway's user connection rolls over: the expiry a token claims, and the window
before it in which a later token opens the next connection."""

from __future__ import annotations

import base64
import json
import math

import pytest

from entrypoints.gateways.clients import Held, claimed_expiry


def token_with(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJIUzI1NiJ9.{body}.signature"


@pytest.mark.parametrize(("claims", "expiry"), [
    ({"sub": "alice", "exp": 1_900_000_000}, 1_900_000_000.0),
    ({"sub": "alice", "exp": 1_900_000_000.5}, 1_900_000_000.5),
    ({"sub": "alice"}, math.inf),  # never expires: nothing rolls over from it, anything later than nothing
    ({"sub": "alice", "exp": "tomorrow"}, 0.0),  # unusable: never rolled over to
    ({"sub": "alice", "exp": True}, 0.0),
    ({"sub": "alice", "exp": None}, 0.0),
])
def test_the_expiry_a_token_claims(claims: dict[str, object], expiry: float) -> None:
    assert claimed_expiry(token_with(claims)) == expiry


def test_a_connection_renews_a_minute_before_its_tokens_expiry_or_halfway_through_a_short_one() -> None:
    hour = Held(client=None, used=0.0, expires=10_000.0, opened=10_000.0 - 3600)  # type: ignore[arg-type]
    assert hour.renew_at(60.0) == 10_000.0 - 60
    short = Held(client=None, used=0.0, expires=10_004.0, opened=10_000.0)  # type: ignore[arg-type]
    assert short.renew_at(60.0) == 10_002.0
    forever = Held(client=None, used=0.0, opened=10_000.0)  # type: ignore[arg-type]
    assert forever.renew_at(60.0) == math.inf
