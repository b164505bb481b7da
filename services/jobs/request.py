"""job.request: capture the retrieval snapshot, then record the job (or find the active one)."""

from __future__ import annotations

from typing import Any

from chronicle_contract.base import Command
from chronicle_contract.errors import ChronicleError
from chronicle_contract.jobs import OPTIONS, JobOptions, JobRequested, RecordJob, RequestJob
from chronicle_contract.values import Chunk as WireChunk
from pydantic import ValidationError

from services.ports.positions import Positions
from services.ports.retriever import Retriever
from services.runtime.command_bus import CommandBus
from services.runtime.replies import Wire


def checked_options(cmd: RequestJob) -> JobOptions:
    """The request's options as its artifact type knows them (seed 002's names), or
    `invalid` naming each option refused and its rule."""
    try:
        return OPTIONS[cmd.artifact_type].model_validate(cmd.options)
    except ValidationError as error:
        details = [
            {"field": "options." + ".".join(map(str, e["loc"])), "rule": e["type"], "message": e["msg"]}
            for e in error.errors(include_input=False, include_url=False)
        ]
        raise ChronicleError("invalid", "invalid request: " + ", ".join(d["field"] for d in details), details) from None


class JobRequests:
    def __init__(self, bus: CommandBus, retriever: Retriever, positions: Positions, wait_timeout: float):
        self.bus = bus
        self.retriever = retriever
        self.positions = positions
        self.wait_timeout = wait_timeout

    async def request(self, user: str, cmd: RequestJob, key: str | None) -> Wire[JobRequested]:
        options = checked_options(cmd)
        # Where the caller's reads stand is not part of the request: a retry may be further on.
        request = cmd.model_copy(update={"min_position": None})

        async def capture() -> Command[Any]:
            limit = options.chunks
            snapshot = []
            if limit:
                await self.positions.wait_for(self.retriever.reads, cmd.min_position, self.wait_timeout)
                snapshot = await self.retriever.capture(user, cmd.content, cmd.source_ids, limit)
            return RecordJob(**request.model_dump(), snapshot=[WireChunk.model_validate(c.model_dump()) for c in snapshot])

        return await self.bus.execute_prepared(request, user, key, capture)
