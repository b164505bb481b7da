"""The streams port: the JetStream streams and object stores the application's workers need.

The application says which it needs (names, work-queue retention, how long an upload waits);
the adapter (adapters/messaging/jetstream.py JetStreams) makes them on the deployment's
servers, with its replica count. Called once on start, never per message.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Streams(ABC):
    @abstractmethod
    async def ensure_work_queue(
        self, name: str, subjects: list[str], *, consumer: str, ack_wait: float, duplicate_window: float,
        max_deliver: int,
    ) -> None:
        """A stream that holds each message until one consumer acks it, with one durable pull
        consumer `consumer` shared by the workers (a message not acked within `ack_wait`
        seconds goes to another, at most `max_deliver` times in all); a message id seen
        within `duplicate_window` seconds is dropped."""

    @abstractmethod
    async def ensure_object_store(self, bucket: str, *, ttl: float) -> None:
        """An object store whose objects expire after `ttl` seconds."""

    @abstractmethod
    async def remove(self, name: str) -> bool:
        """Delete the stream if there is one; whether there was."""
