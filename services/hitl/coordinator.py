"""The HITL coordinator: tells a run's owner about its checkpoints and expires overdue pauses.

A signal says that something happened to a run (paused, resumed, expired) and where in
the log: `{event, run_id, conversation_id, position, at}` on the owner's own subject
(clients/python/chronicle_contract/hitl.py run_signals), which only the owner's connections may read and
only the service may publish on. It carries no content: the person reads the checkpoint
with hitl.get, the orchestrator takes the answer with hitl.take. So a signal nobody
received loses nothing (an orchestrator asks again), and nothing of an erased user stays
on NATS. Signals are derived from committed events, never sent before the commit:
published right after it by the command bus's fast path, and again by the relay as the
backstop (adapters/read_side/relay.py); a waiter takes either.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import psycopg
from chronicle_contract.bus import signals_prefix
from chronicle_contract.errors import ChronicleError
from chronicle_contract.hitl import ExpireRun, run_signals
from nats.aio.client import Client as NATS

from domain.hitl import HitlExpired, HitlPaused, HitlResumed
from services.ports.background import Background
from services.ports.relays import Relay
from services.runtime.command_bus import Execute

log = logging.getLogger(__name__)

SIGNAL_EVENTS = (HitlPaused, HitlResumed, HitlExpired)
EVENT_NAMES: dict[type, str] = {HitlPaused: "paused", HitlResumed: "resumed", HitlExpired: "expired"}


class SignalRelay(Relay):
    name = "hitl_signals"
    relayed = SIGNAL_EVENTS

    def __init__(self, nc: NATS, prefix: str):
        self.nc = nc
        self.prefix = prefix

    async def publish(self, position: int, event: Any, owner: str) -> None:
        name = EVENT_NAMES[type(event)]
        signal = {
            "event": name, "run_id": event.run_id, "conversation_id": event.originator_id,
            "position": position, "at": event.timestamp,
        }
        await self.nc.publish(f"{run_signals(signals_prefix(self.prefix, owner), event.run_id)}.{name}", orjson.dumps(signal))


class ExpirySweeper(Background):
    """Expires paused checkpoints whose time is up; every instance may sweep, the domain
    makes a second expiry of the same checkpoint a no-op."""

    name = "hitl-expiry"

    def __init__(self, due: Callable[[], Awaitable[list[dict[str, Any]]]], execute: Execute, interval: float = 0.5):
        super().__init__()
        self.due = due
        self.execute = execute
        self.interval = interval

    async def _run(self) -> None:
        while True:
            try:
                for run in await self.due():
                    await self.execute(ExpireRun(run_id=run["run_id"]), run["owner"])
            except asyncio.CancelledError:
                raise
            except psycopg.errors.UndefinedTable:
                pass  # the hitl read model is still being built at first start
            except (ChronicleError, psycopg.Error) as error:
                log.warning("expiry sweep failed; retrying", extra={"error_type": type(error).__name__})
            await asyncio.sleep(self.interval)
