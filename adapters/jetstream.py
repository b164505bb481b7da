"""JetStream streams Chronicle owns: created on start, updated when their config changed."""

from __future__ import annotations

import contextlib

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


async def remove_streams(js: JetStreamContext, prefix: str) -> list[str]:
    """Delete every stream (object stores included) of the instance with this subject
    prefix: the names Chronicle gives them start with the prefix's stream form."""
    base = prefix.replace(".", "_").upper() + "_"
    removed = []
    for name in await stream_names(js):
        if name.startswith(base) or name.startswith("OBJ_" + base):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
                removed.append(name)
    return removed


async def stream_names(js: JetStreamContext) -> list[str]:
    """All stream names on the server (the API answers a page at a time)."""
    names: list[str] = []
    while page := await js.streams_info(offset=len(names)):
        names += [info.config.name for info in page if info.config.name]
    return names
