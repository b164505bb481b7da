"""A job's events as Server-Sent Events: its state now, each progress message as it comes,
its final state; carried over to the user's next NATS connection when the one under the
stream is replaced by a later token's or lost, for as long as the stream's own token is valid."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.bus import signals_prefix
from chronicle_contract.errors import ChronicleError
from chronicle_contract.jobs import GetJob, job_progress

from entrypoints.gateways.casing import casing, to_camel
from entrypoints.gateways.clients import Lease, UserClients
from entrypoints.gateways.rest_routes import Body

ENDED = ("completed", "failed")
KEEP_ALIVE = 15.0  # seconds between comments on a quiet stream, each after a fresh look at the job
MAX_STREAM = 3600.0  # seconds a stream lasts at most; a browser's EventSource reconnects


class SignalFollower:
    """Messages on one of the user's signal subjects (core NATS) over a lease of the stream's
    token; `next()` gives each, or notice of a move to the user's next connection."""

    def __init__(self, clients: UserClients, token: str) -> None:
        self.clients = clients
        self.token = token
        self.updates: asyncio.Queue[Body] = asyncio.Queue(maxsize=100)
        self.lease: Lease | None = None
        self.subscription: Any = None

    def subject(self, signals: str) -> str:
        """What this follower listens to under the user's signal subjects."""
        raise NotImplementedError

    async def moved(self) -> Body:
        """What the stream needs to know again after a move (progress may have been missed)."""
        return {}

    async def next(self, timeout: float) -> tuple[str, Body] | None:
        """("progress", message), or ("job", what `moved()` reads) after a move to another
        connection (messages may have been missed meanwhile), or None when nothing came in `timeout`."""
        assert self.lease is not None
        update = asyncio.ensure_future(self.updates.get())
        moved = asyncio.ensure_future(self.lease.moved.wait())
        try:
            await asyncio.wait((update, moved), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            moved.cancel()
            if not update.done():
                update.cancel()
        if update.done() and not update.cancelled():
            return "progress", update.result()
        if self.lease.moved.is_set():
            await self.stop()
            await self._follow()  # (refused once the stream's own token has expired: the stream ends)
            return "job", await self.moved()
        return None

    async def _follow(self) -> None:
        self.lease = await self.clients.lease(self.token)
        client = self.lease.client
        subject = self.subject(signals_prefix(client.prefix, client.user or ""))
        try:
            self.subscription = await client.nc.subscribe(subject, cb=self._progressed)
        except BaseException:
            await self.stop()
            raise

    async def _progressed(self, message: Any) -> None:
        with contextlib.suppress(asyncio.QueueFull, orjson.JSONDecodeError):
            self.updates.put_nowait(orjson.loads(message.data))

    async def stop(self) -> None:
        subscription, self.subscription = self.subscription, None
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()
        if subscription is not None:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()


class JobFollower(SignalFollower):
    """One job's progress messages; after a move, the job's state."""

    def __init__(self, clients: UserClients, token: str, job_id: UUID) -> None:
        super().__init__(clients, token)
        self.job_id = job_id

    def subject(self, signals: str) -> str:
        return job_progress(signals, self.job_id)

    async def start(self) -> Body:
        """Follow the job; its state now (ChronicleError as the service answers)."""
        await self._follow()
        return await self.job()

    async def job(self) -> Body:
        assert self.lease is not None
        state: Body = await self.lease.client.send_json(GetJob(job_id=self.job_id))
        return state

    async def moved(self) -> Body:
        return await self.job()


async def job_stream(follower: JobFollower, first: Body) -> AsyncIterator[bytes]:
    """The events of one job: progress as it comes; on a quiet stream a look at the job
    itself (a progress message is core NATS and may be lost), so it always ends."""
    web = casing(GetJob.reply).web
    deadline = asyncio.get_running_loop().time() + MAX_STREAM
    try:
        yield sse("job", web(first))
        if first["status"] in ENDED:
            return
        while asyncio.get_running_loop().time() < deadline:
            try:
                got = await follower.next(KEEP_ALIVE)
            except ChronicleError:  # (moving failed: the stream's own token has expired, or the bus is gone)
                return  # (an EventSource reconnects)
            if got is None:
                now = await follower.job()
                if now["status"] in ENDED:
                    yield sse("job", web(now))
                    return
                yield b": keep-alive\n\n"
                continue
            kind, body = got
            if kind == "job":  # (moved to another connection: what it missed meanwhile, if it ended)
                if body["status"] in ENDED:
                    yield sse("job", web(body))
                    return
                continue
            yield sse("progress", {to_camel(k): v for k, v in body.items()})
            if body.get("status") in ENDED:
                assert follower.lease is not None
                follower.lease.client.observed(body.get("position"))
                yield sse("job", web(await follower.job()))
                return
    finally:
        await follower.stop()


def sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
