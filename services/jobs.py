"""job.request: capture the retrieval snapshot, then record the job (or find the active one)."""

from __future__ import annotations

from typing import Any

from services import contract_jobs as j
from services.command_bus import CommandBus
from services.errors import ChronicleError
from services.positions import ProjectionPositions
from services.retriever import RETRIEVED_FROM, Retriever

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

    async def request(self, user: str, cmd: j.RequestJob, key: str | None) -> dict[str, Any]:
        # Where the caller's reads stand is not part of the request: a retry may be further on.
        request = cmd.model_copy(update={"min_position": None})

        async def capture() -> tuple[str, j.Command]:
            limit = chunks_wanted(cmd.options)
            snapshot = []
            if limit:
                await self.positions.wait_for(RETRIEVED_FROM, cmd.min_position, self.wait_timeout)
                snapshot = await self.retriever.capture(user, cmd.content, cmd.source_ids, limit)
            return "job.record", j.RecordJob(**request.model_dump(), snapshot=snapshot)

        return await self.bus.execute_prepared("job.request", request, user, key, capture)
