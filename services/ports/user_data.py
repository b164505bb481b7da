"""The user data port: what is stored for a user beside the events, which an erasure must remove.

The events stay (their content unreadable once the user's key is destroyed); what is kept
beside them is deleted outright. adapters/store/user_data.py does it on Postgres.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class UserData(ABC):
    @abstractmethod
    def forget(self, user_id: str) -> None:
        """Delete the replies to the user's commands and their preview blobs, and whatever
        copies of them (and of their destroyed key) the storage still holds. Blocking."""
