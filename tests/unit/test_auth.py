"""Bearer tokens: verified once, but expiry and tampering are still caught."""

from __future__ import annotations

import time
from collections.abc import Callable

import jwt
import pytest
from chronicle_contract.errors import ChronicleError

from adapters.auth import REMEMBERED, Caller, TokenAuthority

SECRET = "unit-test-secret-unit-test-secret-unit-test"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_token_names_its_user_every_time() -> None:
    authority = TokenAuthority(secret=SECRET)
    token = authority.issue("alice")
    assert authority.user_of(bearer(token)) == authority.user_of(bearer(token)) == "alice"


def test_an_expired_token_is_refused_even_after_it_was_verified() -> None:
    now = [time.time()]
    authority = TokenAuthority(secret=SECRET, clock=lambda: now[0])
    token = authority.issue("alice", ttl_seconds=60)
    assert authority.user_of(bearer(token)) == "alice"  # verified, and remembered as verified
    now[0] += 61
    with pytest.raises(ChronicleError) as raised:
        authority.user_of(bearer(token))
    assert raised.value.code == "unauthorized"


@pytest.mark.parametrize(
    "header",
    [
        {},
        {"Authorization": "Basic abc"},
        bearer(jwt.encode({"sub": "alice"}, "another-secret-another-secret-another", algorithm="HS256")),
        bearer(jwt.encode({"name": "no subject"}, SECRET, algorithm="HS256")),
        bearer(jwt.encode({"sub": "chronicle"}, SECRET, algorithm="HS256")),  # reserved for the system
        bearer(jwt.encode({"sub": "alice", "roles": "auditor"}, SECRET, algorithm="HS256")),  # roles must be a list
        bearer(jwt.encode({"sub": "   "}, SECRET, algorithm="HS256")),  # a blank subject is nobody
        bearer(jwt.encode({"sub": "al\x00ice"}, SECRET, algorithm="HS256")),  # control characters
        bearer(jwt.encode({"sub": "a" * 257}, SECRET, algorithm="HS256")),
        bearer(jwt.encode({"sub": "alice", "exp": str(int(time.time()) + 60)}, SECRET, algorithm="HS256")),
        bearer(jwt.encode({"sub": "alice", "exp": True}, SECRET, algorithm="HS256")),
        bearer(jwt.encode({"sub": "alice", "exp": 1e300}, SECRET, algorithm="HS256")),  # past what orjson and NATS hold
        bearer(jwt.encode({"sub": "alice", "exp": 10**30}, SECRET, algorithm="HS256")),
        bearer(jwt.encode({"sub": "alice", "exp": float("inf")}, SECRET, algorithm="HS256")),  # (JSON's Infinity)
        bearer(jwt.encode({"sub": "alice", "exp": -5}, SECRET, algorithm="HS256")),
        bearer(jwt.encode({"sub": "alice", "exp": [1]}, SECRET, algorithm="HS256")),
    ],
    ids=["none", "basic", "other secret", "no subject", "system", "roles", "blank", "nul", "long", "exp text", "exp bool",
         "exp 1e300", "exp 10**30", "exp infinity", "exp negative", "exp list"],
)
def test_bad_tokens_are_unauthorized(header: dict[str, str]) -> None:
    with pytest.raises(ChronicleError) as raised:
        TokenAuthority(secret=SECRET).user_of(header)
    assert raised.value.code == "unauthorized"


def test_roles_ride_along_with_the_user_id() -> None:
    authority = TokenAuthority(secret=SECRET)
    caller = authority.user_of(bearer(authority.issue("carol", claims={"roles": ["auditor"]})))
    assert caller == "carol" and caller.roles == frozenset({"auditor"})
    assert authority.user_of(bearer(authority.issue("dave"))).roles == frozenset()


def test_rs256_tokens_verify_with_the_public_key() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    authority = TokenAuthority(public_key=public_pem)
    token = jwt.encode({"sub": "carol", "exp": time.time() + 60}, private_key, algorithm="RS256")
    assert authority.user_of(bearer(token)) == "carol"
    forged = token[:-4] + "AAAA"  # a signature that no longer matches
    with pytest.raises(ChronicleError):
        authority.user_of(bearer(forged))


