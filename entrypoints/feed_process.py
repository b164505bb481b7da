"""FeedProcess: the event feed (adapters/read_side/event_feed.py) in a child process of the service.

The feed decodes and publishes every committed event: ~22 µs of Python a chat message on
the service's event loop, where it cost add_message 7–24% (./dev bench feed). In a child
process of its own it runs beside the service instead, supervised as the projection
process is (entrypoints/projection_process.py: restarted when it dies, gone when the
service is). It needs only Postgres and its own NATS connection, as the feed role
(adapters/messaging/identities.py): this module imports no more than that, so the child
starts in a fraction of the service's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import signal
from multiprocessing.connection import Connection

import uvloop

from adapters.messaging.connect import drain, nats_error
from adapters.messaging.identities import Role, connect_role
from adapters.read_side.event_feed import EventFeed
from adapters.store.postgres import PostgresTarget
from entrypoints import heap, logs
from entrypoints.projection_process import PREPARED, ProjectionProcess, die_with_parent
from entrypoints.settings import Settings

log = logging.getLogger(__name__)

STARTED_WITHIN = 30.0  # seconds the service waits for the child's feed before it goes on without


def run_feed(service_nats_url: str, scoped: bool, settings: Settings, url: str, parent_end: Connection, parent_pid: int) -> None:
    """The child: the feed until SIGTERM, or until the parent is gone."""
    die_with_parent(parent_pid)
    logs.configure(settings.log_level)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's to handle
    uvloop.run(follow(service_nats_url, scoped, settings, url, parent_end))  # (as the service: entrypoints/cli.py)


async def follow(service_nats_url: str, scoped: bool, settings: Settings, url: str, parent_end: Connection) -> None:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    nc = await connect_role(
        service_nats_url, Role.FEED, scoped=scoped, name=f"{settings.service_name}-feed",
        max_reconnect_attempts=-1, reconnect_time_wait=0.5, error_cb=nats_error,
    )
    feed = EventFeed(url, nc, nc.jetstream(), settings.subject_prefix, settings.feed_batch_interval)
    await feed.start()
    heap.settle()
    parent_end.send(PREPARED)
    parent = multiprocessing.parent_process()
    try:
        while not stopping.is_set() and (parent is None or parent.is_alive()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 0.2)
    finally:
        await feed.stop()
        await drain(nc)


class FeedProcess:
    """Started with the service (async, as its other running pieces): the child is spawned
    once the servers are known, with the feed role's URL and whether the bus is scoped."""

    def __init__(self, settings: Settings, target: PostgresTarget, service_nats_url: str, scoped: bool) -> None:
        self.process = ProjectionProcess(
            settings, target, functools.partial(run_feed, service_nats_url, scoped), name="feed",
        )

    async def start(self) -> None:
        self.process.start()
        if not await asyncio.to_thread(self.process.wait_prepared, STARTED_WITHIN):
            # (it goes on trying: the feed catches up from its tracked position once it runs)
            log.warning("the event feed's process has not started yet; the service goes on without waiting")

    async def stop(self) -> None:
        await asyncio.to_thread(self.process.stop)
