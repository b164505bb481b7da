"""The client's job side: `client.jobs`, request a generation job and follow it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from services import contract as c
from services import contract_jobs as j

if TYPE_CHECKING:
    from services.client import ChronicleClient


class Jobs:
    def __init__(self, client: ChronicleClient):
        self._client = client

    async def request(
        self, content: str, artifact_type: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> j.JobRequested:
        """A new job, or (created False) the active one with the same fingerprint."""
        request = self._client.build(j.RequestJob, content=content, artifact_type=artifact_type, **fields)
        return await self._client.command("job.request", request, j.JobRequested, idempotency_key)

    async def get(self, job_id: UUID) -> j.Job:
        return await self._client.query("jobs.get", self._client.build(j.GetJob, job_id=job_id), j.Job)

    async def list(self, **fields: Any) -> c.Page[j.Job]:
        return await self._client.query("jobs.list", self._client.build(j.ListJobs, **fields), c.Page[j.Job])
