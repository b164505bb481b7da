"""Job workers and the job relay: the JetStream side of the three-phase pipeline.

The relay (with the command bus's fast path, adapters/read_side/relay.py) turns committed Job
events into messages: a requested job goes on the work
queue `<prefix>.jobs.work` (once: its message id is the job id), and every progress
change is published on the job owner's own subject (clients/python/chronicle_contract/jobs.py
job_progress), which only the owner's connections may read. Workers share one durable
pull consumer of the work queue, so each job is with one worker at a time. A worker runs
the job's next phase, records it, tells JetStream it is still at work, and goes on until
the job ends; a worker that dies stops doing that, the message comes back after the ack
deadline, and whoever gets it resumes from the last recorded phase (recording that it
took the phase over).

A worker takes only the service's own messages: each carries an HMAC of its body under a
key of the service's (`JobOrders`), and one without a valid one (whoever managed to put it
on the queue) is terminated and counted, never retried. An earlier version's message, left
on the queue across an upgrade (unsigned, its message id naming its job), is believed only
as far as the log agrees: its job must exist and be its owner's, else it is refused too. A message whose job keeps failing
for a passing reason is given again at most MAX_DELIVER times, then terminated with a log
line: nothing is retried for ever.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
import uuid
from typing import Any
from uuid import UUID

import nats.errors
import orjson
from chronicle_contract.bus import signals_prefix
from chronicle_contract.errors import ChronicleError
from chronicle_contract.jobs import DescribeJob, FailJob, RecordOutcomes, StartPhase, job_progress
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from domain.job import Chunk, Job
from services.ports.agent import Agent, AgentFailed, JobSpec
from services.ports.background import Background
from services.ports.relays import Relay
from services.ports.streams import Streams
from services.runtime.command_bus import CommandBus

log = logging.getLogger(__name__)

JOB_EVENTS = (Job.Requested, Job.PhaseStarted, Job.PlanStored, Job.Generated, Job.RetryQueued, Job.Validated,
              Job.Completed, Job.Failed)
CONSUMER = "workers"
MAX_DELIVER = 200  # deliveries of one job message: a Postgres outage of minutes is waited out, no more
SIGNATURE = "Chronicle-Signature"
RECORD_WITHIN = 0.05  # seconds: outcomes reached within this of the first unrecorded one share its commit
OUTCOME_OF = {"planning": "plan", "generating": "result", "validating": "problems"}
NEXT_PHASE = {"planning": "generating", "generating": "validating", "validating": None}


def streams(prefix: str) -> tuple[str, str]:
    """The work queue stream, and the stream that once kept every job's progress (stream
    names allow no dots)."""
    base = prefix.replace(".", "_").upper()
    return base + "_JOBS", base + "_JOB_PROGRESS"


async def ensure_job_streams(jetstream: Streams, prefix: str, ack_wait: float) -> None:
    work, progress = streams(prefix)
    # A work queue holds a job until a worker acks it; its message ids (the job ids) are
    # remembered for an hour, so a relay publishing again adds no second copy.
    await jetstream.ensure_work_queue(
        work, [f"{prefix}.jobs.work"], consumer=CONSUMER, ack_wait=ack_wait, duplicate_window=3600.0,
        max_deliver=MAX_DELIVER,
    )
    # Progress goes to each owner's own subject now, kept nowhere.
    await jetstream.remove(progress)


# The job's status after each event (PhaseStarted names its phase).
STATUS_AFTER: dict[type, str] = {
    Job.Requested: "pending", Job.PlanStored: "planning", Job.Generated: "generating", Job.RetryQueued: "generating",
    Job.Validated: "validating", Job.Completed: "completed", Job.Failed: "failed",
}


def progress_of(event: Any) -> dict[str, Any]:
    status = STATUS_AFTER.get(type(event)) or getattr(event, "phase", None)
    return {
        "job_id": event.originator_id,
        "event": type(event).__name__,
        "status": status,
        "progress": getattr(event, "progress", 0),
        "error": getattr(event, "reason", None),
        "artifact_id": getattr(event, "artifact_id", None),
        "at": event.timestamp,
    }


class JobOrders:
    """A job's message on the work queue: `{job_id, owner}`, signed with the service's key
    (every instance on the database holds the same one, adapters/store/keys.py service_key)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key  # (None until the composition root gives it on start)

    def use(self, key: bytes) -> None:
        self.key = key

    def signature(self, body: bytes) -> str:
        if self.key is None:
            raise RuntimeError("job orders are signed before the service's key was given")
        return hmac.new(self.key, body, hashlib.sha256).hexdigest()

    def write(self, job_id: UUID, owner: str) -> tuple[bytes, dict[str, str]]:
        body = orjson.dumps({"job_id": job_id, "owner": owner})
        return body, {"Nats-Msg-Id": f"job:{job_id}", SIGNATURE: self.signature(body)}

    def read(self, body: bytes, headers: dict[str, str] | None) -> tuple[UUID, str] | None:
        """The job and its owner, or None: not a message the service wrote."""
        given = (headers or {}).get(SIGNATURE, "")
        if not hmac.compare_digest(given.encode(), self.signature(body).encode()):
            return None
        return order_of(body)

    @staticmethod
    def unsigned(body: bytes, headers: dict[str, str] | None) -> tuple[UUID, str] | None:
        """An earlier version's message (no signature; its message id names its job), or None."""
        order = order_of(body)
        if order is None or SIGNATURE in (headers or {}):
            return None
        return order if (headers or {}).get("Nats-Msg-Id") == f"job:{order[0]}" else None


