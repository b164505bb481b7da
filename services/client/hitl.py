"""The client's human-in-the-loop side: pause a run, answer it, wait for the answer.

An answer (a run's resumed or expired signal) is kept in the HITL JetStream stream for a
week, so an orchestrator that was down when the person answered, or a new process with
the same run id, still gets it when it comes back. It gets it exactly once: taking an
answer is a compare-and-set of the run's key in the taken-answers bucket (the position
of the last answer taken), and a later wait looks only past that position.

Waiting uses a durable consumer named after the run that starts at the stream's end, plus
a direct get of the run's last resumed and expired signals for what came before it. A
consumer that replays the stream from its start would cost NATS a scan of every signal in
it, and one kept per run would cost it work on every signal after; this one is deleted
once the answer is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import nats.errors
import orjson
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from services.contract.base import Page
from services.contract.errors import ChronicleError
from services.contract.hitl import (
    GetRun,
    ListRuns,
    PauseRun,
    ResumeRun,
    ResumeSignal,
    RunPaused,
    RunResumed,
    RunStatus,
    hitl_stream,
    hitl_taken_bucket,
)

if TYPE_CHECKING:
    from services.client.connection import ChronicleClient

# A waiter that vanished leaves its consumer behind this long; it holds nothing the
# stream and the bucket do not.
CONSUMER_IDLE_SECONDS = 600.0
ANSWERS = ("resumed", "expired")


class Expired(ChronicleError):
    """The checkpoint ran out of time before anyone answered it."""

    def __init__(self, run_id: str):
        super().__init__("conflict", f"run {run_id} expired before it was resumed")
        self.run_id = run_id


class RunHandle:
    """A paused run, as its orchestrator holds it."""

    def __init__(
        self, client: ChronicleClient, run_id: str, *, after_position: int = 0, paused: RunPaused | None = None
    ):
        self.client = client
        self.run_id = run_id
        self.paused = paused
        # Signals of earlier checkpoints of the same run are not the answer to this one.
        self.after_position = after_position

    async def wait_for_resume(self, timeout: float | None = None) -> ResumeSignal:
        """The person's answer (approval, edits, feedback, history); raises Expired or TimeoutError."""
        prefix = self.client.prefix
        js = self.client.nc.jetstream()
        taken = TakenMark(await self.client.hitl.answers_taken(), self.run_id)
        stream, durable = hitl_stream(prefix), f"hitl_{self.run_id}"
        subscription = await self._consumer_from_now(js, stream, durable)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            # What was answered before the consumer started, then what it delivers.
            signals, _ = await asyncio.gather(self._last_signals(js, stream), taken.read())
            while True:
                for signal in sorted(signals, key=lambda s: s["position"]):
                    self.client.observed(signal["position"])
                    if signal["event"] not in ANSWERS or signal["position"] <= self.after_position:
                        continue
                    if await taken.take(signal["position"]):
                        with contextlib.suppress(NotFoundError):
                            await js.delete_consumer(stream, durable)
                        if signal["event"] == "expired":
                            raise Expired(self.run_id)
                        return ResumeSignal.model_validate(signal)
                remaining = 30.0 if deadline is None else deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"no answer for run {self.run_id}")
                try:
                    [message] = await subscription.fetch(1, timeout=min(remaining, 30.0))
                except nats.errors.TimeoutError:
                    signals = []
                    continue
                await message.ack()
                signals = [orjson.loads(message.data)]
        finally:
            await subscription.unsubscribe()

    async def _consumer_from_now(self, js: Any, stream: str, durable: str) -> Any:
        """The run's durable pull consumer, delivering what the stream gets from now on."""
        config = ConsumerConfig(
            name=durable,
            durable_name=durable,
            # One wildcard filter rather than filter_subjects: NATS before 2.10 ignores the latter.
            filter_subject=f"{self.client.prefix}.hitl.{self.run_id}.*",
            deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT,
            inactive_threshold=CONSUMER_IDLE_SECONDS,
            mem_storage=True,
        )
        try:
            await js.add_consumer(stream, config)  # the same config again: the same consumer
        except APIError:  # one of another shape (an older client's): replace it
            await js.delete_consumer(stream, durable)
            await js.add_consumer(stream, config)
        return await js.pull_subscribe_bind(durable=durable, stream=stream)

    async def _last_signals(self, js: Any, stream: str) -> list[dict[str, Any]]:
        """The run's last signal of each kind in the stream. An answer older than the
        last pause answered an earlier checkpoint: it is not waited for any more."""

        async def last(event: str) -> dict[str, Any] | None:
            subject = f"{self.client.prefix}.hitl.{self.run_id}.{event}"
            try:
                return orjson.loads((await js.get_last_msg(stream, subject, direct=True)).data)
            except NotFoundError:
                return None

        found = [s for s in await asyncio.gather(*(last(event) for event in ("paused", *ANSWERS))) if s]
        for signal in found:
            if signal["event"] == "paused":
                self.after_position = max(self.after_position, signal["position"])
        return found


