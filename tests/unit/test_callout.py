"""The auth callout's answers, without a server: what a bearer token becomes on the bus."""

from __future__ import annotations

import base64
from typing import Any

import nacl.signing
import nkeys
import orjson
import pytest
from chronicle_contract.bus import feed_consumer, inbox_prefix, signals_prefix, user_permissions
from chronicle_contract.errors import ChronicleError

from adapters.messaging.callout import KEPT_CONNECTIONS, AuthCallout, claims_of, encode, new_account_seed, public_key
from adapters.messaging.flood_brake import Brake, FloodBrake

NOW = 1_800_000_000
USER_NKEY = "UBO2MQV67TQTVIRV3XFTEZOACM4WLOCMCDMAWN5QVN5PI2N6JHTVDRON"
SERVER_ID = "NB5FCQYBGNXSL27AGZYUX5QZ2KKIFUKVDZCL5R7NIUS4562JT4WEWKQV"


def verify(token: str) -> tuple[str, float | None]:
    if token.startswith("good:"):
        return token.removeprefix("good:"), NOW + 60
    if token.startswith("far:"):  # a verifier that lets an expiry through which no JWT can carry
        return token.removeprefix("far:"), 1e300
    raise ChronicleError("unauthorized", "invalid or expired token")


def callout(seed: str) -> AuthCallout:
    return AuthCallout(
        None, seed, verify=verify, permissions=lambda user: user_permissions("chronicle", user),  # type: ignore[arg-type]
        account="CHRONICLE", clock=lambda: NOW,
    )


def request(token: str | None, cid: int = 7) -> bytes:
    server = nkeys.from_seed(nkeys.encode_seed(b"\1" * 32, nkeys.PREFIX_BYTE_SERVER))
    options: dict[str, Any] = {"lang": "python3"} | ({"auth_token": token} if token is not None else {})
    claims = {"sub": "nats_user_auth_request", "nats": {"user_nkey": USER_NKEY, "server_id": {"id": SERVER_ID},
                                                       "client_info": {"id": cid, "host": "127.0.0.1"},
                                                       "connect_opts": options, "type": "authorization_request"}}
    return encode(claims, server).encode()


def signed_by(token: str, issuer: str) -> bool:
    """The JWT's signature checks out against the issuer's public nkey."""
    header, payload, signature = token.split(".")
    raw = base64.b32decode(issuer + "=" * (-len(issuer) % 8))[1:-2]  # prefix byte, key, crc16
    nacl.signing.VerifyKey(raw).verify(f"{header}.{payload}".encode(), base64.urlsafe_b64decode(signature + "=="))
    return True


def test_a_valid_token_becomes_a_user_of_the_service_account_with_its_own_subjects() -> None:
    seed = new_account_seed()
    response = callout(seed).respond(request("good:alice"))
    issuer = public_key(seed)
    assert signed_by(response, issuer)
    claims = claims_of(response)
    assert (claims["iss"], claims["sub"], claims["aud"]) == (issuer, USER_NKEY, SERVER_ID)
    user = claims_of(claims["nats"]["jwt"])
    assert signed_by(claims["nats"]["jwt"], issuer)
    assert (user["sub"], user["aud"], user["exp"]) == (USER_NKEY, "CHRONICLE", NOW + 60)
    assert "alice" not in orjson.dumps(user).decode(), "the server's logs name a scope, not the user id"
    assert user["nats"]["sub"]["allow"] == [f"{inbox_prefix('alice')}.>", f"{signals_prefix('chronicle', 'alice')}.>"]
    assert user["nats"]["pub"]["allow"] == ["chronicle.cmd.>", "chronicle.query.>"], "no $SRV: discovery answers anywhere"


@pytest.mark.parametrize("token", [None, "", "bad"])
def test_a_missing_or_bad_token_gets_an_error_and_no_user(token: str | None) -> None:
    seed = new_account_seed()
    claims = claims_of(callout(seed).respond(request(token)))
    assert claims["nats"]["error"] and "jwt" not in claims["nats"]


def test_users_scopes_differ_and_need_no_subject_escaping() -> None:
    scopes = {inbox_prefix(user) for user in ("alice", "bob", "a.b", "a b", "*", ">", "Alice")}
    assert len(scopes) == 7
    assert all(scope.count(".") == 1 and " " not in scope and "*" not in scope for scope in scopes)


def test_an_oversized_request_is_not_read() -> None:
    with pytest.raises(ValueError, match="too large"):
        callout(new_account_seed()).respond(b"x" * 100_000)


def test_a_token_the_grant_cannot_be_written_for_is_refused_at_once() -> None:
    """An answer, not silence: a callout that raised left the server waiting out its timeout."""
    claims = claims_of(callout(new_account_seed()).respond(request("far:alice")))
    assert claims["nats"]["error"] == "unusable token" and "jwt" not in claims["nats"]


def test_a_feed_tokens_consumer_api_names_its_own_consumers_only() -> None:
    from adapters.auth import Caller

    loader = Caller("loader-a", frozenset({"feed"}), ("warehouse",))
    rival = Caller("loader-b", frozenset({"feed"}), ("warehouse",))
    mine = [s for s in user_permissions("chronicle", loader)["pub"]["allow"] if s.startswith(("$JS.API.CONSUMER", "$JS.ACK"))]
    theirs = user_permissions("chronicle", rival)["pub"]["allow"]
    assert mine and not set(mine) & set(theirs)
    assert all(">" not in s.removesuffix(".>") and "*" not in s for s in mine), "no wildcard over consumer names"
    assert f"$JS.API.CONSUMER.DELETE.CHRONICLE_EVENTS.{feed_consumer('loader-a', 'warehouse')}" in mine
    assert not any("$JS.API" in s for s in user_permissions("chronicle", Caller("bob"))["pub"]["allow"])


