"""Bearer tokens: verifies the JWT on each request and, locally, issues them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
from chronicle_contract.bus import DURABLE_NAME, DURABLES_CLAIM, MAX_DURABLES
from chronicle_contract.errors import ChronicleError

from domain.base import SYSTEM_OWNER


class Caller(str):
    """A caller's user id (the token's `sub`) that also carries the token's `roles` and
    `durables` claims; it is the plain user id everywhere a string is expected."""

    roles: frozenset[str]
    durables: tuple[str, ...]  # the event feed's durable consumers it may keep (chronicle_contract.bus)

    def __new__(cls, user_id: str, roles: frozenset[str] = frozenset(), durables: tuple[str, ...] = ()) -> Caller:
        caller = super().__new__(cls, user_id)
        caller.roles = roles
        caller.durables = durables
        return caller


MAX_SUBJECT = 256  # characters of a token's `sub`: the user id everything is scoped by
MAX_TOKEN = 16 * 1024  # characters of a bearer token (a JWT is a few hundred)
# The last moment a token may name as its expiry: 9999-12-31T23:59:59Z. Past it a time
# overflows what dates, NATS user JWTs (int64 seconds) and orjson (64-bit integers) hold.
MAX_EXPIRY = 253_402_300_799
COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def exact(token: str) -> bool:
    """Whether `token` is a JWT written the one way its bytes can be written: three
    unpadded base64url parts with no spare bits set and nothing around them. A JWT library
    reads padding, whitespace and a last character's spare bits as the same token, and a
    cache keyed by the string would then hold one token under many keys."""
    if len(token) > MAX_TOKEN or not COMPACT_JWS.fullmatch(token):
        return False
    try:
        return all(
            base64.urlsafe_b64encode(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))).rstrip(b"=").decode() == part
            for part in token.split(".")
        )
    except (binascii.Error, ValueError):  # a part of 4n+1 characters is no base64 at all
        return False


def usable_expiry(expires: object) -> float | None:
    """A token's `exp` as epoch seconds (None: the token has none), or `unauthorized` for one
    no clock can reach or compare: not a number, a bool, not finite, before 1970 or after 9999."""
    if expires is None:
        return None
    if isinstance(expires, bool) or not isinstance(expires, int | float) or not math.isfinite(expires):
        raise ChronicleError("unauthorized", "token's exp must be a number of seconds")
    if not 0 < expires <= MAX_EXPIRY:
        raise ChronicleError("unauthorized", f"token's exp must lie between 1970 and {MAX_EXPIRY} (the year 9999)")
    return float(expires)


class NotYetValid(ChronicleError):
    """A token refused for now only (not remembered as refused)."""


REMEMBERED = 10_000  # tokens accepted, and digests of tokens refused, each


def remember(cache: dict[Any, Any], key: Any, value: Any, lock: threading.Lock) -> None:
    """Keep `key` in `cache`, dropping the oldest entry past REMEMBERED."""
    with lock:
        cache[key] = value
        while len(cache) > REMEMBERED:
            del cache[next(iter(cache))]


class TokenAuthority:
    """HS256 with a shared secret, or RS256 with a public key (verification only)."""

    def __init__(self, *, secret: str | None = None, public_key: str | None = None, clock: Callable[[], float] = time.time):
        key = public_key or secret
        if not key:
            raise ValueError("a JWT secret or public key is required")
        self.secret = secret
        self.key = key
        self.algorithms = ["RS256"] if public_key else ["HS256"]
        self.clock = clock  # seconds since the epoch: when tokens are issued and expire
        # Read by the service's event loop and the auth callout's thread; written under the lock.
        self._accepted: dict[str, tuple[Caller, float | None]] = {}
        self._refused: dict[bytes, str] = {}  # a refused token's digest -> why
        self._lock = threading.Lock()

    @classmethod
    def local(cls, data_dir: Path) -> TokenAuthority:
        """The embedded default: a secret generated once and kept under the data dir."""
        path = data_dir / "jwt_secret"
        if not path.exists():
            data_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(48))
            path.chmod(0o600)
        return cls(secret=path.read_text().strip())

    def issue(self, user_id: str, *, ttl_seconds: int = 30 * 24 * 3600, claims: dict | None = None) -> str:
        if not self.secret:
            raise ValueError("tokens can only be issued with a shared secret")
        now = int(self.clock())
        payload = {"sub": user_id, "iat": now, "exp": now + ttl_seconds, **(claims or {})}
        return jwt.encode(payload, self.secret, algorithm="HS256")

    def user_of(self, headers: dict[str, str] | None) -> Caller:
        """The caller from `Authorization: Bearer <JWT>`, or `unauthorized`."""
        header = (headers or {}).get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise ChronicleError("unauthorized", "missing bearer token")
        caller, _ = self.verify(token)
        return caller

    def verify(self, token: str) -> tuple[Caller, float | None]:
        """The token's caller and expiry (epoch seconds, None: never), or `unauthorized`.

        Both answers are remembered: a token verified once is looked up, not verified again
        (its expiry is checked on every use), and so is a token refused once, by a digest
        of it, so that a flood of one bad token costs a dictionary look-up per request or
        connect (./dev bench edges). Only tokens written exactly as issued are verified, and
        so only they are ever remembered as accepted: a variant is no key into the cache."""
        accepted = self._accepted.get(token)
        if accepted is None:
            digest = hashlib.blake2b(token.encode(errors="replace"), digest_size=16).digest()
            reason = self._refused.get(digest)
            if reason is not None:
                raise ChronicleError("unauthorized", reason)
            try:
                if not exact(token):
                    raise ChronicleError("unauthorized", "invalid or expired token")
                accepted = self._verified(token)
            except ChronicleError as refused:
                if not isinstance(refused, NotYetValid):
                    remember(self._refused, digest, refused.message, self._lock)
                raise
            remember(self._accepted, token, accepted, self._lock)
        caller, expires = accepted
        if expires is not None and expires <= self.clock():
            raise ChronicleError("unauthorized", "invalid or expired token")
        return caller, expires

    def _verified(self, token: str) -> tuple[Caller, float | None]:
        """Signature checked once per token; expiry is checked on every use by the caller."""
        try:
            claims = jwt.decode(token, self.key, algorithms=self.algorithms, options={"require": ["sub"]})
        except jwt.ImmatureSignatureError:  # (its nbf or iat is ahead of our clock: it may do later)
            raise NotYetValid("unauthorized", "invalid or expired token") from None
        except jwt.PyJWTError:
            raise ChronicleError("unauthorized", "invalid or expired token") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip():
            raise ChronicleError("unauthorized", "token has no subject")
        if len(subject) > MAX_SUBJECT or not subject.isprintable():
            raise ChronicleError("unauthorized", f"token's subject must be at most {MAX_SUBJECT} printable characters")
        if subject == SYSTEM_OWNER:
            raise ChronicleError("unauthorized", f"subject {SYSTEM_OWNER!r} is reserved for Chronicle itself")
        roles = claims.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
            raise ChronicleError("unauthorized", "token's roles claim must be a list of names")
        durables = claims.get(DURABLES_CLAIM, [])
        if (
            not isinstance(durables, list) or len(durables) > MAX_DURABLES
            or not all(isinstance(name, str) and DURABLE_NAME.fullmatch(name) for name in durables)
        ):
            raise ChronicleError(
                "unauthorized", f"token's {DURABLES_CLAIM} claim must list at most {MAX_DURABLES} names"
                f" of 1 to 32 letters, digits, '-' or '_'"
            )
        return Caller(subject, frozenset(roles), tuple(dict.fromkeys(durables))), usable_expiry(claims.get("exp"))
