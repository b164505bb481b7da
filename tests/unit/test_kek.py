"""Key-encryption keys outside Postgres: the rotating directory, a static key, and the rotator's loop."""

from __future__ import annotations

import asyncio
import base64
import secrets
import stat
import threading
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from adapters.store.kek import KekDirectory, StaticKek, keks_at
from services.ports.keys import KeyRotation, RotationUnavailable
from services.users.rotation import KeyRotator

KEY = secrets.token_bytes(32)


def test_a_directory_makes_its_first_generation_privately_and_wraps_bound_to_whose_key(tmp_path: Path) -> None:
    keks = KekDirectory(tmp_path / "kek")
    assert keks.generations() == [1]
    assert stat.S_IMODE((tmp_path / "kek").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "kek" / "kek-1").stat().st_mode) == 0o600
    wrapped = keks.wrap(1, KEY, b"alice")
    assert KEY not in wrapped and keks.unwrap(1, wrapped, b"alice") == KEY
    with pytest.raises(InvalidTag):
        keks.unwrap(1, wrapped, b"bob")  # a wrapped key moved to another user opens nothing


def test_a_rotation_keeps_its_new_generation_across_a_crash_and_destroys_the_old_one(tmp_path: Path) -> None:
    keks = KekDirectory(tmp_path / "kek")
    wrapped = keks.wrap(keks.generations()[-1], KEY, b"alice")
    assert keks.next_generation() == 2
    assert KekDirectory(tmp_path / "kek").next_generation() == 2  # (a restart finishes with the same one)
    keks.destroy_before(2)
    assert keks.generations() == [2] and sorted(p.name for p in (tmp_path / "kek").iterdir()) == ["kek-2"]
    with pytest.raises(KeyError):
        KekDirectory(tmp_path / "kek").unwrap(1, wrapped, b"alice")


def test_another_process_sees_a_generation_made_after_it_loaded(tmp_path: Path) -> None:
    reader, rotator = KekDirectory(tmp_path / "kek"), KekDirectory(tmp_path / "kek")
    assert reader.generations() == [1]
    new = rotator.next_generation()
    assert reader.unwrap(new, rotator.wrap(new, KEY, b"u"), b"u") == KEY


def test_a_static_key_from_a_variable_or_file_wraps_but_cannot_rotate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = base64.b64encode(secrets.token_bytes(32)).decode()
    monkeypatch.setenv("SOME_KEK", encoded)
    (tmp_path / "kek.b64").write_text(encoded + "\n")
    from_variable, from_file = keks_at("env:SOME_KEK"), keks_at(f"file:{tmp_path / 'kek.b64'}")
    assert from_file.unwrap(1, from_variable.wrap(1, KEY, b"u"), b"u") == KEY
    with pytest.raises(RotationUnavailable):
        from_variable.next_generation()
    with pytest.raises(ValueError):
        StaticKek("env:SHORT", b"too short")
    with pytest.raises(LookupError):
        keks_at("env:CHRONICLE_TEST_NO_SUCH_VARIABLE")


class ScriptedRotation(KeyRotation):
    def __init__(self, due: list[float | None], static: bool = False) -> None:
        self.due = due
        self.static = static
        self.rotated = threading.Event()  # (rotate runs in a worker thread)

    def due_in(self, epoch: float) -> float | None:
        return self.due.pop(0) if self.due else None

    def rotate(self) -> bool:
        if self.static:
            raise RotationUnavailable("static")
        self.rotated.set()
        return True


async def test_the_rotator_rotates_when_one_is_due() -> None:
    rotation = ScriptedRotation([None, 0.0])
    rotator = KeyRotator(rotation, epoch=0.8)  # looks every 0.1 s
    await rotator.start()
    try:
        assert await asyncio.to_thread(rotation.rotated.wait, 5)
    finally:
        await rotator.stop()


async def test_the_rotator_stops_trying_a_static_key() -> None:
    rotator = KeyRotator(ScriptedRotation([0.0], static=True), epoch=0.8)
    await rotator.start()
    assert rotator.task is not None
    await asyncio.wait_for(rotator.task, 5)  # it ends (logged) instead of looping on it
