"""The wire contract of users as data subjects: erasure."""

from __future__ import annotations

from typing import Annotated

from pydantic import field_validator

from chronicle_contract.base import (
    Command,
    Reply,
    Text,
)
from chronicle_contract.values import SYSTEM_OWNER


class UserErasure(Reply):
    user_id: str
    erased: bool  # False: the user had been erased before
    position: int | None = None


class EraseUser(Command[UserErasure], action="user.erase"):
    """Admin: destroy a user's data key (crypto-shredding); see services/users/erasure.py."""

    user_id: Annotated[str, Text(200)]

    @field_validator("user_id")
    @classmethod
    def not_the_system(cls, user_id: str) -> str:
        if user_id == SYSTEM_OWNER:
            raise ValueError(f"{SYSTEM_OWNER!r} is Chronicle itself, not a user")
        return user_id
