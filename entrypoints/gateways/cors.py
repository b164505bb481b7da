"""CORS for the gateways: Starlette's CORSMiddleware for the requests a browser sends across
origins, which name their `Origin`; every other request (a backend's, an agent's) passes it
by, so it does not pay for the middleware's parse of every header and its wrapped `send`.
Such a response still says `Vary: Origin`, as the middleware would: a cache must not hand it
to a browser's cross-origin request."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

VARY = (b"vary", b"Origin")


class CorsForBrowsers:
    def __init__(self, app: ASGIApp, *, allow_origins: Sequence[str], allow_methods: Sequence[str],
                 allow_headers: Sequence[str], expose_headers: Sequence[str]):
        self.app = app
        self.cors = CORSMiddleware(app, allow_origins=allow_origins, allow_methods=allow_methods,
                                   allow_headers=allow_headers, expose_headers=expose_headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or any(name == b"origin" for name, _ in scope["headers"]):
            await self.cors(scope, receive, send)
            return

        async def varied(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), VARY]
            await send(message)

        await self.app(scope, receive, varied)
