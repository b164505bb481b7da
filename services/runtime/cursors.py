"""Sealed cursors: what a page's `next_cursor` holds, readable and writable by the service only.

A cursor holds the last row's sort value (a conversation's title, a time) and id. Given to
the client in clear, it showed the value and could be edited to start a page anywhere.
Sealed with AES-256-GCM under a key every instance shares (kept in Postgres, see
adapters/store/keys.py `service_key`), with the user and the list and order as associated
data, a cursor tells its holder nothing, and one that was changed, made up, given for
another list or order, or by another user, fails to open: `invalid`, naming the field.
"""

from __future__ import annotations

import base64
import os

import orjson
from chronicle_contract.errors import ChronicleError
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12  # AES-GCM's own; random, so that two cursors of one row differ
KEY_BYTES = 32


def invalid_cursor(field: str, message: str) -> ChronicleError:
    return ChronicleError("invalid", message, [{"field": field, "rule": "cursor", "message": message}])


class CursorSeal:
    """Seals and opens cursors under one key (the composition root gives the shared one,
    which lives in the database: built without it, the seal is given it as the service starts)."""

    def __init__(self, key: bytes | None = None):
        self._aead: AESGCM | None = None
        if key is not None:
            self.use(key)

    def use(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a cursor key is {KEY_BYTES} bytes")
        self._aead = AESGCM(key)

    @property
    def aead(self) -> AESGCM:
        if self._aead is None:
            raise RuntimeError("the cursor seal has no key yet: the service has not started")
        return self._aead

    @classmethod
    def of_this_process(cls) -> CursorSeal:
        """A key of this process alone: for tools that page within one run (reports); a
        service's instances need the shared one, or each refuses the others' cursors."""
        return cls(AESGCM.generate_key(bit_length=KEY_BYTES * 8))

    def seal(self, user: str, listing: str, payload: bytes) -> str:
        """`payload` sealed for `user`'s `listing` (the list and its order), as URL-safe
        base64 without padding."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = nonce + self.aead.encrypt(nonce, payload, bound_to(user, listing))
        return base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def open(self, user: str, listing: str, cursor: str, *, field: str = "cursor") -> bytes:
        """The payload `seal` was given, or `invalid` naming `field` when the cursor is not
        one this service sealed for this user and listing, unchanged."""
        try:
            sealed = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            return self.aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], bound_to(user, listing))
        except (ValueError, InvalidTag):  # (binascii.Error is a ValueError; a short one fails the tag)
            raise invalid_cursor(field, "not a cursor this service gave you for this list and order") from None


def bound_to(user: str, listing: str) -> bytes:
    """The associated data: what a cursor is valid for, written so that no two pairs meet."""
    return orjson.dumps(["chronicle-cursor", user, listing])
