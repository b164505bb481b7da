"""The console's one-click sign-in for the person at the machine (`POST /api/console/local-sign-in`):
a short-lived token for one configured user, with no role, handed only to a browser on the same
machine. Each refusal closes a way in from elsewhere:

- off unless the service runs on the embedded default's token secret (or a setting says so);
- the peer address must be loopback (no other machine);
- the Host header must name a loopback host (a page of another site whose name was rebound
  to 127.0.0.1 sends that site's name: DNS rebinding);
- the Origin header must be this very origin (a page of another origin cannot post here: CSRF),
  and the method POST (no link or image can make one);
- no forwarding header (a proxy on this machine would make every remote peer look loopback);
- no body asking for anything: the user and the absence of roles are the service's settings.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Protocol

from chronicle_contract.errors import ChronicleError
from starlette.requests import Request
from starlette.responses import Response

from entrypoints.gateways.rest import error_response, json_body, json_response

log = logging.getLogger(__name__)

FORWARDING = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "via")
LOOPBACK_NAMES = ("localhost",)


class Issuer(Protocol):
    def issue(self, user_id: str, *, ttl_seconds: int = ..., claims: dict | None = None) -> str: ...


@dataclass(frozen=True)
class LocalSignIn:
    """Tokens for `user`, lasting `ttl` seconds, from `issuer` (None: the sign-in is off)."""

    issuer: Issuer | None
    user: str = "local"
    ttl: int = 8 * 3600

    async def handle(self, request: Request) -> Response:
        try:
            refusal = self.refusal(request)
            if refusal is not None:
                log.warning("local sign-in refused", extra={"rule": refusal})
                raise ChronicleError("unauthorized", f"local sign-in refused: {refusal}",
                                     [{"field": "request", "rule": refusal, "message": refusal}])
            if await json_body(request):
                message = "local sign-in takes no fields: its user and (no) roles are the service's settings"
                raise ChronicleError("invalid", message, [{"field": "body", "rule": "empty", "message": message}])
            assert self.issuer is not None
            token = self.issuer.issue(self.user, ttl_seconds=self.ttl)
        except ChronicleError as error:
            return error_response(error)
        log.info("local sign-in", extra={"user": self.user})
        return json_response({"success": True, "token": token, "userId": self.user, "expiresIn": self.ttl},
                             headers={"Cache-Control": "no-store"})

    def refusal(self, request: Request) -> str | None:
        """Why this request may not sign in (the rule's name), or None."""
        if self.issuer is None:
            return "off"
        if any(name in request.headers for name in FORWARDING):
            return "forwarded"
        peer = request.client.host if request.client is not None else ""
        if not loopback_address(peer):
            return "loopback_peer"
        host = request.headers.get("host", "")
        if not loopback_host(host):
            return "loopback_host"
        if request.headers.get("origin") != f"http://{host}":
            return "origin"
        return None


def loopback_address(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def loopback_host(host: str) -> bool:
    """A Host header naming this machine's loopback: 127.0.0.1[:port], [::1][:port], localhost[:port]."""
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return False
    else:
        name, colon, port = host.partition(":")
        if colon and not port.isdigit():
            return False
    return name.lower() in LOOPBACK_NAMES or loopback_address(name)
