"""Draining a worker thread's queue in batches; `None` in the queue means stop."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def batches(source: queue.Queue[T | None], max_items: int) -> Iterator[list[T]]:
    """Everything waiting (at least one item, at most `max_items`) each time, until a `None`
    arrives; what came before that `None` is still handed over."""
    while True:
        first = source.get()
        if first is None:
            return
        batch = [first]
        while len(batch) < max_items:
            try:
                item = source.get_nowait()
            except queue.Empty:
                break
            if item is None:
                yield batch
                return
            batch.append(item)
        yield batch


def drain(source: queue.Queue[T | None], max_items: int, handle: Callable[[list[T]], None]) -> None:
    for batch in batches(source, max_items):
        handle(batch)
