"""job.request: capture the retrieval snapshot, then record the job (or find the active one)."""

from __future__ import annotations

from typing import Any

from services.contract.base import Command
from services.contract.errors import ChronicleError
from services.contract.jobs import RecordJob, RequestJob
from services.ports.retriever import Retriever
from services.runtime.command_bus import CommandBus
from services.runtime.positions import ProjectionPositions

DEFAULT_CHUNKS = 8
MAX_CHUNKS = 50


def chunks_wanted(options: dict[str, Any]) -> int:
    wanted = options.get("chunks", DEFAULT_CHUNKS)
    if isinstance(wanted, bool) or not isinstance(wanted, int) or not 0 <= wanted <= MAX_CHUNKS:
        message = f"options.chunks must be a whole number from 0 to {MAX_CHUNKS}"
        raise ChronicleError("invalid", message, [{"field": "options.chunks", "rule": "range", "message": message}])
    return wanted


class Jobs:
    def __init__(self, bus: CommandBus, retriever: Retriever, positions: ProjectionPositions, wait_timeout: float):
        self.bus = bus
        self.retriever = retriever
        self.positions = positions
        self.wait_timeout = wait_timeout

    async def request(self, user: str, cmd: RequestJob, key: str | None) -> dict[str, Any]:
        # Where the caller's reads stand is not part of the request: a retry may be further on.
        request = cmd.model_copy(update={"min_position": None})

        async def capture() -> Command[Any]:
            limit = chunks_wanted(cmd.options)
            snapshot = []
            if limit:
                await self.positions.wait_for(self.retriever.reads, cmd.min_position, self.wait_timeout)
                snapshot = await self.retriever.capture(user, cmd.content, cmd.source_ids, limit)
            return RecordJob(**request.model_dump(), snapshot=snapshot)

        return await self.bus.execute_prepared(request, user, key, capture)
