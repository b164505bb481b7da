"""After an erasure, the key-encryption key is rotated within the erasure epoch, so that no
copy of the database (WAL, replica, backup) older than that can unwrap the erased key.

Every instance runs one; the rotation itself runs on one at a time (services/ports/keys.py
`KeyRotation`), and an instance that finds one unfinished (a crash) finishes it.
"""

from __future__ import annotations

import asyncio
import logging

from services.ports.background import Background
from services.ports.keys import KeyRotation, RotationUnavailable

log = logging.getLogger(__name__)
FAILURE_WAIT = 5.0  # seconds before trying again after a failure (Postgres away, ...)


def poll_interval(epoch: float) -> float:
    """How often an instance looks for a rotation due: an eighth of the epoch, 0.1 s to 60 s."""
    return min(60.0, max(0.1, epoch / 8))


class KeyRotator(Background):
    name = "chronicle-kek-rotation"

    def __init__(self, rotation: KeyRotation, epoch: float) -> None:
        super().__init__()
        self.rotation = rotation
        self.epoch = epoch

    async def _run(self) -> None:
        interval = poll_interval(self.epoch)
        while True:
            try:
                due = await asyncio.to_thread(self.rotation.due_in, self.epoch)
                if due is not None and due <= interval:
                    await asyncio.sleep(due)
                    await asyncio.to_thread(self.rotation.rotate)
                    continue
            except RotationUnavailable as error:
                log.warning("an erasure needs the key-encryption key rotated, which this deployment gives as a"
                            " static key: rotate it as the README says", extra={"reason": str(error)})
                return
            except Exception as error:  # (noqa: BLE001) a rotation not done now is due still: try again
                log.error("key-encryption key rotation failed; trying again", extra={"error_type": type(error).__name__})
                await asyncio.sleep(FAILURE_WAIT)
                continue
            await asyncio.sleep(interval)
