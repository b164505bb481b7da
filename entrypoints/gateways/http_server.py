"""Serving an ASGI app with uvicorn inside a running event loop: started beside the
service (`chronicle serve`) or alone (`chronicle http`, `chronicle mcp --http`), stopped
by its owner, never by uvicorn's own signal handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn

from entrypoints.gateways.http_guard import HttpLimits, guarded

SHUTDOWN_GRACE = 3  # seconds a stop lets responses in progress (streams too) finish before cancelling them


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the owner handles SIGINT and SIGTERM
        yield


class HttpServer:
    def __init__(self, app: Any, host: str, port: int, limits: HttpLimits | None = None):
        # Connections are bounded by the guarded protocol (http_guard.py), not by uvicorn's
        # limit_concurrency: that one counts idle and half-sent connections too, and past
        # it answered every request 503. A request's task lives on its connection, so
        # bounding connections bounds the requests in progress.
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="on",
                                timeout_keep_alive=30, http=guarded(limits or HttpLimits()),
                                timeout_graceful_shutdown=SHUTDOWN_GRACE,
                                proxy_headers=False, server_header=False)  # (nothing here reads either)
        self.server = EmbeddedServer(config)
        self.url = f"http://{host}:{port}"
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> HttpServer:
        self._task = asyncio.get_running_loop().create_task(self.server.serve())
        while not self.server.started:
            if self._task.done():  # uvicorn exits when it cannot listen (it has logged why)
                with contextlib.suppress(SystemExit):
                    self._task.result()
                raise RuntimeError(f"the HTTP server could not listen on {self.url}")
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self.server.should_exit = True
            await self._task
            self._task = None
