"""Read-model content sealed under its owner's data key, and blind index terms keyed by it.

From each user's data key (the event store's, services/ports/keys.py) three keys are
derived by HMAC-SHA256 (one per purpose, so no use of one tells anything about another):
an AES-256-GCM key that seals content columns, a key for their nonces, and a key for the
blind index. Sealing is deterministic: the nonce is an HMAC of the row's identity and the
content (the synthetic-IV construction), so a rebuild writes the very bytes the live
tables hold (`projections verify` compares them) and two rows of equal content still
differ. A blind term is the first 8 bytes of HMAC(index key, word) in hex: a projection
writes a tsvector whose lexemes are terms (positions and weights kept, so `ts_rank`
ranks as before) and a query matches it with a tsquery of terms; a term of one user
means nothing under another's key, and nothing once the key is destroyed.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.erasure import UserErased
from services.ports import sealing as port
from services.ports.keys import KeyRing

NONCE_BYTES = 12
TAG_BYTES = 16  # AES-GCM's tag, after the ciphertext
TERM_BYTES = 8
MAX_CACHED_TERMS = 100_000  # per user seal: a projection meets the same words again and again
MAX_SEALS = 10_000
SEAL_CACHE_SECONDS = 10.0  # a query's copy of a key; an erasure deletes the rows meanwhile

# A lexeme as Postgres prints tsvectors and tsqueries: quoted, a quote doubled, a backslash escaped.
LEXEME = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


def _unquoted(quoted: str) -> str:
    return quoted.replace("''", "'").replace("\\\\", "\\") if ("'" in quoted or "\\" in quoted) else quoted


def _derived(data_key: bytes, purpose: bytes) -> bytes:
    return hmac.digest(data_key, b"chronicle read models: " + purpose, "sha256")


def _keyed(key: bytes) -> Callable[[bytes], bytes]:
    """HMAC-SHA256 under `key`, keyed once: each call copies the keyed state (the same
    digest as hmac.digest, which keys it again on every call: 0.74 against 1.23 µs)."""
    keyed = hmac.new(key, digestmod="sha256")

    def digest(data: bytes) -> bytes:
        mac = keyed.copy()
        mac.update(data)
        return mac.digest()

    return digest


class UserSeal(port.UserSeal):
    def __init__(self, data_key: bytes):
        self._cipher = AESGCM(_derived(data_key, b"seal"))
        self._nonce_mac = _keyed(_derived(data_key, b"nonce"))
        self._index_mac = _keyed(_derived(data_key, b"blind index"))
        self._terms: dict[str, str] = {}
        self._quoted: dict[str, str] = {"": ""}  # lexeme -> "'term':" (a stop word's "" stays "")

    def seal(self, row: str, text: str) -> bytes:
        """`text` sealed for the row named `row` (a table, column and key: the nonce's seed)."""
        return self.seal_bytes(row, text.encode())

    def seal_json(self, row: str, value: Any) -> bytes:
        return self.seal_bytes(row, orjson.dumps(value))

    def seal_bytes(self, row: str, content: bytes) -> bytes:
        nonce = self._nonce_mac(row.encode() + b"\0" + content)[:NONCE_BYTES]
        return nonce + self._cipher.encrypt(nonce, content, None)

    def _opened(self, sealed: bytes) -> bytes:
        return self._cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], None)

    def open(self, sealed: bytes | None) -> str | None:
        return None if sealed is None else self._opened(sealed).decode()

    def open_bytes(self, sealed: bytes | None) -> bytes | None:
        return None if sealed is None else self._opened(sealed)

    def opened_size(self, sealed: bytes | None) -> int:
        return len(sealed) - NONCE_BYTES - TAG_BYTES if sealed is not None else 0

    def open_json(self, sealed: bytes | None) -> Any:
        return None if sealed is None else orjson.loads(self._opened(sealed))

    def _blind(self, word: str) -> str:
        return self._index_mac(word.encode())[:TERM_BYTES].hex()

    def term(self, word: str) -> str:
        term = self._terms.get(word)
        if term is None:
            if len(self._terms) >= MAX_CACHED_TERMS:
                self._terms.clear()
            term = self._terms[word] = self._blind(word)
        return term

    def terms(self, words: Iterable[str]) -> list[str]:
        return [self.term(word) for word in words]

    def quoted_terms(self, lexemes: list[str]) -> list[str]:
        """Each lexeme's term as a tsvector entry begins, `'term':` ("" for a stop word's
        ""): looked up in one pass at C speed, Python only for a lexeme not met before."""
        quoted = self._quoted
        found = list(map(quoted.get, lexemes))
        if None in found:
            if len(quoted) + len(lexemes) > MAX_CACHED_TERMS:
                quoted.clear()
                quoted[""] = ""
            for n, entry in enumerate(found):
                if entry is None:
                    lexeme = lexemes[n]
                    found[n] = quoted[lexeme] = "'" + self._blind(lexeme) + "':"  # (one cache: this one)
        return found  # type: ignore[return-value]  # (no None left)

    def blind_tsvector(self, tsvector: str) -> str:
        """A tsvector's text (as Postgres prints it) with each lexeme made its term."""
        if "''" in tsvector or "\\" in tsvector:
            return self._blind_any(tsvector)
        # The common case, without a regular expression's call per lexeme (a rebuild's
        # hot loop): `'lexeme':positions` separated by single spaces, no quote inside.
        blind = []
        term = self.term
        for entry in tsvector.split(" "):
            end = entry.rfind("'")
            if end <= 0 or entry[0] != "'":  # (a lexeme with a space in it)
                return self._blind_any(tsvector)
            blind.append("'" + term(entry[1:end]) + entry[end:])
        return " ".join(blind)

    def _blind_any(self, text: str) -> str:
        return LEXEME.sub(lambda m: "'" + self.term(_unquoted(m.group(1))) + "'", text)

    def blind_query(self, tsquery: str) -> str:
        return self._blind_any(tsquery)  # (lexemes are printed alike in both)