class TakenMark:
    """A run's key in the taken-answers bucket: the position of the last answer taken."""

    def __init__(self, bucket: KeyValue, run_id: str):
        self.bucket = bucket
        self.run_id = run_id
        self.position = 0
        self.revision = 0  # of the key as last read; 0: no key

    async def read(self) -> None:
        try:
            entry = await self.bucket.get(self.run_id)
        except KeyNotFoundError:
            self.position, self.revision = 0, 0
        else:
            self.position, self.revision = int(entry.value or b"0"), entry.revision or 0

    async def take(self, position: int) -> bool:
        """Note the answer at `position` as taken, unless it or a later one was (by anyone)."""
        while position > self.position:
            try:
                self.revision = await self.bucket.update(self.run_id, str(position).encode(), last=self.revision)
            except KeyWrongLastSequenceError:
                await self.read()  # another waiter took one meanwhile: look again
            else:
                self.position = position
                return True
        return False


class Hitl:
    def __init__(self, client: ChronicleClient):
        self._client = client
        self._taken: KeyValue | None = None

    async def answers_taken(self) -> KeyValue:
        """The bucket noting the answers orchestrators took (looked up once)."""
        if self._taken is None:
            self._taken = await self._client.nc.jetstream().key_value(hitl_taken_bucket(self._client.prefix))
        return self._taken

    async def pause(
        self, conversation_id: Any, *, step: str, prompt: str, idempotency_key: str | None = None, **fields: Any
    ) -> RunHandle:
        """Pause at a checkpoint; `fields`: run_id, checkpoint_type, data, conversation_mode,
        expires_in (seconds), history ({"mode": "all" | "last" | "recent", ...})."""
        paused = await self._client.command(self._client.build(PauseRun, conversation_id=conversation_id, step=step, prompt=prompt, **fields), idempotency_key)
        return RunHandle(self._client, paused.run_id, after_position=(paused.position or 1) - 1, paused=paused)

    def run(self, run_id: str) -> RunHandle:
        """A handle for a run paused earlier, e.g. by this orchestrator before a restart."""
        return RunHandle(self._client, run_id)

    async def resume(
        self, run_id: str, *, approved: bool, idempotency_key: str | None = None, **fields: Any
    ) -> RunResumed:
        """Answer a paused run; `fields`: edits (dict), feedback (text)."""
        request = self._client.build(ResumeRun, run_id=run_id, approved=approved, **fields)
        return await self._client.command(request, idempotency_key)

    async def get(self, run_id: str) -> RunStatus:
        return await self._client.query(self._client.build(GetRun, run_id=run_id))

    async def list(self, **fields: Any) -> Page[RunStatus]:
        return await self._client.query(self._client.build(ListRuns, **fields))
