"""The API's routes answered in front of Starlette (entrypoints/gateways/direct_routes.py): the
same route as Starlette's router would pick for every path and method, everything else passed
on to it, and what is answered directly metered and varying by Origin as it was."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.direct_routes import DirectRoutes
from entrypoints.gateways.rest import build_app
from entrypoints.gateways.rest_routes import ROUTES, HttpRoute

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def paths() -> list[str]:
    """Each route's path with its parameters filled in (as an id, and as another route's word),
    and paths no route has."""
    words = ["4f2a", "search", "runs", "stats", "approve", "compare"]
    found = set()
    for route in ROUTES:
        parameters = route.path.count("{")
        for filling in itertools.product(words, repeat=parameters):
            path = route.path
            for word in filling:
                path = path[: path.index("{")] + word + path[path.index("}") + 1:]
            found.add(path)
    return sorted(found | {"/api/conversations/", "/api", "/api/nothing", "/", "/api/conversations/a/b/c/d"})


def by_starlette(scope: Scope) -> tuple[HttpRoute, dict[str, Any]] | None:
    """The route build_app's router serves the request with (its first full match, as
    Starlette's Router picks), or None when that is no API route or the endpoint's 405."""
    app = build_app(UserClients("nats://127.0.0.1:1", "unit"))
    api: dict[tuple[str, str], HttpRoute] = {(route.path, route.method): route for route in ROUTES}
    method = "GET" if scope["method"] == "HEAD" else scope["method"]
    for candidate in app.router.routes:
        if not isinstance(candidate, Route):
            continue
        match, child = candidate.matches(scope)
        if match is Match.FULL:
            route = api.get((candidate.path, method))
            fixed = {path for path, _ in api if "{" not in path}
            if route is None or (scope["path"] in fixed and "{" in route.path):
                return None
            return route, child["path_params"]
    return None


@pytest.mark.parametrize("path", paths())
def test_each_path_and_method_gets_the_route_starlette_would_give_it(path: str) -> None:
    direct = DirectRoutes(lambda *_: None, routes=ROUTES, handle=lambda *_: None)  # type: ignore[arg-type]
    for method in METHODS:
        scope = {"type": "http", "method": method, "path": path, "headers": [], "root_path": ""}
        assert direct.route_of(scope) == by_starlette(scope), (method, path)


class Recorded:
    def __init__(self) -> None:
        self.answers: list[tuple[str, str, int]] = []

    def answered(self, route: str, method: str, status: int, seconds: float) -> None:
        assert seconds >= 0
        self.answers.append((route, method, status))


async def call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]]) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": headers, "query_string": b"",
               "root_path": ""}, receive, send)
    return sent


async def test_a_route_is_answered_by_the_handler_metered_and_varying_by_origin() -> None:
    handled: list[tuple[str, dict[str, Any]]] = []
    passed: list[str] = []

    async def handle(route: HttpRoute, request: Request) -> Response:
        handled.append((route.path, dict(request.path_params)))
        return Response(b"{}", status_code=201, media_type="application/json")

    async def starlette(scope: Scope, receive: Receive, send: Send) -> None:
        passed.append(scope["path"])
        await Response(b"elsewhere", status_code=404)(scope, receive, send)

    metrics = Recorded()
    direct = DirectRoutes(starlette, routes=ROUTES, handle=handle, metrics=metrics)
    start, _ = await call(direct, "POST", "/api/conversations/c1/messages", [])
    assert start["status"] == 201 and (b"vary", b"Origin") in start["headers"]
    assert handled == [("/api/conversations/{conversationId}/messages", {"conversationId": "c1"})]
    assert metrics.answers == [("/api/conversations/{conversationId}/messages", "POST", 201)]
    # A browser's request (the CORS middleware's), a path no route has, a method the path lacks: passed on.
    await call(direct, "POST", "/api/conversations/c1/messages", [(b"origin", b"http://localhost:5173")])
    await call(direct, "GET", "/api/no/such/route", [])
    await call(direct, "PUT", "/api/conversations/search", [])
    assert passed == ["/api/conversations/c1/messages", "/api/no/such/route", "/api/conversations/search"]
    assert len(handled) == 1 and len(metrics.answers) == 1  # (the middleware behind meters those)


async def test_a_handler_that_fails_is_metered_as_500_and_the_failure_goes_on() -> None:
    async def handle(route: HttpRoute, request: Request) -> Response:
        raise RuntimeError("broken")

    metrics = Recorded()
    direct = DirectRoutes(lambda *_: None, routes=ROUTES, handle=handle, metrics=metrics)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):  # (Starlette's error middleware, outside, answers 500)
        await call(direct, "GET", "/api/conversations", [])
    assert metrics.answers == [("/api/conversations", "GET", 500)]