class Seals(port.Sealing):
    """Each user's seal from the key ring: `for_writing` in projections (the key made on
    first use), `of` in queries (off the event loop when the ring must ask Postgres)."""

    def __init__(self, keys: KeyRing):
        self.keys = keys
        self._by_key: dict[bytes, UserSeal] = {}
        self._reading: dict[str, tuple[UserSeal, float]] = {}

    def _seal_of(self, data_key: bytes) -> UserSeal:
        seal = self._by_key.get(data_key)
        if seal is None:
            if len(self._by_key) >= MAX_SEALS:
                self._by_key.clear()
            seal = self._by_key[data_key] = UserSeal(data_key)
        return seal

    def for_writing(self, owner: str) -> UserSeal | None:
        """The owner's seal; None once they were erased (nothing of theirs is written)."""
        try:
            return self._seal_of(self.keys.key_for_writing(owner))
        except UserErased:
            return None

    def for_reading(self, owner: str) -> UserSeal | None:
        key = self.keys.key_for_reading(owner)
        if key is None:  # (not kept: a user without a key yet may be about to write their first)
            return None
        seal = self._seal_of(key)
        if len(self._reading) >= MAX_SEALS:
            self._reading.clear()
        self._reading[owner] = (seal, time.monotonic() + SEAL_CACHE_SECONDS)
        return seal

    async def of(self, user: str) -> UserSeal | None:
        cached = self._reading.get(user)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        return await asyncio.to_thread(self.for_reading, user)


MAX_REMEMBERED_OWNERS = 200_000


class Owners:
    """Who owns each row of a view's table, by id: remembered as rows are added (an owner
    never changes), else read from the table in one statement per batch."""

    def __init__(self, lookup: Any):
        self.lookup = lookup  # SELECT id, owner ... WHERE id = ANY(%s)
        self._known: dict[Any, str] = {}

    def remember(self, ident: Any, owner: str) -> None:
        if len(self._known) >= MAX_REMEMBERED_OWNERS:
            self._known.clear()
        self._known[ident] = owner

    def of(self, cursor: Any, idents: Iterable[Any]) -> dict[Any, str]:
        """The owners of those of `idents` whose rows exist (or were added in this batch)."""
        wanted = set(idents)
        missing = [i for i in wanted if i not in self._known]
        if missing:
            for ident, owner in cursor.execute(self.lookup, (missing,)).fetchall():
                self.remember(ident, owner)
        return {i: self._known[i] for i in wanted if i in self._known}
