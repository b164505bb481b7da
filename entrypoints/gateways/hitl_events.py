"""The caller's own human-in-the-loop signals as Server-Sent Events (`GET /api/hitl/events`):
`event: ready` once listening, then `paused`, `resumed` and `expired` as each run's signal
comes (ids and the log position, no content: the console reads the checkpoint with
`GET /api/hitl/runs/{runId}?minPosition=`), and `resync` after a move to the user's next
connection, when signals may have been missed. The inbox reads its list after `ready`, so
no pause falls between the list and the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import ListRuns
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from entrypoints.gateways.casing import to_camel
from entrypoints.gateways.clients import UserClients, bearer_token, failure_of
from entrypoints.gateways.job_events import KEEP_ALIVE, MAX_STREAM, SignalFollower, sse
from entrypoints.gateways.rest import error_response
from entrypoints.gateways.rest_routes import Body

EVENTS = ("paused", "resumed", "expired")


class HitlFollower(SignalFollower):
    """Every run's signals of the stream's user (`<signals>.hitl.<run_id>.<event>`)."""

    def subject(self, signals: str) -> str:
        return f"{signals}.hitl.*.*"

    async def start(self) -> None:
        """Follow; a first query proves the token before the stream is answered 200."""
        await self._follow()
        assert self.lease is not None
        await self.lease.client.send_json(ListRuns(limit=1))


async def hitl_events(clients: UserClients, request: Request) -> Response:
    try:
        follower = HitlFollower(clients, bearer_token(request.headers.get("authorization")))
        try:
            await follower.start()
        except BaseException:
            await follower.stop()
            raise
    except Exception as error:
        return error_response(failure_of(error))
    return StreamingResponse(hitl_stream(follower), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def hitl_stream(follower: HitlFollower) -> AsyncIterator[bytes]:
    deadline = asyncio.get_running_loop().time() + MAX_STREAM
    try:
        yield sse("ready", {})
        while asyncio.get_running_loop().time() < deadline:
            try:
                got = await follower.next(KEEP_ALIVE)
            except ChronicleError:  # (moving failed: the token has expired; the console signs in again)
                return
            if got is None:
                yield b": keep-alive\n\n"
                continue
            kind, body = got
            if kind != "progress":
                yield sse("resync", {})
            elif body.get("event") in EVENTS:
                yield sse(body["event"], web_signal(body))
    finally:
        await follower.stop()


def web_signal(body: Body) -> Body:
    return {to_camel(key): value for key, value in body.items()}
