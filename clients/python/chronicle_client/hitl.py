"""The client's human-in-the-loop side: pause a run, answer it, wait for the answer.

The service keeps the answer: an orchestrator takes it with hitl.take, which hands it to
whoever asks first and records that it was taken, so it arrives exactly once, also at an
orchestrator that was down when the person answered, or at a new process with the same
run id. Waiting listens to the run's signals on the owner's own subjects (they carry no
content: only that something happened) and asks again when one comes, or every
POLL_SECONDS in case one was missed while the connection was away.

A signal is a hint, never trusted: whoever could publish on the owner's signal subjects
must not be able to spend the owner's request budget through the takes it prompts. The
first signal after a take prompts the next take at once (an answer arrives without
delay); while signal-prompted takes find nothing, each waits twice as long after the one
before (HINT_SECONDS, doubling up to POLL_SECONDS), the signals meanwhile counting as one.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import nats.errors
from chronicle_contract.base import Page
from chronicle_contract.bus import signals_prefix
from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import (
    AnswerTaken,
    GetRun,
    ListRuns,
    PauseRun,
    ResumeRun,
    ResumeSignal,
    RunPaused,
    RunResumed,
    RunStatus,
    TakeAnswer,
    run_signals,
)

if TYPE_CHECKING:
    from chronicle_client.transport import Transport

POLL_SECONDS = 10.0
HINT_SECONDS = 0.5  # the least time between two signal-prompted takes that found nothing
RETRY_SECONDS = 0.5  # between sends of a take whose reply did not come (the service was away)


class Expired(ChronicleError):
    """The checkpoint ran out of time before anyone answered it."""

    def __init__(self, run_id: str):
        super().__init__("conflict", f"run {run_id} expired before it was resumed")
        self.run_id = run_id


class RunHandle:
    """A paused run, as its orchestrator holds it."""

    def __init__(self, client: Transport, run_id: str, *, paused: RunPaused | None = None):
        self.client = client
        self.run_id = run_id
        self.paused = paused

    async def wait_for_resume(self, timeout: float | None = None) -> ResumeSignal:
        """The person's answer (approval, edits, feedback, history); raises Expired, or
        TimeoutError when none came in time (timeout 0: only an answer already given)."""
        client = self.client
        owner = client.user or ""
        signals = await client.nc.subscribe(f"{run_signals(signals_prefix(client.prefix, owner), self.run_id)}.*")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        gap = 0.0  # how long after the last take a signal's take waits
        try:
            while True:
                taken = await self._take(deadline)
                last = loop.time()
                if taken.status == "expired":
                    raise Expired(self.run_id)
                if taken.status == "resumed" and taken.answer is not None:
                    return taken.answer
                remaining = POLL_SECONDS if deadline is None else deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"no answer for run {self.run_id}")
                try:  # a signal, or time to ask again
                    await signals.next_msg(timeout=min(remaining, POLL_SECONDS))
                except nats.errors.TimeoutError:
                    gap = 0.0  # quiet for a poll's time: the next signal is taken at once again
                    continue
                wake = last + gap if deadline is None else min(last + gap, deadline)
                await asyncio.sleep(max(0.0, wake - loop.time()))
                while signals.pending_msgs:  # what came meanwhile is the same hint
                    await signals.next_msg(timeout=0.1)
                gap = min(max(HINT_SECONDS, gap * 2), POLL_SECONDS)
        finally:
            await signals.unsubscribe()

    async def _take(self, deadline: float | None) -> AnswerTaken:
        """hitl.take, sent again with the same Idempotency-Key until a reply comes: a take
        whose reply was lost (a NATS node or the instance died after its commit) recorded
        the answer as taken, and only its stored reply still holds that answer; a new key
        would hear `taken` and wait for ever. Each take that was answered gets a new key,
        or the next one would replay the first reply (`paused`) for ever."""
        loop = asyncio.get_running_loop()
        key = f"take-{uuid.uuid4().hex}"
        while True:
            try:
                return await Hitl(self.client).take(self.run_id, idempotency_key=key)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                pass
            except ChronicleError as error:
                if error.code != "unavailable":
                    raise
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"no answer for run {self.run_id}")
            await asyncio.sleep(RETRY_SECONDS)


class Hitl:
    def __init__(self, client: Transport):
        self._client = client

    async def pause(
        self, conversation_id: Any, *, step: str, prompt: str, idempotency_key: str | None = None, **fields: Any
    ) -> RunHandle:
        """Pause at a checkpoint; `fields`: run_id, checkpoint_type, data, conversation_mode,
        expires_in (seconds), history ({"mode": "all" | "last" | "recent", ...})."""
        paused = await self._client.command(self._client.build(PauseRun, conversation_id=conversation_id, step=step, prompt=prompt, **fields), idempotency_key)
        return RunHandle(self._client, paused.run_id, paused=paused)

    def run(self, run_id: str) -> RunHandle:
        """A handle for a run paused earlier, e.g. by this orchestrator before a restart."""
        return RunHandle(self._client, run_id)

    async def resume(
        self, run_id: str, *, approved: bool, idempotency_key: str | None = None, **fields: Any
    ) -> RunResumed:
        """Answer a paused run; `fields`: edits (dict), feedback (text)."""
        request = self._client.build(ResumeRun, run_id=run_id, approved=approved, **fields)
        return await self._client.command(request, idempotency_key)

    async def take(self, run_id: str, *, idempotency_key: str | None = None) -> AnswerTaken:
        """The answer to the run's current checkpoint if nobody took it yet (see RunHandle)."""
        taken = await self._client.command(self._client.build(TakeAnswer, run_id=run_id), idempotency_key)
        if taken.answer is not None:
            self._client.observed(taken.answer.position)
        return taken

    async def get(self, run_id: str) -> RunStatus:
        return await self._client.query(self._client.build(GetRun, run_id=run_id))

    async def list(self, **fields: Any) -> Page[RunStatus]:
        return await self._client.query(self._client.build(ListRuns, **fields))
