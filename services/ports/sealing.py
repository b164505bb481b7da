"""The read models' sealing port: one user's content sealed under their data key, and the
blind index terms that let full text and tag filters work without the plaintext.

A projection seals what it writes (adapters/read_side/sealing.py) and a query opens what it
reads with the same user's key; once the key is destroyed (an erasure) neither works, so
what a read model's files still hold of that user is ciphertext nobody can open.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any


class UserSeal(ABC):
    """One user's read-model key: what projections sealed for them opens with it."""

    @abstractmethod
    def open(self, sealed: bytes | None) -> str | None:
        """The text sealed (None stays None)."""

    @abstractmethod
    def open_json(self, sealed: bytes | None) -> Any:
        """The JSON value sealed (None stays None)."""

    @abstractmethod
    def open_bytes(self, sealed: bytes | None) -> bytes | None:
        """The bytes sealed (None stays None)."""

    @abstractmethod
    def opened_size(self, sealed: bytes | None) -> int:
        """The size of the bytes `sealed` opens to, without opening it (None: 0), so that a
        reader bounds what it opens before it pays for it."""

    @abstractmethod
    def terms(self, words: Iterable[str]) -> list[str]:
        """Each word (a lexeme, a tag) as its blind index term: keyed by this user's key, so
        equal words of one user meet and nobody without the key learns the word."""

    @abstractmethod
    def blind_query(self, tsquery: str) -> str:
        """A tsquery's text (as Postgres prints it) with each lexeme made its blind term: it
        matches and ranks blind tsvectors as the plain query matched the plain ones."""


class Sealing(ABC):
    """The users' read-model keys, as query handlers get them."""

    @abstractmethod
    async def of(self, user: str) -> UserSeal | None:
        """The user's read-model key; None when they have none (never wrote, or erased)."""


def tag_terms(seal: UserSeal, tags: Iterable[str]) -> list[str]:
    """The tags' blind terms, which a tag filter matches (a tag and a word never share one)."""
    return seal.terms("tag\0" + tag for tag in tags)


def field_term(seal: UserSeal, field: str, value: str) -> str:
    """A field's value (an optimization's project, its optimizer) as the blind term an
    equality filter matches: keyed by the owner's key and by the field, as tags are."""
    return seal.terms([field + "\0" + value])[0]
