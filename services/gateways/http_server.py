"""Serving an ASGI app with uvicorn inside a running event loop: started beside the
service (`chronicle serve`) or alone (`chronicle http`, `chronicle mcp --http`), stopped
by its owner, never by uvicorn's own signal handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn

MAX_CONNECTIONS = 1024


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the owner handles SIGINT and SIGTERM
        yield


class HttpServer:
    def __init__(self, app: Any, host: str, port: int):
        # At most MAX_CONNECTIONS connections and requests at once (past it, 503 at once), so
        # idle or slow connections cannot use up the process's file descriptors.
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="on",
                                timeout_keep_alive=30, limit_concurrency=MAX_CONNECTIONS)
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