def service_request(user: str, password: str) -> bytes:
    server = nkeys.from_seed(nkeys.encode_seed(b"\1" * 32, nkeys.PREFIX_BYTE_SERVER))
    options = {"lang": "python3", "user": user, "pass": password}
    claims = {"sub": "nats_user_auth_request", "nats": {"user_nkey": USER_NKEY, "server_id": {"id": SERVER_ID},
                                                       "connect_opts": options, "type": "authorization_request"}}
    return encode(claims, server).encode()


def service_callout(seed: str) -> AuthCallout:
    from adapters.messaging.identities import ServiceIdentities

    return AuthCallout(
        None, seed, verify=verify, permissions=lambda user: user_permissions("chronicle", user),  # type: ignore[arg-type]
        account="CHRONICLE", services=ServiceIdentities("chronicle", "the-service-password").admit, clock=lambda: NOW,
    )


def test_the_services_own_connections_get_their_roles_subjects_only() -> None:
    from adapters.messaging.identities import Role, identity

    seed = new_account_seed()
    granted = {}
    for role in Role:
        claims = claims_of(service_callout(seed).respond(service_request(identity(role), "the-service-password")))
        user = claims_of(claims["nats"]["jwt"])
        assert user["name"] == identity(role) and "exp" not in user
        granted[role] = user["nats"]
    assert granted[Role.RESPONDER]["pub"]["allow"] == ["_INBOX.>"], "the responder publishes to inboxes only"
    assert granted[Role.SIGNALS]["pub"]["allow"] == ["chronicle.signals.>"]
    assert granted[Role.USAGE]["pub"]["allow"] == ["chronicle.internal.usage"]
    publishers = {Role.SIGNALS: "chronicle.signals.", Role.FEED: "chronicle.events.", Role.JOBS: "chronicle.jobs.",
                  Role.USAGE: "chronicle.internal.", Role.RESPONDER: "_INBOX."}
    for role, permissions in granted.items():  # each publishes no other role's subjects
        for other, subjects in publishers.items():
            if other is not role:
                assert not any(s.startswith(subjects) for s in permissions["pub"]["allow"]), (role, other)
        assert ">" not in permissions["pub"]["allow"]


@pytest.mark.parametrize(("user", "password"), [
    ("chronicle-responder", "wrong"), ("chronicle-responder", ""), ("chronicle", "the-service-password"),
    ("chronicle-root", "the-service-password"),
])
def test_a_service_identity_needs_a_known_role_and_the_services_password(user: str, password: str) -> None:
    claims = claims_of(service_callout(new_account_seed()).respond(service_request(user, password)))
    assert claims["nats"]["error"] and "jwt" not in claims["nats"]


def test_a_user_name_is_no_service_identity_where_the_callout_admits_none() -> None:
    claims = claims_of(callout(new_account_seed()).respond(service_request("chronicle-responder", "x")))
    assert claims["nats"]["error"] and "jwt" not in claims["nats"]


def test_the_jobs_role_names_the_work_queue_the_workers_use() -> None:
    from adapters.messaging.identities import JOBS_CONSUMER, jobs_stream
    from services.jobs.worker import CONSUMER, streams

    assert (jobs_stream("a.b"), JOBS_CONSUMER) == (streams("a.b")[0], CONSUMER)


def test_a_benched_users_connect_is_refused_with_the_wait_and_held_back() -> None:
    brake = FloodBrake(Brake(threshold=2, window=10, cooldown=30), clock=lambda: 5.0)
    answering = AuthCallout(
        None, new_account_seed(), verify=verify, permissions=lambda user: user_permissions("chronicle", user),  # type: ignore[arg-type]
        account="CHRONICLE", clock=lambda: NOW, brake=brake,
    )
    brake.refused("mallory")
    brake.refused("mallory")
    refused = claims_of(answering.respond(request("good:mallory")))["nats"]
    assert "jwt" not in refused and refused["error"] == "too many of your requests were refused: connect again in 30 s"
    assert answering._hold, "the refusal waits before it is sent"
    answering._hold = False
    assert "jwt" in claims_of(answering.respond(request("good:alice")))["nats"] and not answering._hold


def test_the_connections_admitted_for_a_user_are_remembered_newest_first_and_bounded() -> None:
    answering = callout(new_account_seed())
    for cid in range(KEPT_CONNECTIONS + 5):
        answering.respond(request("good:alice", cid=cid))
    answering.respond(request("good:bob", cid=999))
    answering.respond(request("bad", cid=1000))  # (refused: nothing to kick)
    kept = answering.admitted["alice"]
    assert len(kept) == KEPT_CONNECTIONS and kept[-1] == (SERVER_ID, KEPT_CONNECTIONS + 4) and kept[0][1] == 5
    assert answering.admitted["bob"] == [(SERVER_ID, 999)] and set(answering.admitted) == {"alice", "bob"}


def test_the_connections_remembered_in_all_are_bounded_the_least_recent_users_first() -> None:
    answering = AuthCallout(
        None, new_account_seed(), verify=verify, permissions=lambda user: user_permissions("chronicle", user),  # type: ignore[arg-type]
        account="CHRONICLE", clock=lambda: NOW, max_kept=10,
    )
    for n in range(12):
        answering.respond(request(f"good:user-{n}", cid=n))
    answering.respond(request("good:user-5", cid=100))  # (user-5 admitted again: most recent now)
    assert sum(map(len, answering.admitted.values())) == 10
    assert "user-0" not in answering.admitted and "user-1" not in answering.admitted
    assert answering.admitted["user-5"] == [(SERVER_ID, 5), (SERVER_ID, 100)]
