"""The HTTP/1.1 protocol the gateways serve with: uvicorn's, with the bounds its parser and
server lack, so that sockets which never finish a request cannot take the gateway's place
from clients that do.

uvicorn closes a connection only when it is idle between requests (`timeout_keep_alive`);
once a request's first byte has come, it waits for the rest of the head and the body for
ever, and its `limit_concurrency` counts every open connection, so 1,100 sockets that
sent half a request made every other request answer 503. Here each connection must
complete its request line and headers within `header_timeout` seconds of its opening (or
of its next request's first byte) and its body within `body_timeout` of its headers; at
most `max_per_address` connections come from one client address; and when the gateway
holds `max_connections`, a new one takes the place of the connection that has waited
longest without a request in progress (half-sent heads and idle keep-alives), so a
client that completes its request is always served."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
TOO_BIG = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
TOO_MANY = b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
FULL = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


@dataclass(frozen=True)
class HttpLimits:
    """What one gateway's HTTP server allows a connection (the CHRONICLE_HTTP_* settings)."""

    header_timeout: float = 5.0  # seconds for a request line and headers to arrive
    body_timeout: float = 10.0  # seconds for a body to arrive once its headers have
    max_connections: int = 1024  # connections open at once
    max_per_address: int = 128  # connections from one client address at once; 0: no cap (behind a proxy)
    max_head: int = 256 * 1024  # bytes of a request line and headers


class Door:
    """One server's count of its connections, in the order they began waiting."""

    def __init__(self, limits: HttpLimits):
        self.limits = limits
        self.open: set[GuardedHttp] = set()
        self.per_address: Counter[str] = Counter()

    def admit(self, connection: GuardedHttp) -> bytes | None:
        """None when the connection may stay, else the answer it is closed with."""
        limits = self.limits
        if limits.max_per_address and self.per_address[connection.address] >= limits.max_per_address:
            return TOO_MANY
        if len(self.open) >= limits.max_connections:
            waiting = [c for c in self.open if c.waiting_since is not None]
            if not waiting:  # every connection has a request in progress: the new one waits its turn elsewhere
                return FULL
            oldest = min(waiting, key=lambda c: c.waiting_since or 0.0)
            self.leave(oldest)
            oldest.close(TIMED_OUT if oldest.in_head else None)  # (an idle keep-alive just closes)
        self.open.add(connection)
        self.per_address[connection.address] += 1
        return None

    def leave(self, connection: GuardedHttp) -> None:
        if connection in self.open:
            self.open.discard(connection)
            self.per_address[connection.address] -= 1
            if not self.per_address[connection.address]:
                del self.per_address[connection.address]


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines, caps and head bound above; each
    server serves a subclass of its own naming its Door (`guarded(limits)`)."""

    door: ClassVar[Door]
    address = ""
    waiting_since: float | None = None  # since when no request has been in progress (None: one is)
    in_head = False  # between a request's first byte (or the connection's opening) and its headers' end
    head_bytes = 0
    deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.address = self.client[0] if self.client else ""
        self.waiting_since, self.in_head = self.loop.time(), True
        refused = self.door.admit(self)
        if refused is not None:
            self.close(refused)
            return
        self._expect(self.door.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.door.leave(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.in_head:
            # The parser sets no bound: a 150 MB header sent in 1 MB pieces kept a core busy
            # joining them. (Counted after each read is parsed; a read that also ends an
            # earlier pipelined request may count a little of its body.)
            self.head_bytes += len(data)
            if self.head_bytes > self.door.limits.max_head:
                self.close(TOO_BIG)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head, self.head_bytes = True, 0
        if self.deadline is None:  # (a keep-alive connection's next request: its head has a deadline too)
            self._expect(self.door.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.waiting_since = None
        self._cancel()
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.transport is self.transport:  # (its task has not run yet)
            self.cycle.transport = OneWrite(self.transport, self.loop)  # type: ignore[assignment]
        if not self.pipeline:  # (a queued request's body is not read until its turn)
            self._expect(self.door.limits.body_timeout)

    def on_message_complete(self) -> None:
        self._cancel()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline:
            self.waiting_since = self.loop.time()

    def close(self, answer: bytes | None) -> None:
        """Close the connection, answering first when given and no response of its own has begun."""
        if self.transport.is_closing():
            return
        if answer is not None and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(answer)
        self.transport.close()

    def _expect(self, seconds: float) -> None:
        self._cancel()
        self.deadline = self.loop.call_later(seconds, self._timed_out)

    def _cancel(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _timed_out(self) -> None:
        self.deadline = None
        log.debug("request not completed in time: connection closed", extra={"in_head": self.in_head})
        self.close(TIMED_OUT)


class OneWrite:
    """The socket as a response's cycle sees it: uvicorn writes a response's status line and
    headers, then its body, each with a send of its own (two sends and two wake-ups of the
    client for every reply). Here the head waits for the body's first part and goes out with
    it in one send; a head whose body does not follow at once goes out on the loop's next turn."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self.transport = transport
        self.loop = loop
        self.first = True  # only the first write (the head) is held
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self.first:
            self.first = False
            self.held = data
            self.loop.call_soon(self.flush)
            return
        if self.held is not None:
            data, self.held = self.held + data, None
        self.transport.write(data)

    def flush(self) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            if not self.transport.is_closing():
                self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, and anything a later uvicorn asks of the transport
        return getattr(self.transport, name)


def guarded(limits: HttpLimits) -> type[GuardedHttp]:
    """The protocol class for one server: its connections share one Door."""
    return type("GuardedHttp", (GuardedHttp,), {"door": Door(limits)})
