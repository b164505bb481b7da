"""A text's full-text lexemes and positions made in the projection process, as Postgres's `to_tsvector` makes them.

The search read model stores each text's tsvector with every lexeme blinded
(adapters/read_side/sealing.py), so it needs the lexemes themselves, not just a vector
Postgres keeps. Asking Postgres (`to_tsvector` in a SELECT) for every batch's texts was the
largest single cost of a rebuild. Most chat is plain words, though: for a text made only of
ASCII letters, white space and punctuation that only ever separates words (`PLAIN`), Postgres's
default parser yields exactly its letter runs as words, numbered 1, 2, ... (a stop word takes a
position and yields no lexeme), and each word's lexeme depends on that word alone. So each
distinct word is asked of Postgres once (`to_tsvector` of the word by itself, for every new word
of a batch in one statement) and remembered; a text of such words gets its lexemes here, in word order, and
`tsvector_text` writes them as Postgres reads a tsvector (a lexeme repeated once per position,
which Postgres merges; in a text longer than `MAX_POSITIONS` words merged and capped here, as
`to_tsvector` does). Any other text (digits,
hyphens, apostrophes, URLs, other scripts ...) is left to Postgres, as before. Equality with
`to_tsvector` is tested against a real server (tests/integration/test_lexicon.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import compress
from operator import add
from typing import Any, cast

from psycopg import Cursor
from psycopg.sql import SQL, Literal

# Anything else in a text, or a full stop right before a letter ("a.b" may be a host name,
# "end.Next" too), and Postgres's parser is asked.
PUNCTUATION = b".,;:!?()\""  # (only ever separates words; then a plain text's words are split by white space)
PLAIN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz \t\n" + PUNCTUATION
STOP_BEFORE_LETTER = re.compile(rb"\.[A-Za-z]")
SEPARATORS = bytes.maketrans(PUNCTUATION, b" " * len(PUNCTUATION))
MAX_WORD = 2047  # bytes: a word this long or longer is skipped by Postgres (with a notice), not numbered
MAX_POSITION = 16383  # a later position is stored as this one
MAX_POSITIONS = 255  # per lexeme; later ones are dropped
MAX_PLAIN_TEXT = 100_000  # characters: longer texts go to Postgres (a tsvector holds at most 1 MB)
MAX_WORDS = 200_000  # remembered; cleared when full

POSITIONS = [str(n) for n in range(1, MAX_POSITIONS + 1)]
STOP_WORD = ""  # a word that yields no lexeme but takes a position
ODD = None  # a word that yields something else (several lexemes, another position): ask Postgres

# Whether the configuration parses with the default parser and maps plain words (token type
# 1, asciiword) to dictionaries that look at one word at a time (a thesaurus looks at phrases).
WORD_BY_WORD = """
SELECT p.prsname = 'default' AND count(m.mapdict) > 0 AND coalesce(bool_and(t.tmplname <> 'thesaurus'), false)
FROM pg_ts_config c JOIN pg_ts_parser p ON p.oid = c.cfgparser
LEFT JOIN pg_ts_config_map m ON m.mapcfg = c.oid AND m.maptokentype = 1
LEFT JOIN pg_ts_dict d ON d.oid = m.mapdict LEFT JOIN pg_ts_template t ON t.oid = d.dicttemplate
WHERE c.oid = %s::regconfig GROUP BY p.prsname
"""

Lexemes = list[str]  # a text's lexemes in word order: position n is [n - 1], "" for a stop word


class Lexicon:
    """Plain texts' lexemes for one text search configuration, each distinct word asked of
    Postgres once."""

    def __init__(self, language: str):
        self.language = language
        self._word_by_word: bool | None = None  # asked on first use
        self._words: dict[str, str | None] = {}  # lower-case word -> lexeme, STOP_WORD or ODD
        self._ask = SQL(
            "SELECT d.w, array_agg(t.lexeme), array_agg(array_to_string(t.positions, ','))"
            " FROM unnest(%b::text[]) AS d(w) LEFT JOIN LATERAL unnest(to_tsvector({language}::regconfig, d.w)) t"
            " ON true GROUP BY d.w"
        ).format(language=Literal(language))

    def lexemes(self, cur: Cursor[Any], texts: list[str]) -> list[Lexemes | None]:
        """Each text's lexemes in word order, as `to_tsvector` gives them; None for a text that
        is not plain (Postgres must parse it)."""
        if self._word_by_word is None:
            row = cur.execute(WORD_BY_WORD, (self.language,)).fetchone()
            self._word_by_word = bool(row and row[0])
        if not self._word_by_word:
            return [None] * len(texts)
        words = [_plain_words(text) for text in texts]
        get = self._words.get
        made = [None if found is None else list(map(get, found)) for found in words]
        unknown = [n for n, lexemes in enumerate(made) if lexemes is not None and None in lexemes]
        if unknown:  # (an ODD word is known, and left to Postgres without asking again)
            known = self._words
            new = {word for n in unknown for word in cast(list[str], words[n]) if word not in known}
            if new:
                self._learn(cur, sorted(new))
                for n in unknown:
                    made[n] = list(map(get, cast(list[str], words[n])))
        return [None if lexemes is None or None in lexemes else cast(Lexemes, lexemes) for lexemes in made]

    def _learn(self, cur: Cursor[Any], words: list[str]) -> None:
        if len(self._words) + len(words) > MAX_WORDS:
            self._words.clear()
        for word, lexemes, positions in cur.execute(self._ask, [words], prepare=True).fetchall():
            if lexemes == [None]:
                self._words[word] = STOP_WORD
            elif len(lexemes) == 1 and positions == ["1"]:
                self._words[word] = lexemes[0]
            else:
                self._words[word] = ODD



def tsvector_text(lexemes: Lexemes, quoted: Callable[[Lexemes], list[str]]) -> str:
    """The tsvector of a text's lexemes as Postgres reads it. `quoted(lexemes)` gives each
    lexeme's entry as it begins, `'term':` (a term needs no quoting: letters and digits),
    and "" for a stop word's ""; the positions follow. (The short case is all C: it runs
    for every message a projection indexes.)"""
    if len(lexemes) <= MAX_POSITIONS:  # (then no lexeme has too many positions, nor one too far)
        starts = quoted(lexemes)
        return " ".join(compress(map(add, starts, POSITIONS), starts))
    merged: dict[str, list[int]] = {}
    for n, lexeme in enumerate(lexemes, 1):
        if lexeme:
            merged.setdefault(lexeme, []).append(n)
    starts = quoted(list(merged))
    return " ".join(
        start + ",".join(map(str, _capped(positions))) for start, positions in zip(starts, merged.values(), strict=True)
    )


def _capped(positions: list[int]) -> list[int]:
    """Positions as Postgres keeps them: none past MAX_POSITION (one there at most), MAX_POSITIONS at most."""
    capped: list[int] = []
    for position in positions:
        if len(capped) == MAX_POSITIONS or (capped and capped[-1] == MAX_POSITION):
            break
        capped.append(min(position, MAX_POSITION))
    return capped


def _plain_words(text: str) -> list[str] | None:
    """A plain text's words, lower-cased, in order; None when the text is not plain."""
    if len(text) > MAX_PLAIN_TEXT or not text.isascii():
        return None
    raw = text.encode("ascii")  # (bytes: their translate and lower run a table, not a mapping per character)
    if raw.translate(None, PLAIN_BYTES) or (b"." in raw and STOP_BEFORE_LETTER.search(raw)):
        return None
    words = raw.lower().translate(SEPARATORS).decode("ascii").split()
    if len(text) >= MAX_WORD and any(len(word) >= MAX_WORD for word in words):
        return None
    return words
