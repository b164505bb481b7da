"""The console's loopback one-click sign-in refuses every request that could come from
elsewhere: each way in has its own refusal, and an accepted one gets a roleless token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import jwt
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from adapters.auth import TokenAuthority
from entrypoints.gateways.local_sign_in import LocalSignIn, loopback_host

SECRET = "console-sign-in-test-secret-of-enough-length"
ORIGIN = "http://127.0.0.1:8470"


def app_for(sign_in: LocalSignIn) -> Starlette:
    return Starlette(routes=[Route("/api/console/local-sign-in", sign_in.handle, methods=["POST"])])


Post = Callable[..., Awaitable[httpx.Response]]


def poster(sign_in: LocalSignIn, peer: str = "127.0.0.1") -> Post:
    async def post(headers: dict[str, str], content: bytes = b"") -> httpx.Response:
        transport = httpx.ASGITransport(app=app_for(sign_in), client=(peer, 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8470") as client:
            return await client.post("/api/console/local-sign-in", headers=headers, content=content)

    return post


SIGN_IN = LocalSignIn(TokenAuthority(secret=SECRET), "local", 600)
SAME_ORIGIN = {"Host": "127.0.0.1:8470", "Origin": ORIGIN}


async def test_a_loopback_browser_of_this_origin_gets_a_short_roleless_token() -> None:
    response = await poster(SIGN_IN)(SAME_ORIGIN)
    assert response.status_code == 200, response.text
    body = response.json()
    claims = jwt.decode(body["token"], SECRET, algorithms=["HS256"])
    assert claims["sub"] == body["userId"] == "local"
    assert "roles" not in claims
    assert claims["exp"] - claims["iat"] == 600
    assert response.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(("peer", "headers", "rule"), [
    ("10.0.0.7", SAME_ORIGIN, "loopback_peer"),  # another machine
    ("127.0.0.1", {"Host": "evil.example:8470", "Origin": "http://evil.example:8470"}, "loopback_host"),  # DNS rebinding
    ("127.0.0.1", {"Host": "127.0.0.1:8470"}, "origin"),  # no Origin: not a browser's same-origin POST
    ("127.0.0.1", {"Host": "127.0.0.1:8470", "Origin": "http://evil.example"}, "origin"),  # CSRF
    ("127.0.0.1", {"Host": "127.0.0.1:8470", "Origin": "http://localhost:8470"}, "origin"),  # another origin, even local
    ("127.0.0.1", {**SAME_ORIGIN, "X-Forwarded-For": "203.0.113.9"}, "forwarded"),  # a proxy on this machine
    ("127.0.0.1", {**SAME_ORIGIN, "Forwarded": "for=203.0.113.9"}, "forwarded"),
    ("127.0.0.1", {**SAME_ORIGIN, "X-Real-IP": "203.0.113.9"}, "forwarded"),
])
async def test_each_way_in_from_elsewhere_is_refused(peer: str, headers: dict[str, str], rule: str) -> None:
    response = await poster(SIGN_IN, peer)(headers)
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "unauthorized" and error["details"][0]["rule"] == rule
    assert "token" not in response.json()


async def test_off_unless_the_service_runs_on_the_embedded_default() -> None:
    response = await poster(LocalSignIn(None))(SAME_ORIGIN)
    assert response.status_code == 401 and response.json()["error"]["details"][0]["rule"] == "off"


async def test_a_request_for_a_role_or_another_user_is_refused() -> None:
    for body in (b'{"roles": ["auditor"]}', b'{"roles": ["admin"]}', b'{"user": "alice"}'):
        response = await poster(SIGN_IN)({**SAME_ORIGIN, "Content-Type": "application/json"}, body)
        assert response.status_code == 400
        assert response.json()["error"]["details"][0] == {
            "field": "body", "rule": "empty",
            "message": "local sign-in takes no fields: its user and (no) roles are the service's settings"}


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.0.0.1:8470", "localhost:1", "LOCALHOST", "[::1]:8470", "[::1]", "127.1.2.3"):
        assert loopback_host(host), host
    for host in ("", "evil.example", "127.0.0.1.evil.example", "localhost.evil", "[::1]x", "127.0.0.1:80x",
                 "0.0.0.0:8470", "[::ffff:10.0.0.1]", "192.168.1.2"):
        assert not loopback_host(host), host
