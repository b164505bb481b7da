"""The lexemes a plain text gets in the projection process are those Postgres's `to_tsvector` gives it (a real server)."""

from __future__ import annotations

import string
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.read_side.lexicon import Lexemes, Lexicon, tsvector_text
from adapters.read_side.sealing import Seals
from adapters.read_side.views.search import PostgresSearchView
from adapters.store.memory import InMemoryKeyRing

PROPERTIES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Words with stemming and stop words in them, and every character the plain test treats
# specially, with others that make a text not plain.
WORDS = ["The", "running", "runs", "ran", "is", "a", "Databases", "databases", "indices", "abc", "x", "I", "ponies"]
SEPARATORS = [" ", "  ", "\t", "\n", ".", ". ", ", ", "; ", ": ", "!", "? ", "(", ")", '"', "...", " - ", "-", "'",
              "/", "@", "1", " 42 ", "3.14", "é", "_", "&", "<", ">", "\u00a0", "\r\n", "\x0c"]
texts = st.lists(
    st.one_of(st.sampled_from(WORDS), st.sampled_from(SEPARATORS), st.text(string.ascii_letters, max_size=6)),
    max_size=40,
).map("".join)


def as_is(lexemes: Lexemes) -> list[str]:
    """Each lexeme's tsvector entry as it begins, the lexeme its own term."""
    return ["'" + lexeme + "':" if lexeme else "" for lexeme in lexemes]


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


def same_as_postgres(conn: psycopg.Connection, language: str, text: str, lexemes: Lexemes) -> bool:
    """Whether the lexemes, written as `tsvector_text` writes them (each lexeme its own
    term), make the very tsvector `to_tsvector` makes of the text."""
    row = conn.execute(
        "SELECT %s::tsvector = to_tsvector(%s::regconfig, %s)", (tsvector_text(lexemes, as_is), language, text)
    ).fetchone()
    return bool(row and row[0])


@PROPERTIES
@given(batch=st.lists(texts, min_size=1, max_size=20))
def test_a_plain_text_gets_what_postgres_gives_it(conn: psycopg.Connection, batch: list[str]) -> None:
    lexicon = Lexicon("english")
    with conn.cursor() as cur:
        made = lexicon.lexemes(cur, batch)
    for text, lexemes in zip(batch, made, strict=True):
        if lexemes is not None:
            assert same_as_postgres(conn, "english", text, lexemes), text


@pytest.mark.parametrize("language", ["english", "simple", "german"])
def test_chat_is_plain_and_indexed_as_postgres_does(conn: psycopg.Connection, language: str) -> None:
    batch = [
        "Hello there, how are you? I was running (late) to the meeting.",
        'She said "databases"; no: indices!',
        "",
        "   ",
        "The the THE a an",
        "Über straße",  # not plain
        "don't",  # not plain: an apostrophe splits the word
        "see example.com or end.Next",  # not plain: a host name
        "version 1.2.3",  # not plain: digits
    ]
    with conn.cursor() as cur:
        made = Lexicon(language).lexemes(cur, batch)
    assert [lexemes is not None for lexemes in made] == [True] * 5 + [False] * 4
    for text, lexemes in zip(batch, made, strict=True):
        if lexemes is not None:
            assert same_as_postgres(conn, language, text, lexemes), text


def test_positions_are_merged_and_capped_as_postgres_does(conn: psycopg.Connection) -> None:
    batch = [
        " ".join(["word", "other"] * 9_000 + ["last"]),  # positions past the last one kept (16,383)
        "repeat " * 300,  # more positions than a lexeme keeps (255)
        "one two one three one",  # a lexeme repeated
    ]
    with conn.cursor() as cur:
        made = Lexicon("english").lexemes(cur, batch)
    for text, lexemes in zip(batch, made, strict=True):
        assert lexemes is not None and same_as_postgres(conn, "english", text, lexemes)
    assert tsvector_text(["repeat"] * 300, as_is).count(",") == 254
    assert tsvector_text(["one", "two", "", "one"], as_is) == "'one':1 'two':2 'one':4"


def test_words_are_asked_once(database_url: str) -> None:
    lexicon = Lexicon("english")
    with psycopg.connect(database_url) as conn, conn.cursor() as cur:
        lexicon.lexemes(cur, ["alpha beta", "beta gamma"])
    # (the connection is closed: a statement now would raise)
    assert lexicon.lexemes(cur, ["Gamma alpha", "BETA"]) == [["gamma", "alpha"], ["beta"]]
    with pytest.raises(psycopg.OperationalError):
        lexicon.lexemes(cur, ["delta"])


@PROPERTIES
@given(batch=st.lists(st.tuples(st.sampled_from(["alice", "bob", None]), texts), min_size=1, max_size=12))
def test_the_search_view_blinds_a_text_as_postgres_parses_it(conn: psycopg.Connection,
                                                             batch: list[tuple[str | None, str]]) -> None:
    """Made here (lexemes from the lexicon, terms from each owner's seal) or by Postgres, a
    text's blind tsvector is that of `to_tsvector` with each lexeme made its owner's term: on
    a first batch, and again once every word and term is remembered (an erased owner's: empty)."""
    ring = Seals(InMemoryKeyRing())
    owners = {"alice": ring.for_writing("alice"), "bob": ring.for_writing("bob"), None: None}
    view = PostgresSearchView("rm_search_lexicon_test")
    seals, written = [owners[owner] for owner, _ in batch], [text for _, text in batch]
    with conn.cursor() as cur:
        for _ in range(2):
            blind = view._blind_plain(cur, seals, written)
            for seal, text, made in zip(seals, written, blind, strict=True):
                if seal is None:
                    assert made == ""
                    continue
                parsed = cur.execute("SELECT to_tsvector('english', %s)::text", (text,)).fetchone()
                assert parsed is not None
                row = cur.execute("SELECT %s::tsvector = %s::tsvector", (made, seal.blind_tsvector(parsed[0]))).fetchone()
                assert row is not None and row[0], text
