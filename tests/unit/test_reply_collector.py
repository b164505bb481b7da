"""How parsing a big reply leaves Python's garbage collector (clients/python/chronicle_client/connection.py)."""

from __future__ import annotations

import gc

import pytest
from chronicle_client.transport import collector_paused


def made_in_block(promote: bool = True) -> list[dict[str, list[int]]]:
    gc.collect()  # counts from zero: afterwards one young collection at most, never an older one
    with collector_paused(promote=promote):
        return [{"n": [n]} for n in range(1_000)]  # tracked objects, as a page's models are


def oldest_generation() -> set[int]:
    return {id(thing) for thing in gc.get_objects(generation=2)}


def test_what_a_block_made_is_in_the_oldest_generation_and_the_collector_runs_again() -> None:
    made = made_in_block()
    assert gc.isenabled()
    oldest = oldest_generation()
    assert id(made) in oldest and all(id(entry) in oldest for entry in made), "no young collection walks them"


def test_a_small_reply_is_only_paused_for() -> None:
    made = made_in_block(promote=False)
    assert gc.isenabled() and id(made) not in oldest_generation()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        made = made_in_block()
        assert not gc.isenabled()
        assert id(made) not in oldest_generation()
    finally:
        gc.enable()


def test_objects_someone_froze_stay_frozen() -> None:
    gc.freeze()  # (made_in_block's collection leaves them be: frozen objects are never collected)
    try:
        frozen = gc.get_freeze_count()
        made = made_in_block()
        # Frozen objects that die meanwhile (other threads run) lower the count; an unfreeze
        # would empty it and a freeze would raise it by the block's thousand objects.
        assert 0 < gc.get_freeze_count() <= frozen and gc.isenabled()
        assert id(made) not in oldest_generation(), "only paused: nothing was moved"
    finally:
        gc.unfreeze()


def test_an_error_in_the_block_leaves_the_collector_on() -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a reply that does not validate")
    assert gc.isenabled()