def order_of(body: bytes) -> tuple[UUID, str] | None:
    try:
        order = orjson.loads(body)
        return UUID(order["job_id"]), str(order["owner"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


class JobRelay(Relay):
    name = "job_signals"
    relayed = JOB_EVENTS

    def __init__(self, nc: NATS, js: JetStreamContext, prefix: str, orders: JobOrders):
        self.nc = nc  # progress signals (the signals connection)
        self.js = js  # the work queue (the jobs connection)
        self.prefix = prefix
        self.orders = orders
        self.work_stream, _ = streams(prefix)

    async def publish(self, position: int, event: Any, owner: str) -> None:
        if isinstance(event, Job.Requested):
            body, headers = self.orders.write(event.originator_id, event.owner)
            await self.js.publish(f"{self.prefix}.jobs.work", body, stream=self.work_stream, headers=headers)
        await self.nc.publish(
            job_progress(signals_prefix(self.prefix, owner), event.originator_id),
            orjson.dumps({**progress_of(event), "position": position}),
        )


def deliveries_of(message: Any) -> int:
    try:
        return int(message.metadata.num_delivered)
    except (nats.errors.Error, AttributeError, TypeError, ValueError):  # (not a JetStream message)
        return 1


def sequence_of(message: Any) -> int | None:
    try:
        return int(message.metadata.sequence.stream)
    except (nats.errors.Error, AttributeError, TypeError, ValueError):
        return None


class JobWorkers(Background):
    """`count` workers in this process on the shared work queue."""

    name = "job-workers"

    def __init__(
        self, js: JetStreamContext, prefix: str, bus: CommandBus, agent: Agent, count: int, orders: JobOrders
    ) -> None:
        super().__init__()
        self.js = js
        self.orders = orders
        self.refused = 0  # messages terminated as not the service's
        self.given_up = 0  # the service's, terminated after MAX_DELIVER deliveries
        self.prefix = prefix
        self.bus = bus
        self.agent = agent
        self.count = count
        self.instance = uuid.uuid4().hex[:8]

    async def _run(self) -> None:
        await asyncio.gather(*(self._work(f"{self.instance}-{n}") for n in range(self.count)))

    async def _work(self, worker: str) -> None:
        work_stream, _ = streams(self.prefix)
        subscription = await self.js.pull_subscribe_bind(CONSUMER, stream=work_stream)
        try:
            while True:
                try:
                    messages = await subscription.fetch(1, timeout=5)
                except TimeoutError:
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # NATS away: try again shortly
                    log.warning("job fetch failed; retrying", extra={"error_type": type(error).__name__})
                    await asyncio.sleep(1)
                    continue
                for message in messages:
                    await self.process(message, worker)
        finally:
            # Left subscribed, the connection's drain at shutdown would wait for it.
            await subscription.unsubscribe()

    async def process(self, message: Any, worker: str) -> None:
        signed = self.orders.read(message.data, message.headers)
        order = signed or self.orders.unsigned(message.data, message.headers)
        if order is None:  # never the service's: no retry will make it one
            await self.refuse(message)
            return
        job_id, owner = order
        try:
            if await self.run_job(job_id, owner, worker, message):
                await message.ack()
        except ChronicleError as error:
            if signed is None and error.code == "not_found":  # the log knows no such job of that owner
                await self.refuse(message)
                return
            if any(d.get("rule") == "holds_phase" for d in error.details):
                return  # another worker took the job over: it holds the message now
            if error.code in ("unavailable", "internal"):
                await self.again(message, job_id, error.code, delay=1)
                return
            # The job cannot go on (its owner was erased, say): retrying would not change that.
            log.error("job abandoned", extra={"error_type": error.code})
            await message.ack()
        except Exception as error:  # an agent's bug or a lost connection: another attempt later
            await self.again(message, job_id, type(error).__name__, delay=5)

    async def refuse(self, message: Any) -> None:
        self.refused += 1
        log.warning("job message refused: not the service's", extra={"sequence": sequence_of(message)})
        await message.term()

    async def again(self, message: Any, job_id: UUID, error_type: str, *, delay: float) -> None:
        """Have the message given again after `delay`, unless this was its last delivery."""
        if deliveries_of(message) >= MAX_DELIVER:
            self.given_up += 1
            log.error("job message given up", extra={"job_id": str(job_id), "error_type": error_type,
                                                     "deliveries": MAX_DELIVER})
            await message.term()
            return
        log.warning("job step failed; redelivering", extra={"error_type": error_type})
        await message.nak(delay=delay)

    async def run_job(self, job_id: UUID, owner: str, worker: str, message: Any) -> bool:
        """Run phases until the job ends; True once it has (the message may be acked).

        A pending job is claimed by the first record this worker makes of it; one that
        another worker started is taken over first, on the record (job.start_phase). Each
        recorded outcome answers with the next phase, already started for this worker.
        What comes quickly (within RECORD_WITHIN of the first thing not yet recorded) goes
        in one commit; when a phase takes longer, what came before it (or the claim) is
        recorded while it runs, so progress shows and a worker that dies loses at most
        the phase it was in."""
        step: dict[str, Any] = await self.bus.execute(DescribeJob(job_id=job_id, worker=worker), owner)
        if step["status"] != "pending":
            step = await self.bus.execute(StartPhase(job_id=job_id, worker=worker), owner)
        claimed = step["status"] != "pending"
        spec = JobSpec.model_validate(step["spec"])
        snapshot = [Chunk.model_validate(chunk) for chunk in step["snapshot"]]

        async def record(outcomes: dict[str, Any]) -> dict[str, Any]:
            command: RecordOutcomes | StartPhase = (
                RecordOutcomes(job_id=job_id, worker=worker, **outcomes)
                if outcomes
                else StartPhase(job_id=job_id, worker=worker)
            )
            recorded = await self.bus.execute(command, owner)
            await message.in_progress()  # the ack deadline starts again: this worker lives
            return recorded

        since = time.monotonic()  # when the first thing not yet recorded came
        while step["phase"] is not None:
            outcomes: dict[str, Any] = {}
            phase, plan, result, attempt = step["phase"], step["plan"], step["result"], step["attempt"]
            while phase is not None:
                call = asyncio.ensure_future(self.run_phase(phase, spec, snapshot, plan, result, attempt))
                try:
                    if (outcomes or not claimed) and not (
                        await asyncio.wait([call], timeout=since + RECORD_WITHIN - time.monotonic())
                    )[0]:
                        step, outcomes, claimed = await record(outcomes), {}, True
                    outcome = await call
                except AgentFailed as failure:
                    if outcomes:  # what the agent did before failing stays on the record
                        await record(outcomes)
                    await self.bus.execute(FailJob(job_id=job_id, worker=worker, reason=failure.message),
                                           owner)
                    return True
                finally:
                    call.cancel()  # (done already, unless recording failed)
                since = since if outcomes or not claimed else time.monotonic()
                outcomes[OUTCOME_OF[phase]] = outcome
                plan, result = outcomes.get("plan", plan), outcomes.get("result", result)
                phase = NEXT_PHASE[phase]
            step, claimed = await record(outcomes), True
        return True

    async def run_phase(
        self, phase: str, spec: JobSpec, snapshot: list[Chunk], plan: Any, result: Any, attempt: int
    ) -> Any:
        """The agent's work for one phase: a plan, a result, or validation's problems."""
        if phase == "planning":
            return await self.agent.plan(spec, snapshot)
        if phase == "generating":
            return await self.agent.generate_from_plan(spec, plan, snapshot, attempt)
        return await self.agent.validate(spec, result)
