"""The web console at the REST gateway's root: the built bundle (console_dist/, committed:
no Node.js at run time) under a strict Content-Security-Policy (nothing from another host,
no inline script), any other path outside /api answered with the app's page (its routes are
the browser's), and the console's own routes: the caller's HITL signals as SSE and the
loopback one-click sign-in. `with_console(app, sign_in)` adds them to build_app's app."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.console_manifest import DIST
from entrypoints.gateways.hitl_events import hitl_events
from entrypoints.gateways.local_sign_in import LocalSignIn
from entrypoints.gateways.rest import json_response

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY"}
IMMUTABLE = "public, max-age=31536000, immutable"  # (Vite names each asset by its content's hash)


def console_routes(clients: UserClients, sign_in: LocalSignIn) -> list[BaseRoute]:
    async def events(request: Request) -> Response:
        return await hitl_events(clients, request)

    return [
        Route("/api/hitl/events", events, methods=["GET"]),
        Route("/api/console/local-sign-in", sign_in.handle, methods=["POST"]),
        Route("/api/console/local-sign-in", local_available(sign_in), methods=["GET"]),
        PageRoute("/{path:path}", page, methods=["GET", "HEAD"]),
    ]


class PageRoute(Route):
    """Any path outside /api: an unknown /api path stays unmatched (the API's JSON 404, counted
    as `unmatched` by the request metrics), never the console's page."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path = scope.get("path", "")
        if path == "/api" or path.startswith("/api/"):
            return Match.NONE, {}
        return super().matches(scope)


def with_console(app: Starlette, clients: UserClients, sign_in: LocalSignIn) -> Starlette:
    """build_app's app, serving the console too (its routes after the API's: /api is untouched)."""
    app.router.routes.extend(console_routes(clients, sign_in))
    return app


def local_available(sign_in: LocalSignIn) -> Any:
    """`GET /api/console/local-sign-in`: whether this browser may use the one-click sign-in
    (the sign-in page shows the button only then); the POST checks everything again."""

    async def available(request: Request) -> Response:
        refusal = sign_in.refusal(request)
        available = refusal is None or refusal == "origin"  # (a GET carries no Origin)
        return json_response({"success": True, "available": available}, headers={"Cache-Control": "no-store"})

    return available


async def page(request: Request) -> Response:
    path = request.path_params["path"]
    index = DIST / "index.html"
    if not index.is_file():
        body = {"success": False, "error": {"code": "not_found", "details": [],
                                            "message": "the console is not built: run ./dev console-build"}}
        return json_response(body, 404)
    asset = (DIST / path).resolve()
    if path and asset.is_file() and asset.is_relative_to(DIST) and asset.name != "manifest.json":
        cache = IMMUTABLE if path.startswith("assets/") else "no-cache"
        return FileResponse(asset, headers={**HEADERS, "Cache-Control": cache})
    return FileResponse(index, media_type="text/html", headers={**HEADERS, "Cache-Control": "no-cache"})
