"""Waiting in tests: for a condition to become true, never for time to pass."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
POLL = 0.02  # seconds between looks


def wait_until(condition: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """The condition's first truthy value; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)
    return value


async def eventually(condition: Callable[[], T | Awaitable[T]], what: str, timeout: float = 30.0) -> T:
    """As wait_until, on the event loop; the condition may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL)
