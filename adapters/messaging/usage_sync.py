"""What users spent of their per-user limits, shared among the service's instances over NATS.

Every `every` seconds an instance publishes what its users spent since its last report
(FairShare.take_report) on a service-only subject (clients/python/chronicle_contract/bus.py
usage_subject: users' connections may neither publish nor subscribe there), and takes
what the others report from its own buckets (FairShare.spent_elsewhere). A plain
subscription, not the queue group: every instance hears every report, its own too
(recognised by its id and skipped). A report goes out even when nobody spent anything:
it says the instance is there, and FairShare shares a bucket among the instances it hears.

On the wire (JSON): {"instance": id, "usage": [[user, budget, allowance, spent], ...]},
split into several messages past MAX_REPORT_BYTES, with "leaving": true on the last one
an instance sends as it stops. Fields a reader does not know are ignored, so instances of
two versions can run side by side (a later change of the entries' shape takes a new field
name); a report it cannot read is logged, without its content, and dropped. While NATS is
unreachable reports are dropped rather than queued: each instance goes on with its own
buckets, and stops counting the peers it no longer hears.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Annotated

import nats.errors
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from adapters.auth import MAX_SUBJECT
from adapters.messaging.connect import flushed
from adapters.messaging.fair_share import FairShare, Usage

log = logging.getLogger(__name__)

MAX_REPORT_BYTES = 64 * 1024  # one message's entries (NATS carries up to 1 MiB by default)
CANCEL_AGAIN = 1.0  # seconds (see services/ports/background.py: a cancellation can be lost)
Count = Annotated[int, Field(ge=1, le=2**31)]


class Report(BaseModel):
    """One message of an instance's report, as read: unknown fields ignored, nothing coerced."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    instance: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    usage: list[tuple[Annotated[str, StringConstraints(max_length=MAX_SUBJECT)], Annotated[str, StringConstraints(max_length=64)], Count, Count]] = []  # noqa: E501
    leaving: bool = False


def encode(instance: str, usage: list[Usage], *, leaving: bool = False, max_bytes: int = MAX_REPORT_BYTES) -> list[bytes]:
    """The messages of one report: its entries halved until each message's fit in max_bytes."""
    entries = orjson.dumps(usage)
    if len(entries) > max_bytes and len(usage) > 1:
        half = len(usage) // 2
        return encode(instance, usage[:half], max_bytes=max_bytes) + encode(
            instance, usage[half:], leaving=leaving, max_bytes=max_bytes
        )
    last = b',"leaving":true}' if leaving else b"}"
    return [b'{"instance":' + orjson.dumps(instance) + b',"usage":' + entries + last]


class UsageSync:
    """Reports this instance's spending every `every` seconds and applies the others'."""

    def __init__(self, nc: NATS, subject: str, fair_share: FairShare, *, every: float, instance: str | None = None):
        self.nc = nc
        self.subject = subject
        self.fair_share = fair_share
        self.every = every
        self.instance = instance or uuid.uuid4().hex
        self.subscription: Subscription | None = None
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0  # reports not understood

    async def start(self) -> None:
        self.subscription = await self.nc.subscribe(self.subject, cb=self._received)
        await flushed(self.nc)  # subscribed before the first report, ours or theirs
        self.task = asyncio.create_task(self._run(), name="usage-sync")

    async def stop(self) -> None:
        """The last report (what was served since the previous one), marked as leaving."""
        if self.task is not None:
            while not self.task.done():
                self.task.cancel()
                await asyncio.wait([self.task], timeout=CANCEL_AGAIN)
            self.task = None
        await self.report(leaving=True)
        if self.subscription is not None:
            with contextlib.suppress(nats.errors.Error):
                await self.subscription.unsubscribe()
            self.subscription = None

    async def report(self, *, leaving: bool = False) -> None:
        usage = self.fair_share.take_report()
        if not self.nc.is_connected:
            return  # dropped, not queued: stale spending would be taken off late
        try:
            for message in encode(self.instance, usage, leaving=leaving):
                await self.nc.publish(self.subject, message)
        except nats.errors.Error as error:
            log.info("usage report not sent", extra={"error_type": type(error).__name__})

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.report()
            except Exception as error:  # the loop outlives any one report
                log.warning("usage report failed", extra={"error_type": type(error).__name__})

    async def _received(self, msg: Msg) -> None:
        try:
            report = Report.model_validate_json(msg.data)
        except ValidationError as error:
            self.dropped += 1
            if self.dropped % 100 == 1:  # a peer that keeps sending them would flood the log
                log.warning("usage report not understood", extra={"errors": error.error_count(), "dropped": self.dropped})
            return
        if report.instance == self.instance:
            return
        self.fair_share.spent_elsewhere(report.instance, report.usage)
        if report.leaving:
            self.fair_share.left(report.instance)
