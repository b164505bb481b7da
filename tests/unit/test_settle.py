"""A committed batch's replies reach each caller's event loop, one call per loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from chronicle_contract.errors import ChronicleError

from services.runtime.command_bus import Submission, settle


def submission(loop: asyncio.AbstractEventLoop, future: asyncio.Future[dict[str, Any]], reply: dict[str, Any]) -> Submission:
    return Submission(name="x", payload=None, user_id="u", key="k", client_key=False, fingerprint="", future=future,  # type: ignore[arg-type]
                      loop=loop, reply=reply)


def test_a_batch_from_two_loops_is_answered_on_each_and_a_closed_loop_costs_the_others_nothing() -> None:
    other = asyncio.new_event_loop()
    running = threading.Thread(target=other.run_forever, daemon=True)
    running.start()
    gone = asyncio.new_event_loop()
    gone.close()

    async def main() -> list[dict[str, Any]]:
        here = asyncio.get_running_loop()
        mine = [here.create_future() for _ in range(3)]
        theirs: asyncio.Future[dict[str, Any]] = other.create_future()  # (only resolved on its own loop)
        batch = [submission(here, f, {"n": n}) for n, f in enumerate(mine)]
        batch.insert(1, submission(gone, gone.create_future(), {"n": "gone"}))
        batch.append(submission(other, theirs, {"n": "other"}))
        refused = submission(here, here.create_future(), {})
        refused.error = ChronicleError("conflict", "refused")
        batch.append(refused)
        settle(batch)
        with pytest.raises(ChronicleError):
            await refused.future
        return [*(await asyncio.gather(*mine)), await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(wait(theirs), other))]

    async def wait(future: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
        return await future

    try:
        assert asyncio.run(main()) == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": "other"}]
    finally:
        other.call_soon_threadsafe(other.stop)
        running.join()
        other.close()
