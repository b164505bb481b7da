"""Sealed cursors: the holder can neither read what a cursor holds nor make one up."""

from __future__ import annotations

import base64

import pytest
from chronicle_contract.errors import ChronicleError

from services.runtime.cursors import CursorSeal

KEY = bytes(range(32))


def refused(seal: CursorSeal, user: str, listing: str, cursor: str) -> ChronicleError:
    with pytest.raises(ChronicleError) as raised:
        seal.open(user, listing, cursor)
    assert raised.value.code == "invalid" and raised.value.fields == ["cursor"]
    return raised.value


def test_a_cursor_opens_for_its_user_and_list_on_any_seal_with_the_key() -> None:
    cursor = CursorSeal(KEY).seal("alice", "conversations:title:asc", b"id\x00Tulip budget")
    assert b"Tulip" not in base64.urlsafe_b64decode(cursor + "==") and "Tulip" not in cursor
    assert CursorSeal(KEY).open("alice", "conversations:title:asc", cursor) == b"id\x00Tulip budget"  # another instance


def test_two_cursors_of_one_row_differ() -> None:
    seal = CursorSeal(KEY)
    assert seal.seal("alice", "sessions", b"x") != seal.seal("alice", "sessions", b"x")


@pytest.mark.parametrize(
    ("user", "listing"),
    [("bob", "conversations:title:asc"), ("alice", "conversations:title:desc"), ("alice", "sessions")],
    ids=["another user", "another order", "another list"],
)
def test_a_cursor_is_refused_anywhere_else(user: str, listing: str) -> None:
    cursor = CursorSeal(KEY).seal("alice", "conversations:title:asc", b"id\x00a title")
    refused(CursorSeal(KEY), user, listing, cursor)


def test_a_changed_made_up_or_foreign_keyed_cursor_is_refused() -> None:
    seal = CursorSeal(KEY)
    cursor = seal.seal("alice", "sessions", b"id\x00key")
    flipped = cursor[:20] + ("A" if cursor[20] != "A" else "B") + cursor[21:]
    for made_up in (flipped, cursor[:-2], "AAAA", "not-base64!", "A"):
        refused(seal, "alice", "sessions", made_up)
    refused(CursorSeal.of_this_process(), "alice", "sessions", cursor)  # sealed under another key


def test_a_key_must_be_256_bits() -> None:
    with pytest.raises(ValueError):
        CursorSeal(b"short")
