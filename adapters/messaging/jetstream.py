"""JetStream streams Chronicle owns: created on start, updated when their config changed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ObjectStoreConfig, RetentionPolicy, StreamConfig
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError, ServiceUnavailableError

from services.ports.streams import Streams

log = logging.getLogger(__name__)

DAY = 24 * 3600.0
PLACEMENT_WAIT = 30.0  # seconds a stream's creation is tried while a new cluster cannot place it yet
PLACEMENT_RETRY = 0.2


async def ensure_stream(
    js: JetStreamContext,
    name: str,
    subjects: list[str],
    *,
    max_age: float = 7 * DAY,
    replicas: int = 1,
    retention: RetentionPolicy = RetentionPolicy.LIMITS,
    duplicate_window: float = 120.0,
    allow_direct: bool = False,
) -> None:
    """`allow_direct`: any server of the stream answers a get of a message by subject."""
    config = StreamConfig(
        name=name,
        subjects=subjects,
        max_age=max_age,
        duplicate_window=duplicate_window,
        num_replicas=replicas,
        retention=retention,
        allow_direct=allow_direct,
    )
    if await found_or_created(lambda: js.stream_info(name), NotFoundError, lambda: js.add_stream(config)):
        await js.update_stream(config)


async def ensure_object_store(js: JetStreamContext, bucket: str, config: ObjectStoreConfig) -> None:
    """An object store, created unless there is one."""
    await found_or_created(lambda: js.object_store(bucket), BucketNotFoundError,
                           lambda: js.create_object_store(bucket, config))


async def found_or_created(
    look: Callable[[], Awaitable[object]], missing: type[Exception], create: Callable[[], Awaitable[object]]
) -> bool:
    """Whether it was there already (False: created now). A creation refused because another
    instance created it meanwhile (found on the next look), or because a cluster that just
    formed cannot place its replicas yet, is followed by another look, for PLACEMENT_WAIT
    seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PLACEMENT_WAIT
    while True:
        try:
            await look()
            return True
        except missing:
            try:
                await create()
                return False
            except (BadRequestError, ServiceUnavailableError):
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(PLACEMENT_RETRY)


async def stream_names(js: JetStreamContext) -> list[str]:
    """All stream names on the server (the API answers a page at a time)."""
    names: list[str] = []
    while page := await js.streams_info(offset=len(names)):
        names += [info.config.name for info in page if info.config.name]
    return names


async def remove_stream(js: JetStreamContext, name: str) -> bool:
    """Delete the stream if there is one; whether there was."""
    try:
        await js.delete_stream(name)
    except NotFoundError:
        return False
    return True


class JetStreams(Streams):
    """The streams port on one JetStream context, each stream kept `replicas` times."""

    def __init__(self, js: JetStreamContext, replicas: int = 1) -> None:
        self.js = js
        self.replicas = replicas

    async def ensure_work_queue(
        self, name: str, subjects: list[str], *, consumer: str, ack_wait: float, duplicate_window: float,
        max_deliver: int,
    ) -> None:
        await ensure_stream(
            self.js, name, subjects, retention=RetentionPolicy.WORK_QUEUE, duplicate_window=duplicate_window,
            replicas=self.replicas,
        )
        config = ConsumerConfig(
            durable_name=consumer, ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait, max_deliver=max_deliver
        )
        try:
            info = await self.js.consumer_info(name, consumer)
        except NotFoundError:
            await self.js.add_consumer(name, config)
            return
        if info.config.max_deliver != max_deliver:  # (one made before redelivery was bounded: -1)
            try:
                await self.js.add_consumer(name, config)  # (the server updates what may be edited)
            except BadRequestError as refused:
                log.warning("work queue consumer not updated", extra={"consumer": consumer, "error": str(refused)[:200]})

    async def ensure_object_store(self, bucket: str, *, ttl: float) -> None:
        await ensure_object_store(self.js, bucket, ObjectStoreConfig(ttl=ttl, replicas=self.replicas))

    async def remove(self, name: str) -> bool:
        return await remove_stream(self.js, name)
