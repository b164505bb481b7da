"""Draining a worker thread's queue in batches; `None` in the queue means stop."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import TypeAlias, TypeVar

T = TypeVar("T")
# A bounded queue.Queue, or a SimpleQueue where nothing bounds it: the command bus's,
# which takes every command of every request (its put and get are C calls, where
# queue.Queue's take a lock and notify a condition in Python: ~4 µs a command).
Source: TypeAlias = "queue.Queue[T | None] | queue.SimpleQueue[T | None]"


def batches(source: Source[T], max_items: int) -> Iterator[list[T]]:
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


def drain(source: Source[T], max_items: int, handle: Callable[[list[T]], None]) -> None:
    for batch in batches(source, max_items):
        handle(batch)
