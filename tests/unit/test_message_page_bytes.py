"""How many messages a page of a conversation holds: those within PAGE_BYTES, and always the first."""

from __future__ import annotations

from chronicle_contract.conversations import PAGE_BYTES

from services.conversations.queries import fitting


def test_a_page_holds_the_messages_within_its_bytes_and_always_the_first() -> None:
    assert fitting([]) == 0
    assert fitting([1] * 5) == 5
    assert fitting([PAGE_BYTES // 2] * 3) == 2
    assert fitting([PAGE_BYTES // 2, PAGE_BYTES // 2, 0]) == 3  # (an erased owner's message: none of the bytes)
    assert fitting([PAGE_BYTES + 1, 1]) == 1
    assert fitting([1, PAGE_BYTES, 1]) == 1
