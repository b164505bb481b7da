"""TrialOutbox: the record_trial calls of one round that overlap in time go to the service
together, as one trial.record_many request, and each caller still gets its own stamped trial.

A trial waits for nothing: the call of a quiet round leaves on the next turn of the event
loop (a lone trial as a plain trial.record). Calls made while REQUESTS_IN_FLIGHT requests
are out (a population evaluated concurrently) queue and leave together as soon as one
comes back, so a busy optimizer pays one round trip and one group commit for many trials
instead of one each. The service numbers a request's trials in order; overlapping calls
had no order to keep.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from chronicle_contract.errors import ChronicleError
from chronicle_contract.optimizations import MAX_TRIALS_PER_REQUEST, RecordTrial, RecordTrials, TrialRecorded

if TYPE_CHECKING:
    from chronicle_client.transport import Transport

REQUESTS_IN_FLIGHT = 2  # per round: one request is committed while the next one is decided
# Refusals that come before anything is written: a shared request refused so is sent again
# trial by trial, so that only the trial at fault fails. Any other failure (a timeout, an
# unavailable database) may have been committed and is given to every caller as it is.
REFUSED_UNWRITTEN = {"invalid", "conflict", "not_found", "unauthorized", "rate_limited"}


@dataclass
class WaitingTrial:
    fields: dict[str, Any]  # validated, in wire form
    size: int  # bytes of its JSON
    reply: asyncio.Future[TrialRecorded]


class TrialOutbox:
    def __init__(self, client: Transport, round_id: UUID):
        self._client = client
        self._round_id = str(round_id)
        # A request carries at most 3/4 of what the NATS server accepts: the rest is room
        # for the envelope and headers.
        self._max_bytes = client.nc.max_payload * 3 // 4
        self._waiting: deque[WaitingTrial] = deque()
        self._senders: set[asyncio.Task[None]] = set()
        self._active = 0

    async def record(self, fields: dict[str, Any]) -> TrialRecorded:
        """Send these trial fields (validated, in wire form) and return the stamped trial."""
        reply: asyncio.Future[TrialRecorded] = asyncio.get_running_loop().create_future()
        self._waiting.append(WaitingTrial(fields, len(orjson.dumps(fields)), reply))
        if self._active < REQUESTS_IN_FLIGHT:
            self._active += 1  # counted now, not when it starts: the next call must see it
            sender = asyncio.create_task(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await reply

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch = self._take()
                if batch:
                    await self._deliver(batch)
        finally:
            self._active -= 1  # before the loop turns: a call that finds the queue idle starts a sender

    def _take(self) -> list[WaitingTrial]:
        """The oldest waiting trials that fit one request (at least one); those whose
        caller has given up stay unsent."""
        batch: list[WaitingTrial] = []
        size = 0
        while self._waiting and len(batch) < MAX_TRIALS_PER_REQUEST:
            waiting = self._waiting[0]
            if batch and size + waiting.size > self._max_bytes:
                break
            self._waiting.popleft()
            if not waiting.reply.done():
                batch.append(waiting)
                size += waiting.size
        return batch

    async def _deliver(self, batch: list[WaitingTrial]) -> None:
        try:
            if len(batch) == 1:
                payload = {"round_id": self._round_id, **batch[0].fields}
                replies = [await self._client.command_payload(RecordTrial, payload)]
            else:
                payload = {"round_id": self._round_id, "trials": [waiting.fields for waiting in batch]}
                replies = (await self._client.command_payload(RecordTrials, payload)).trials
        except ChronicleError as error:
            if len(batch) > 1 and error.code in REFUSED_UNWRITTEN:
                await asyncio.gather(*(self._deliver([waiting]) for waiting in batch))
            else:
                fail(batch, error)
            return
        except asyncio.CancelledError:  # the loop is shutting down
            for waiting in batch:
                waiting.reply.cancel()
            raise
        except Exception as error:  # a timeout, a lost connection: every caller hears of it
            fail(batch, error)
            return
        for waiting, recorded in zip(batch, replies, strict=True):
            if not waiting.reply.done():
                waiting.reply.set_result(recorded)


def fail(batch: list[WaitingTrial], error: Exception) -> None:
    for waiting in batch:
        if not waiting.reply.done():
            waiting.reply.set_exception(error)
