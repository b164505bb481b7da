"""Typed arrays (adapters/store/arrays.py) dump the very bytes psycopg's own list dumper writes
for the same values as that element type, and are found by their class once registered."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import adapt, postgres
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.numeric import Int4, Int8

from adapters.store.arrays import ArrayDumper, Byteas, Int4s, Int8s, PgArray, Texts, Uuids, register


def psycopgs(values: list[Any]) -> bytes:
    """What psycopg's own list dumper writes for these values, in binary."""
    dumped = Transformer().get_dumper(values, PyFormat.BINARY).dump(values)
    assert dumped is not None
    return bytes(dumped)


def ours(array: PgArray) -> bytes:
    dumped = ArrayDumper(type(array), Transformer()).dump(array)
    assert dumped is not None
    return bytes(dumped)


def maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """Lists of these values with nulls among them (never only nulls: psycopg cannot tell
    such a list's type, so it writes it as text)."""
    return st.lists(st.one_of(st.none(), values), max_size=8).filter(lambda v: any(x is not None for x in v))


@given(st.lists(st.uuids(), min_size=1, max_size=8))  # (empty: below)
def test_uuids(values: list[Any]) -> None:
    assert ours(Uuids(values)) == psycopgs(values)


@given(maybe(st.integers(-(2**63), 2**63 - 1)))
def test_int8s(values: list[int | None]) -> None:
    assert ours(Int8s(values)) == psycopgs([None if v is None else Int8(v) for v in values])


@given(maybe(st.integers(-(2**31), 2**31 - 1)))
def test_int4s(values: list[int | None]) -> None:
    assert ours(Int4s(values)) == psycopgs([None if v is None else Int4(v) for v in values])


@given(maybe(st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"))))
def test_texts(values: list[str | None]) -> None:
    assert ours(Texts(values)) == psycopgs(values)


@given(maybe(st.binary(max_size=64)))
def test_byteas(values: list[bytes | None]) -> None:
    assert ours(Byteas(values)) == psycopgs(values)


@pytest.mark.parametrize("array", [Uuids, Int8s, Int4s, Texts, Byteas])
def test_an_empty_array_is_an_empty_array_of_its_type(array: type[PgArray]) -> None:
    # psycopg writes an empty list of no known type as text ("{}", for the server to cast)
    dumped = ours(array())
    assert dumped == b"\0\0\0\0\0\0\0\0" + array.element_oid.to_bytes(4, "big")


def test_registered_arrays_are_found_by_their_class_and_others_are_not() -> None:
    context = adapt.AdaptersMap(postgres.adapters)  # (a map of our own, not psycopg's global one)
    register(context)
    transformer = Transformer(context)
    for array in (Uuids, Int8s, Int4s, Texts, Byteas):
        dumper = transformer.get_dumper(array(), PyFormat.BINARY)
        assert isinstance(dumper, ArrayDumper) and dumper.oid == array.array_oid
        assert type(transformer.get_dumper(array(), PyFormat.AUTO)) is ArrayDumper
    assert not isinstance(transformer.get_dumper([1], PyFormat.BINARY), ArrayDumper)
    # without registering, psycopg dumps them as the lists they are
    plain = Transformer(adapt.AdaptersMap(postgres.adapters))
    assert not isinstance(plain.get_dumper(Int8s([1]), PyFormat.BINARY), ArrayDumper)
