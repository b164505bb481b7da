"""A coroutine the service runs beside its requests, started and cancelled with it."""

from __future__ import annotations

import asyncio
import contextlib


class Background:
    """Subclasses name themselves and implement `_run`, which loops until cancelled."""

    name = "background"

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        raise NotImplementedError
