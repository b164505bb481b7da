"""Random bytes drawn a block at a time: every byte handed out once, per thread, and never by both sides of a fork."""

from __future__ import annotations

import os
import threading
from uuid import UUID

import pytest

from adapters import randomness
from adapters.randomness import BLOCK, random_bytes, uuid4


def test_each_draw_is_as_long_as_asked_across_block_boundaries() -> None:
    sizes = [0, 1, 12, 16, BLOCK - 3, 12, BLOCK, BLOCK + 1, 3 * BLOCK]
    assert [len(random_bytes(n)) for n in sizes] == sizes


def test_no_bytes_are_handed_out_twice_within_or_across_blocks() -> None:
    drawn = [random_bytes(12) for _ in range(3 * BLOCK // 12 + 5)]  # several blocks' worth
    assert len(set(drawn)) == len(drawn)


def test_each_thread_slices_a_block_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = iter([bytes([n]) * BLOCK for n in range(1, 10)])  # the OS's draws, told apart
    monkeypatch.setattr(randomness, "_drawn", randomness._Drawn())
    monkeypatch.setattr(randomness.os, "urandom", lambda n: next(blocks))
    found: dict[str, bytes] = {}

    def draw(name: str) -> None:
        found[name] = random_bytes(4)

    for name in ("a", "b"):  # one after the other: no race, only whose block each slices
        thread = threading.Thread(target=draw, args=(name,))
        thread.start()
        thread.join()
    assert found == {"a": b"\x01" * 4, "b": b"\x02" * 4}
    assert random_bytes(4) == b"\x03" * 4  # this thread's own


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_does_not_hand_out_its_parents_unused_bytes() -> None:
    random_bytes(16)  # a block drawn, most of it unused
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next bytes, to the parent
        try:
            os.write(writer, random_bytes(16))
        finally:
            os._exit(0)
    os.close(writer)
    try:
        childs = os.read(reader, 16)
    finally:
        os.close(reader)
        os.waitpid(pid, 0)
    assert len(childs) == 16
    assert childs != random_bytes(16)  # the parent's next bytes: the child's too, had it kept the block


def test_uuid4_is_a_random_rfc_4122_uuid() -> None:
    ids = [uuid4() for _ in range(1000)]
    assert all(isinstance(i, UUID) and i.version == 4 and i.variant == "specified in RFC 4122" for i in ids)
    assert len(set(ids)) == len(ids)


def test_the_block_comes_from_the_os_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def urandom(n: int) -> bytes:
        calls.append(n)
        return bytes(range(256)) * (n // 256) + bytes(n % 256)

    monkeypatch.setattr(randomness, "_drawn", randomness._Drawn())
    monkeypatch.setattr(randomness.os, "urandom", urandom)
    first, second = random_bytes(12), random_bytes(12)
    assert calls == [BLOCK]  # one system call for both
    assert first + second == bytes(range(24))
