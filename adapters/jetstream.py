"""JetStream streams Chronicle owns: created on start, updated when their config changed."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

DAY = 24 * 3600.0


async def ensure_stream(
    js: JetStreamContext,
    name: str,
    subjects: list[str],
    *,
    max_age: float = 7 * DAY,
    replicas: int = 1,
    retention: RetentionPolicy = RetentionPolicy.LIMITS,
    duplicate_window: float = 120.0,
) -> None:
    config = StreamConfig(
        name=name,
        subjects=subjects,
        max_age=max_age,
        duplicate_window=duplicate_window,
        num_replicas=replicas,
        retention=retention,
    )
    try:
        await js.stream_info(name)
    except NotFoundError:
        try:
            await js.add_stream(config)
            return
        except BadRequestError:  # another instance created it meanwhile
            pass
    await js.update_stream(config)
