"""The gateways' CORS: a browser's cross-origin request gets CORSMiddleware's headers; a
request without an Origin passes it by, its response still varying by Origin; and the
name conversions every request makes, remembered only for short names."""

from __future__ import annotations

import uuid

from starlette.types import Message, Receive, Scope, Send

from entrypoints.gateways.casing import REMEMBERED_LENGTH, _snake, to_camel, to_snake
from entrypoints.gateways.cors import CorsForBrowsers


async def served(headers: list[tuple[bytes, bytes]], method: str = "GET") -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    scope = {"type": "http", "method": method, "path": "/api/conversations", "headers": headers}
    cors = CorsForBrowsers(app, allow_origins=["*"], allow_methods=["*"], allow_headers=["Authorization"],
                           expose_headers=["X-Chronicle-Position"])
    await cors(scope, receive, send)
    return sent


def header(message: Message, name: bytes) -> list[bytes]:
    return [value for key, value in message["headers"] if key.lower() == name]


async def test_a_request_without_an_origin_passes_by_and_its_answer_varies_by_origin() -> None:
    start, body = await served([(b"authorization", b"Bearer x")])
    assert start["status"] == 200 and body["body"] == b"{}"
    assert header(start, b"vary") == [b"Origin"]
    assert header(start, b"access-control-allow-origin") == []


async def test_a_browsers_request_gets_the_cors_headers() -> None:
    start, _ = await served([(b"origin", b"http://localhost:5173")])
    assert header(start, b"access-control-allow-origin") == [b"*"]
    assert header(start, b"access-control-expose-headers") == [b"X-Chronicle-Position"]


async def test_a_preflight_is_answered_by_the_middleware() -> None:
    (start, _) = await served([(b"origin", b"http://localhost:5173"), (b"access-control-request-method", b"POST")],
                              method="OPTIONS")
    assert start["status"] == 200
    assert b"POST" in header(start, b"access-control-allow-methods")[0]


def test_names_convert_both_ways_and_only_short_ones_are_remembered() -> None:
    assert to_snake("conversationId") == "conversation_id" and to_camel("conversation_id") == "conversationId"
    before = _snake.cache_info().currsize
    long_name = "a" * REMEMBERED_LENGTH + "B"
    assert to_snake(long_name) == "a" * REMEMBERED_LENGTH + "_b"
    assert _snake.cache_info().currsize == before  # a stranger's long key is not kept
    to_snake(f"fresh{uuid.uuid4().hex[:8]}Name")
    assert _snake.cache_info().currsize == before + 1
