"""The REST API's routes answered straight from the ASGI call, in front of Starlette's router
and middleware: a gateway's CPU is its capacity, and those layers (exception handlers, the
router's walk over every route, a wrapped `send` each) were ~20% of a POST's (py-spy of
`./dev bench gateway`). What it does not serve exactly as they would, it passes on to them:
a browser's cross-origin request (it names its `Origin`: the CORS middleware answers it), a
path no API route matches, and a method the path lacks (405, with `Allow`)."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from entrypoints.gateways.request_metrics import RequestRecorder
from entrypoints.gateways.rest_routes import HttpRoute

Handle = Callable[[HttpRoute, Request], Awaitable[Response]]
VARY = (b"vary", b"Origin")  # (as CorsForBrowsers says it of every response to a request without Origin)


class DirectRoutes:
    """ASGI middleware: a request one of `routes` answers goes to `handle` (metered on
    `metrics`), any other to `app`. A path matches as Starlette's router matches it: the
    first route, in the API's order, whose template and method both fit."""

    def __init__(self, app: ASGIApp, *, routes: Iterable[HttpRoute], handle: Handle,
                 metrics: RequestRecorder | None = None):
        self.app = app
        self.handle = handle
        self.metrics = metrics
        by_path: dict[str, dict[str, HttpRoute]] = {}
        for route in routes:
            by_path.setdefault(route.path, {})[route.method] = route
        # The paths no template makes: one of them is never an id of a templated route
        # (`PUT /api/conversations/search` is search's path with a method it lacks).
        self.fixed = frozenset(path for path in by_path if "{" not in path)
        # Templates by their number of slashes: a path is tried against those that can fit it.
        self.templates: dict[int, list[tuple[re.Pattern[str], dict[str, HttpRoute]]]] = {}
        for path, methods in by_path.items():
            self.templates.setdefault(path.count("/"), []).append((compile_path(path)[0], methods))

    def route_of(self, scope: Scope) -> tuple[HttpRoute, dict[str, Any]] | None:
        """The route and path parameters serving this request, or None: not one to answer here."""
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        path: str = scope["path"]
        for template, methods in self.templates.get(path.count("/"), ()):
            matched = template.match(path)
            if matched is not None and method in methods:
                route = methods[method]
                if path in self.fixed and "{" in route.path:  # (the router's 405, with the path's methods)
                    return None
                return route, matched.groupdict()
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.route_of(scope) if scope["type"] == "http" else None
        if found is None or any(name == b"origin" for name, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return
        route, scope["path_params"] = found
        started, status, seconds = time.perf_counter(), 500, None
        try:
            response = await self.handle(route, Request(scope, receive))
            status, seconds = response.status_code, time.perf_counter() - started  # (as RequestMetrics times it)
            response.raw_headers.append(VARY)
            await response(scope, receive, send)
        finally:
            if self.metrics is not None:
                self.metrics.answered(route.path, scope["method"], status,
                                      seconds if seconds is not None else time.perf_counter() - started)
