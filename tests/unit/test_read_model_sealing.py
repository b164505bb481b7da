"""Read-model sealing and the blind index: what the history and search views store instead of text."""

from __future__ import annotations

import asyncio
import hmac
from typing import Any
from uuid import uuid4

import pytest
from cryptography.exceptions import InvalidTag

from adapters.read_side.sealing import Owners, Seals, UserSeal
from adapters.store.memory import InMemoryKeyRing
from services.ports.sealing import tag_terms


def seals() -> Seals:
    return Seals(InMemoryKeyRing())


def test_sealing_is_deterministic_per_row_and_opens_only_under_its_owners_key() -> None:
    ring = seals()
    alice, bob = ring.for_writing("alice"), ring.for_writing("bob")
    assert alice is not None and bob is not None
    sealed = alice.seal("message:1:content", "a secret")
    assert b"secret" not in sealed
    assert alice.seal("message:1:content", "a secret") == sealed  # (a rebuild writes the same bytes)
    assert alice.seal("message:2:content", "a secret") != sealed  # (equal texts of two rows differ)
    assert alice.open(sealed) == "a secret" and alice.open(None) is None
    assert alice.opened_size(sealed) == len(b"a secret") and alice.opened_size(None) == 0  # (known before opening)
    assert alice.open_json(alice.seal_json("conversation:1:tags", ["a", "b"])) == ["a", "b"]
    with pytest.raises(InvalidTag):
        bob.open(sealed)


def test_nonces_and_terms_are_the_hmacs_read_models_already_hold() -> None:
    """Rows written by earlier versions must equal a rebuild's (verify compares them):
    the nonce and a term are HMAC-SHA256 of the row and text, and of the word, under keys
    derived from the data key, however they are computed."""
    data_key = bytes(range(32))
    seal = UserSeal(data_key)
    nonce_key = hmac.digest(data_key, b"chronicle read models: nonce", "sha256")
    index_key = hmac.digest(data_key, b"chronicle read models: blind index", "sha256")
    assert seal.seal("message:1:content", "a secret")[:12] == hmac.digest(nonce_key, b"message:1:content\0a secret", "sha256")[:12]
    assert seal.term("secret") == hmac.digest(index_key, b"secret", "sha256")[:8].hex()


def test_blind_vectors_keep_positions_and_weights_and_key_their_terms_by_owner() -> None:
    ring = seals()
    alice, bob = ring.for_writing("alice"), ring.for_writing("bob")
    assert alice is not None and bob is not None
    vector = "'data':8,9A 'o''reilli':4 'back\\\\slash':7"
    blind = alice.blind_tsvector(vector)
    assert "data" not in blind and "reilli" not in blind and "slash" not in blind
    data, reilly, slash = alice.terms(["data", "o'reilli", "back\\slash"])
    assert blind == f"'{data}':8,9A '{reilly}':4 '{slash}':7"
    assert bob.terms(["data"]) != [data]
    # A query's lexemes become the same terms, its operators stay.
    assert alice.blind_query("'data' <-> 'o''reilli' & !'back\\\\slash' | 'café'") == (
        f"'{data}' <-> '{reilly}' & !'{slash}' | '{alice.term('café')}'"
    )
    assert alice.blind_query("") == ""
    # A projection's plain texts: each lexeme's entry as it begins, a stop word's "" kept "".
    assert alice.quoted_terms(["data", "", "data"]) == [f"'{data}':", "", f"'{data}':"]
    assert bob.quoted_terms(["data"]) != alice.quoted_terms(["data"])
    assert tag_terms(alice, ["data"]) != [data]  # (a tag and a word never share a term)


def test_an_erased_owner_has_no_seal_and_a_query_sees_none() -> None:
    keys = InMemoryKeyRing()
    ring = Seals(keys)
    assert ring.for_writing("carol") is not None
    keys.destroy("carol")
    assert ring.for_writing("carol") is None
    assert asyncio.run(ring.of("carol")) is None
    assert asyncio.run(ring.of("never-wrote")) is None
    assert keys.key_for_writing("never-wrote") and asyncio.run(ring.of("never-wrote")) is not None  # (None not kept)


class LookupCursor:
    def __init__(self, table: dict[Any, str]):
        self.table = table
        self.asked: list[list[Any]] = []
        self.found: list[tuple[Any, str]] = []

    def execute(self, statement: Any, params: tuple[list[Any]]) -> LookupCursor:
        [wanted] = params
        self.asked.append(sorted(wanted, key=str))
        self.found = [(i, self.table[i]) for i in wanted if i in self.table]
        return self

    def fetchall(self) -> list[tuple[Any, str]]:
        return self.found


def test_owners_are_remembered_and_the_rest_read_in_one_statement() -> None:
    known, stored, missing = uuid4(), uuid4(), uuid4()
    cursor = LookupCursor({stored: "bob"})
    owners = Owners("SELECT id, owner ...")
    owners.remember(known, "alice")
    assert owners.of(cursor, [known, stored, missing]) == {known: "alice", stored: "bob"}
    assert cursor.asked == [sorted([stored, missing], key=str)]
    assert owners.of(cursor, [stored]) == {stored: "bob"} and len(cursor.asked) == 1
