"""A real local HTTP server speaking the chat-completions (and embeddings) protocol, replying from a script,
for adapter tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

HANG = (0, None)  # the scripted endpoint answers nothing (the client times out)


def completion(content: str, tokens: int) -> tuple[int, dict[str, Any]]:
    return 200, {
        "model": "scripted-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"total_tokens": tokens},
    }


@dataclass
class ScriptedEndpoint:
    """Replies in script order; the last reply repeats. Records (headers, body) of each request."""

    url: str = ""
    script: list[tuple[int, Any]] = field(default_factory=list)
    requests: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    def next_reply(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        self.requests.append((headers, body))
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


@pytest.fixture(name="endpoint")
def scripted_endpoint() -> Iterator[ScriptedEndpoint]:
    """Import this into a test module to get the `endpoint` fixture."""
    scripted = ScriptedEndpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, reply = scripted.next_reply({k.lower(): v for k, v in self.headers.items()}, body)
            if (status, reply) == HANG:
                time.sleep(0.5)
                return
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload if self.path in ("/v1/chat/completions", "/v1/embeddings") else b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    scripted.url = f"http://127.0.0.1:{server.server_address[1]}/v1/"
    yield scripted
    server.shutdown()
    server.server_close()
