"""NATS auth callout: the server asks Chronicle who a connecting client is.

A client connects with its bearer JWT as the NATS token. The server sends an authorization
request (a JWT it signed) to `$SYS.REQ.USER.AUTH` in the callout account; Chronicle
verifies the bearer token and answers with an authorization response holding a user JWT,
both signed with the issuer account key the server's `auth_callout.issuer` names. The user
JWT places the connection in the service's account with the permissions `permissions`
gives for that user, and expires when the bearer token does (the server then closes the
connection). A refused token gets an authorization response carrying an error. The
service's own connections come here too, each naming its role as the NATS user with the
service's password, and get that role's subjects only (adapters/messaging/identities.py).
A user the flood brake benched (adapters/messaging/flood_brake.py) is refused until their
cooldown ends, and the connections admitted here for them are kicked: the server's KICK
request, sent as the system account's one user (infra/nats/chronicle.conf).

NATS JWTs are plain JWTs with an ed25519 nkey signature (`alg: ed25519-nkey`), signed with
the official `nkeys` package; nats-io ships no Python JWT library, and the one on PyPI is
marked experimental and has no callout claims, so the few claims needed are written here.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import nkeys
import orjson
from chronicle_contract.bus import user_scope
from chronicle_contract.errors import ChronicleError
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from adapters.messaging.connect import flushed
from adapters.messaging.flood_brake import FloodBrake

log = logging.getLogger(__name__)

AUTH_SUBJECT = "$SYS.REQ.USER.AUTH"
KICK_SUBJECT = "$SYS.REQ.SERVER.{server_id}.KICK"
SYSTEM_USER = "chronicle-system"  # the system account's user (infra/nats/chronicle.conf): KICK only
# Seconds a benched user's connect waits for its refusal (under the server's 2 s callout timeout).
BENCHED_ANSWER_DELAY = 1.0
KEPT_CONNECTIONS = 64  # per user: their most recently admitted connections, the ones a bench kicks
MAX_KEPT = 200_000  # connections remembered in all (the least recently admitting users' go first): ~30 MB
QUEUE_GROUP = "chronicle-auth"
HEADER = base64.urlsafe_b64encode(orjson.dumps({"typ": "JWT", "alg": "ed25519-nkey"})).rstrip(b"=")
MAX_REQUEST_BYTES = 64 * 1024  # a callout request is a few hundred bytes; a bearer token at most a few KiB
# (user id, expiry as epoch seconds or None) of a verified bearer token; ChronicleError when refused
Verify = Callable[[str], tuple[str, float | None]]
Permissions = Callable[[str], dict[str, Any]]
# A service identity's permissions, given the user name and password it connected with
# (adapters/messaging/identities.py ServiceIdentities.admit); ChronicleError when refused.
AdmitService = Callable[[str, str], dict[str, Any]]


def new_account_seed() -> str:
    """A fresh account nkey seed (`SA...`): its public key is the callout issuer."""
    return nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_ACCOUNT).decode()


def public_key(seed: str) -> str:
    return str(nkeys.from_seed(seed.encode()).public_key.decode())


def b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def encode(claims: dict[str, Any], signer: Any) -> str:
    """A NATS JWT: `jti` as nats-io/jwt computes it (base32 SHA-512/256 of the claims)."""
    claims = {**claims, "jti": ""}
    claims["jti"] = base64.b32encode(hashlib.new("sha512_256", orjson.dumps(claims)).digest()).decode().rstrip("=")
    signing_input = HEADER + b"." + b64(orjson.dumps(claims))
    return (signing_input + b"." + b64(signer.sign(signing_input))).decode()


def claims_of(token: bytes | str) -> dict[str, Any]:
    """A JWT's claims, unverified (the request comes from the server on a subject only it
    may publish on in the callout account)."""
    raw = token.encode() if isinstance(token, str) else token
    parts = raw.strip().split(b".")
    if len(parts) != 3:
        raise ValueError("not a JWT")
    payload = parts[1] + b"=" * (-len(parts[1]) % 4)
    claims = orjson.loads(base64.urlsafe_b64decode(payload))
    if not isinstance(claims, dict):
        raise ValueError("JWT claims are not an object")
    return claims


class AuthCallout:
    """Answers the server's authorization requests (a queue group: any instance may)."""

    def __init__(
        self, nc: NATS, issuer_seed: str, *, verify: Verify, permissions: Permissions, account: str,
        services: AdmitService | None = None, clock: Callable[[], float] = time.time,
        brake: FloodBrake | None = None, system: NATS | None = None, max_kept: int = MAX_KEPT,
    ):
        self.nc = nc
        self.issuer = nkeys.from_seed(issuer_seed.encode())
        self.issuer_public = self.issuer.public_key.decode()
        self.verify = verify
        self.permissions = permissions
        self.services = services
        self.account = account
        self.clock = clock
        self.brake = brake
        self.system = system  # the system account's connection (kicks), if the server has its user
        self.max_kept = max_kept
        # user -> the (server id, client id) of connections admitted for them, newest last
        self.admitted: OrderedDict[str, list[tuple[str, int]]] = OrderedDict()
        self._kept = 0  # connections in `admitted`
        self.subscription: Subscription | None = None
        self.granted = 0
        self.refused = 0
        self._hold = False  # (set by respond: this refusal is sent after BENCHED_ANSWER_DELAY)
        self._held: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.subscription = await self.nc.subscribe(AUTH_SUBJECT, queue=QUEUE_GROUP, cb=self._answer)
        await flushed(self.nc)

    async def stop(self) -> None:
        if self.subscription is not None:
            await self.subscription.unsubscribe()
            self.subscription = None

    async def _answer(self, msg: Msg) -> None:
        self._hold = False
        try:
            response = self.respond(msg.data)
        except Exception as error:  # a request we cannot read gets no answer: the server times out
            log.warning("auth callout request not understood", extra={"error_type": type(error).__name__})
            return
        if self._hold:
            # A benched user's connect is refused after a while, not at once: a client that
            # connects again the moment it is refused (as a flood's attacker does) then tries
            # once a second, not hundreds of times, and costs the others nothing meanwhile.
            loop = asyncio.get_running_loop()
            loop.call_later(BENCHED_ANSWER_DELAY, lambda: self._send_later(msg, response))
            return
        await msg.respond(response.encode())

    def _send_later(self, msg: Msg, response: str) -> None:
        task = asyncio.get_running_loop().create_task(msg.respond(response.encode()))
        self._held.add(task)  # (held until done: the loop keeps only a weak reference)
        task.add_done_callback(self._held.discard)

    def respond(self, request: bytes) -> str:
        """The signed authorization response to one request."""
        if len(request) > MAX_REQUEST_BYTES:
            raise ValueError("authorization request too large")
        claims = claims_of(request)
        nats_claims = claims["nats"]
        user_nkey, server_id = nats_claims["user_nkey"], nats_claims["server_id"]["id"]
        options = nats_claims.get("connect_opts") or {}
        token = options.get("auth_token") or ""
        now = int(self.clock())
        response: dict[str, Any] = {
            "iat": now, "iss": self.issuer_public, "sub": user_nkey, "aud": server_id,
            "nats": {"type": "authorization_response", "version": 2},
        }
        try:
            if not token and options.get("user") and self.services is not None:
                # One of the service's own connections, each admitted with its role's subjects only.
                name = str(options["user"])
                user_jwt = self.jwt(user_nkey, name, self.services(name, str(options.get("pass") or "")), None, now)
            elif not token:
                raise ChronicleError("unauthorized", "connect with your bearer token as the NATS token")
            else:
                user_id, expires = self.verify(token)
                if self.brake is not None and (left := self.brake.benched_for(user_id)):
                    self._hold = True
                    raise ChronicleError("unauthorized", f"too many of your requests were refused: connect again in {left} s")
                user_jwt = self.user_jwt(user_nkey, user_id, expires, now)
                self._remember(user_id, server_id, nats_claims.get("client_info") or {})
        except (ChronicleError, ValueError, TypeError) as refused:
            # A request we could read is answered at once, whatever its token holds: without
            # an answer the server waits out its callout timeout (2 s) holding the connect.
            self.refused += 1
            response["nats"]["error"] = refused.message if isinstance(refused, ChronicleError) else "unusable token"
            return encode(response, self.issuer)
        self.granted += 1
        response["nats"]["jwt"] = user_jwt
        return encode(response, self.issuer)

    def _remember(self, user_id: str, server_id: str, client: dict[str, Any]) -> None:
        """Which connection was admitted for the user (client ids are never reused by a
        server: a kick of one long gone closes nothing else)."""
        cid = client.get("id")
        if not isinstance(cid, int):
            return
        kept = self.admitted.pop(user_id, [])
        self._kept -= len(kept)
        kept.append((sys.intern(server_id), cid))  # (a few servers: one copy of each id)
        kept = self.admitted[user_id] = kept[-KEPT_CONNECTIONS:]
        self._kept += len(kept)
        while self._kept > self.max_kept:
            self._kept -= len(self.admitted.popitem(last=False)[1])

    async def kick(self, user_id: str) -> None:
        """Close every connection admitted here for the user (the brake benched them)."""
        connections = self.admitted.pop(user_id, [])
        self._kept -= len(connections)
        if self.system is None or not connections:
            return
        for server_id, cid in connections:
            try:  # (its answer says an error for a connection already closed: nothing to do)
                await self.system.request(KICK_SUBJECT.format(server_id=server_id), orjson.dumps({"cid": cid}), timeout=2)
            except Exception as error:  # (a server gone, or the system user without its grant)
                log.warning("kick not sent", extra={"error_type": type(error).__name__})
        log.info("user benched: connections kicked", extra={"user_scope": user_scope(user_id), "connections": len(connections)})

    def user_jwt(self, user_nkey: str, user_id: str, expires: float | None, now: int) -> str:
        # The server's logs and monitoring name the connection by the user's scope, not their id.
        return self.jwt(user_nkey, user_scope(user_id), self.permissions(user_id), expires, now)

    def jwt(self, user_nkey: str, name: str, permissions: dict[str, Any], expires: float | None, now: int) -> str:
        user: dict[str, Any] = {
            "iat": now, "iss": self.issuer_public, "sub": user_nkey, "aud": self.account, "name": name,
            "nats": {**permissions, "type": "user", "version": 2},
        }
        if expires is not None:
            user["exp"] = int(expires)
        return encode(user, self.issuer)