def spare_bits_set(token: str) -> str:
    """The same token with its signature's last character's unused low bits set: the same
    bytes to a base64 decoder, another string to a cache."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    return token[:-1] + alphabet[last | 0b11]


@pytest.mark.parametrize(
    "variant",
    [lambda t: t + "=", lambda t: t + "==", lambda t: t + " ", lambda t: " " + t, lambda t: t + "\n",
     lambda t: t.replace(".", "=.", 1), spare_bits_set],
    ids=["padded", "padded twice", "trailing space", "leading space", "newline", "padded header", "spare bits"],
)
def test_a_token_is_accepted_only_as_it_was_issued(variant: Callable[[str], str]) -> None:
    authority = TokenAuthority(secret=SECRET)
    token = authority.issue("alice")
    while spare_bits_set(token) == token:  # (a signature whose spare bits are set already: issue another)
        token = authority.issue("alice", claims={"n": token[-1]})
    assert authority.user_of(bearer(token)) == "alice"  # verified and remembered
    with pytest.raises(ChronicleError) as raised:
        authority.verify(variant(token))
    assert raised.value.code == "unauthorized"


def test_an_expiry_within_reach_is_kept() -> None:
    authority = TokenAuthority(secret=SECRET)
    far = jwt.encode({"sub": "alice", "exp": 253_402_300_799}, SECRET, algorithm="HS256")  # 9999-12-31T23:59:59Z
    assert authority.verify(far)[1] == 253_402_300_799.0


@pytest.mark.parametrize(
    "durables", [["a.b"], ["*"], [""], ["x" * 33], [f"d{n}" for n in range(9)], "warehouse", [1]],
    ids=["dot", "wildcard", "empty", "long", "nine", "not a list", "not a name"],
)
def test_a_durables_claim_names_at_most_eight_plain_names(durables: object) -> None:
    token = jwt.encode({"sub": "loader", "roles": ["feed"], "durables": durables}, SECRET, algorithm="HS256")
    with pytest.raises(ChronicleError) as raised:
        TokenAuthority(secret=SECRET).verify(token)
    assert raised.value.code == "unauthorized"


def test_the_durables_a_token_names_ride_along() -> None:
    authority = TokenAuthority(secret=SECRET)
    caller, _ = authority.verify(authority.issue("loader", claims={"roles": ["feed"], "durables": ["warehouse", "n-2"]}))
    assert caller.durables == ("warehouse", "n-2")


class CountingAuthority(TokenAuthority):
    """Counts the signature checks (the part of a verification that costs)."""

    checked = 0

    def _verified(self, token: str) -> tuple[Caller, float | None]:
        self.checked += 1
        return super()._verified(token)


def test_a_refused_token_is_refused_again_without_its_signature_checked() -> None:
    authority = CountingAuthority(secret=SECRET)
    head, body, _ = authority.issue("mallory").split(".")
    forged = f"{head}.{body}.{'A' * 43}"
    for _ in range(100):
        with pytest.raises(ChronicleError) as raised:
            authority.verify(forged)
        assert (raised.value.code, raised.value.message) == ("unauthorized", "invalid or expired token")
    assert authority.checked == 1
    for malformed in ("", "not-a-jwt", "a.b", "a.b.c.d", "x" * 20_000):  # refused before any cryptography
        with pytest.raises(ChronicleError):
            authority.verify(malformed)
    assert authority.checked == 1


def test_a_token_not_valid_yet_is_not_remembered_as_refused() -> None:
    authority = CountingAuthority(secret=SECRET)
    early = authority.issue("alice", claims={"nbf": int(time.time()) + 3600})
    for _ in range(2):
        with pytest.raises(ChronicleError):
            authority.verify(early)
    assert authority.checked == 2  # (checked again: it may become valid)


def test_what_is_remembered_is_bounded() -> None:
    authority = CountingAuthority(secret=SECRET)
    head, body, _ = authority.issue("mallory").split(".")
    for n in range(REMEMBERED + 10):
        with pytest.raises(ChronicleError):
            authority.verify(f"{head}.{body}.{n:043d}")
    assert len(authority._refused) == REMEMBERED
