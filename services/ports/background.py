"""A coroutine the service runs beside its requests (a sweeper, a worker, a relay), started and cancelled with it."""

from __future__ import annotations

import asyncio
import contextlib

CANCEL_AGAIN = 1.0  # seconds


class Background:
    """Subclasses name themselves and implement `_run`, which loops until cancelled."""

    name = "background"

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the coroutine and wait for it to end, cancelling it again every
        CANCEL_AGAIN seconds: on Python 3.11, `asyncio.wait_for` (which a NATS fetch uses)
        loses a cancellation that arrives as its awaited result does (CPython gh-86296),
        and the coroutine's loop would go on, its stop waiting for ever."""
        if self.task is None:
            return
        while not self.task.done():
            self.task.cancel()
            await asyncio.wait([self.task], timeout=CANCEL_AGAIN)
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _run(self) -> None:
        raise NotImplementedError