class CalloutThread:
    """An AuthCallout on an event loop of its own, in a thread of its own, with its own
    connection: a connect waits neither for the service's requests nor they for a flood of
    bad connects (each refusal still costs a signature, ~0.1 ms, but no queue behind the
    service's work)."""

    def __init__(
        self, connect: Callable[[], Awaitable[NATS]], callout: Callable[[NATS, NATS | None], AuthCallout],
        connect_system: Callable[[], Awaitable[NATS]] | None = None,
    ) -> None:
        self._connect = connect
        self._connect_system = connect_system
        self._callout = callout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="auth-callout", daemon=True)
        self._kicks: set[asyncio.Task[None]] = set()
        self.callout: AuthCallout | None = None

    async def start(self) -> None:
        self._thread.start()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._start(), self._loop))

    async def _start(self) -> None:
        system = None
        if self._connect_system is not None:
            try:
                system = await self._connect_system()
            except Exception as error:  # a server configured before the system user existed
                log.warning(
                    "no system account connection: a benched user's connections are not kicked, only refused "
                    "when they connect again (infra/nats/chronicle.conf has the user)",
                    extra={"error_type": type(error).__name__},
                )
        self.callout = self._callout(await self._connect(), system)
        await self.callout.start()

    def kick(self, user_id: str) -> None:
        """Have the callout kick the user's connections (from any thread)."""
        if self.callout is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._kick, self.callout, user_id)

    def _kick(self, callout: AuthCallout, user_id: str) -> None:
        task = self._loop.create_task(callout.kick(user_id))
        self._kicks.add(task)  # (held until done: the loop keeps only a weak reference)
        task.add_done_callback(self._kicks.discard)

    async def stop(self) -> None:
        if self._thread.is_alive():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._stop(), self._loop))
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join)
        self._loop.close()

    async def _stop(self) -> None:
        if self.callout is not None:
            await self.callout.stop()
            await self.callout.nc.drain()
            if self.callout.system is not None:
                await self.callout.system.close()
