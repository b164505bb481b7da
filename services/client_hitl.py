"""The client's human-in-the-loop side: pause a run, answer it, wait for the answer.

Waiting uses a JetStream durable consumer named after the run, so an orchestrator that
was down when the person answered (or a new process with the same run id) still gets
the answer when it comes back, exactly once: the message is acked after it is handed over.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import nats.errors
import orjson
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from services import contract as c
from services.errors import ChronicleError

if TYPE_CHECKING:
    from services.client import ChronicleClient

CONSUMER_IDLE_SECONDS = 7 * 24 * 3600.0


class Expired(ChronicleError):
    """The checkpoint ran out of time before anyone answered it."""

    def __init__(self, run_id: str):
        super().__init__("conflict", f"run {run_id} expired before it was resumed")
        self.run_id = run_id


class RunHandle:
    """A paused run, as its orchestrator holds it."""

    def __init__(
        self, client: ChronicleClient, run_id: str, *, after_position: int = 0, paused: c.RunPaused | None = None
    ):
        self.client = client
        self.run_id = run_id
        self.paused = paused
        # Signals of earlier checkpoints of the same run are not the answer to this one.
        self.after_position = after_position

    async def wait_for_resume(self, timeout: float | None = None) -> c.ResumeSignal:
        """The person's answer (approval, edits, feedback, history); raises Expired or TimeoutError."""
        prefix = self.client.prefix
        js = self.client.nc.jetstream()
        # One wildcard filter rather than filter_subjects: NATS before 2.10 ignores the latter.
        subscription = await js.pull_subscribe(
            f"{prefix}.hitl.{self.run_id}.*",
            durable=f"hitl_{self.run_id}",
            stream=c.hitl_stream(prefix),
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.EXPLICIT,
                inactive_threshold=CONSUMER_IDLE_SECONDS,
            ),
        )
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while True:
                remaining = 30.0 if deadline is None else deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"no answer for run {self.run_id}")
                try:
                    [message] = await subscription.fetch(1, timeout=min(remaining, 30.0))
                except nats.errors.TimeoutError:
                    continue
                signal = orjson.loads(message.data)
                await message.ack()
                self.client.observed(signal["position"])
                if signal["event"] == "paused" or signal["position"] <= self.after_position:
                    continue
                if signal["event"] == "expired":
                    raise Expired(self.run_id)
                return c.ResumeSignal.model_validate(signal)
        finally:
            await subscription.unsubscribe()


class Hitl:
    def __init__(self, client: ChronicleClient):
        self._client = client

    async def pause(
        self, conversation_id: Any, *, step: str, prompt: str, idempotency_key: str | None = None, **fields: Any
    ) -> RunHandle:
        """Pause at a checkpoint; `fields`: run_id, checkpoint_type, data, conversation_mode,
        expires_in (seconds), history ({"mode": "all" | "last" | "recent", ...})."""
        paused = await self._client.command(
            "hitl.pause",
            self._client.build(c.PauseRun, conversation_id=conversation_id, step=step, prompt=prompt, **fields),
            c.RunPaused,
            idempotency_key,
        )
        return RunHandle(self._client, paused.run_id, after_position=(paused.position or 1) - 1, paused=paused)

    def run(self, run_id: str) -> RunHandle:
        """A handle for a run paused earlier, e.g. by this orchestrator before a restart."""
        return RunHandle(self._client, run_id)

    async def resume(
        self, run_id: str, *, approved: bool, idempotency_key: str | None = None, **fields: Any
    ) -> c.RunResumed:
        """Answer a paused run; `fields`: edits (dict), feedback (text)."""
        request = self._client.build(c.ResumeRun, run_id=run_id, approved=approved, **fields)
        return await self._client.command("hitl.resume", request, c.RunResumed, idempotency_key)

    async def get(self, run_id: str) -> c.RunStatus:
        return await self._client.query("hitl.get", self._client.build(c.GetRun, run_id=run_id), c.RunStatus)

    async def list(self, **fields: Any) -> c.Page[c.RunStatus]:
        return await self._client.query("hitl.list", self._client.build(c.ListRuns, **fields), c.Page[c.RunStatus])
