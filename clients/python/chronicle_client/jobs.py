"""The client's job side: `client.jobs`, request a generation job and follow it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from chronicle_contract.base import Page
from chronicle_contract.bus import signals_prefix
from chronicle_contract.jobs import GetJob, JobRequested, JobView, ListJobs, RequestJob, job_progress

if TYPE_CHECKING:
    from chronicle_client.transport import Transport


class Jobs:
    def __init__(self, client: Transport):
        self._client = client

    async def request(
        self, content: str, artifact_type: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> JobRequested:
        """A new job, or (created False) the active one with the same fingerprint. Its
        snapshot includes what this client wrote before (unless `min_position` says otherwise)."""
        fields.setdefault("min_position", self._client.last_position)
        request = self._client.build(RequestJob, content=content, artifact_type=artifact_type, **fields)
        return await self._client.command(request, idempotency_key)

    async def get(self, job_id: UUID) -> JobView:
        return await self._client.query(self._client.build(GetJob, job_id=job_id))

    async def list(self, **fields: Any) -> Page[JobView]:
        return await self._client.query(self._client.build(ListJobs, **fields))

    async def wait(
        self, job_id: UUID, *, timeout: float = 300.0, on_progress: Callable[[dict[str, Any]], None] | None = None
    ) -> JobView:
        """Follow the job's progress messages until it completes or fails; the job then
        (its result, or its error). `on_progress` sees each progress message.

        The job is also read again every LOOK_AGAIN seconds: a progress message goes out
        as its event commits, before the read model shows it, so the end may have been
        published just before this subscribed while the first read still showed the job
        running. TimeoutError once `timeout` passes."""
        ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def progressed(message: Any) -> None:
            update = orjson.loads(message.data)
            if on_progress is not None:
                on_progress(update)
            if update["status"] in ("completed", "failed") and not ended.done():
                ended.set_result(update["position"])

        # Subscribed before looking, so an end that comes in between is not missed.
        subject = job_progress(signals_prefix(self._client.prefix, self._client.user or ""), job_id)
        subscription = await self._client.nc.subscribe(subject, cb=progressed)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            job = await self.get(job_id)
            while job.status not in ("completed", "failed"):
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} did not end within {timeout} s")
                done, _ = await asyncio.wait([ended], timeout=min(left, LOOK_AGAIN))
                if done:
                    self._client.observed(ended.result())
                job = await self.get(job_id)
            return job
        finally:
            await subscription.unsubscribe()


LOOK_AGAIN = 1.0  # seconds between reads of a job that has not ended yet (see Jobs.wait)
