"""ASGI middleware counting a gateway's requests by route template, method and status."""

from __future__ import annotations

import time
from typing import Any, Protocol

ASGIApp = Any


class RequestRecorder(Protocol):
    """Where the figures go (adapters/metrics.py GatewayMetrics; the composition root picks it)."""

    def answered(self, route: str, method: str, status: int, seconds: float) -> None: ...


class RequestMetrics:
    """Wraps an ASGI app; the route is the matched route's path template (`/api/conversations/{id}`),
    never the path itself, so ids and probes for random paths add no label values."""

    def __init__(self, app: ASGIApp, metrics: RequestRecorder):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        answered_at: float | None = None

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status, answered_at
            if message["type"] == "http.response.start":
                status, answered_at = int(message["status"]), time.perf_counter()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.answered(route, scope.get("method", ""), status, (answered_at or time.perf_counter()) - started)
