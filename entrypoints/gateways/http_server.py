"""Serving an ASGI app with uvicorn inside a running event loop: started beside the
service (`chronicle serve`) or alone (`chronicle http`, `chronicle mcp --http`), stopped
by its owner, never by uvicorn's own signal handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_CONNECTIONS = 1024
MAX_HEAD = 256 * 1024  # bytes of a request line and headers


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request line and headers pass
    MAX_HEAD bytes: the parser sets no bound, and a 150 MB header sent in 1 MB pieces kept
    a core busy joining them. (Counted after each read is parsed; a read that also ends an
    earlier pipelined request may count a little of its body.)"""

    in_head = True  # between a request's start (or the connection's) and the end of its headers
    head_bytes = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.in_head:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD and not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                     b"content-length: 0\r\nconnection: close\r\n\r\n")
                self.transport.close()

    def on_message_begin(self) -> None:
        self.in_head, self.head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self.in_head = False
        super().on_headers_complete()


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the owner handles SIGINT and SIGTERM
        yield


class HttpServer:
    def __init__(self, app: Any, host: str, port: int):
        # At most MAX_CONNECTIONS connections and requests at once (past it, 503 at once), so
        # idle or slow connections cannot use up the process's file descriptors.
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="on",
                                timeout_keep_alive=30, limit_concurrency=MAX_CONNECTIONS, http=BoundedHttpTools,
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
