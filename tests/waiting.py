"""Waiting in tests: for a condition to become true, never for time to pass."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, overload

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


@overload
async def eventually(condition: Callable[[], Coroutine[Any, Any, T | None]], what: str, timeout: float = 30.0) -> T: ...
@overload
async def eventually(condition: Callable[[], T | None], what: str, timeout: float = 30.0) -> T: ...
async def eventually(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """As wait_until, on the event loop; the condition may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL)
