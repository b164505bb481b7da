"""Key-encryption keys held outside Postgres: a directory of generation files (the default,
which the service rotates), or one static key from a secret file or a variable.

A data key is wrapped with AES-256-GCM under a generation's KEK, bound to whose key it is,
as `nonce (12 bytes) || ciphertext and tag (48 bytes)`. KEKs are never logged.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import threading
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from services.ports.keys import KeyEncryptionKeys, RotationUnavailable

KEK_BYTES = 32
NONCE_BYTES = 12
PREFIX = "kek-"  # a generation's file: kek-<generation>


def wrap_with(cipher: AESGCM, key: bytes, context: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + cipher.encrypt(nonce, key, context)


def unwrap_with(cipher: AESGCM, wrapped: bytes, context: bytes) -> bytes:
    return cipher.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], context)


class KekDirectory(KeyEncryptionKeys):
    """Generations as files `kek-<n>` (32 random bytes, mode 0600) in a directory (0700).

    A generation is written to a temporary file, flushed to disk and then linked to its name,
    which fails if another instance made it first: a file of that name is always whole. A
    destroyed one is overwritten with zeros, flushed, then unlinked. Instances sharing the
    directory (one machine, or a shared volume) see each other's generations: a generation
    not held is looked for on disk again before it counts as missing."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        self._lock = threading.Lock()
        self._ciphers: dict[int, AESGCM] = {}

    @property
    def location(self) -> str:
        return f"dir:{self.path}"

    def generations(self) -> list[int]:
        with self._lock:
            self._load()
            if not self._ciphers:
                self._make(1)
            return sorted(self._ciphers)

    def wrap(self, generation: int, key: bytes, context: bytes) -> bytes:
        return wrap_with(self._cipher(generation), key, context)

    def unwrap(self, generation: int, wrapped: bytes, context: bytes) -> bytes:
        return unwrap_with(self._cipher(generation), wrapped, context)

    def next_generation(self) -> int:
        with self._lock:
            self._load()
            held = sorted(self._ciphers)
            if len(held) > 1:  # a rotation made it and did not finish: finish with it
                return held[-1]
            new = (held[-1] if held else 0) + 1
            self._make(new)
            return new

    def destroy_before(self, generation: int) -> None:
        with self._lock:
            self._load()
            for old in [g for g in self._ciphers if g < generation]:
                file = self._file(old)
                with contextlib.suppress(FileNotFoundError):
                    with open(file, "r+b") as f:
                        f.write(bytes(max(KEK_BYTES, os.fstat(f.fileno()).st_size)))
                        f.flush()
                        os.fsync(f.fileno())
                    file.unlink()
                del self._ciphers[old]
            self._sync_directory()

    def _cipher(self, generation: int) -> AESGCM:
        cipher = self._ciphers.get(generation)
        if cipher is None:
            with self._lock:
                self._load()
                cipher = self._ciphers.get(generation)
        if cipher is None:
            raise KeyError(generation)
        return cipher

    def _load(self) -> None:
        found: dict[int, AESGCM] = {}
        if self.path.is_dir():
            for file in self.path.iterdir():
                suffix = file.name.removeprefix(PREFIX)
                if file.name.startswith(PREFIX) and suffix.isdigit():
                    key = file.read_bytes()
                    if len(key) == KEK_BYTES and any(key):
                        found[int(suffix)] = self._ciphers.get(int(suffix)) or AESGCM(key)
        self._ciphers = found

    def _make(self, generation: int) -> None:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path / f".{PREFIX}{generation}.{secrets.token_hex(4)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEK_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, self._file(generation))
        except FileExistsError:
            pass  # another instance made it at the same moment: theirs it is
        finally:
            temporary.unlink()
        self._sync_directory()
        self._load()

    def _file(self, generation: int) -> Path:
        return self.path / f"{PREFIX}{generation}"

    def _sync_directory(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class StaticKek(KeyEncryptionKeys):
    """One key-encryption key the deployment gives (a variable, a read-only secret file): it
    wraps the data keys but cannot be rotated by the service."""

    def __init__(self, location: str, key: bytes) -> None:
        if len(key) != KEK_BYTES:
            raise ValueError(f"a key-encryption key is {KEK_BYTES} bytes (base64 in a variable or file)")
        self._location = location
        self._cipher = AESGCM(key)

    @property
    def location(self) -> str:
        return self._location

    def generations(self) -> list[int]:
        return [1]

    def wrap(self, generation: int, key: bytes, context: bytes) -> bytes:
        if generation != 1:
            raise KeyError(generation)
        return wrap_with(self._cipher, key, context)

    def unwrap(self, generation: int, wrapped: bytes, context: bytes) -> bytes:
        if generation != 1:
            raise KeyError(generation)
        return unwrap_with(self._cipher, wrapped, context)

    def next_generation(self) -> int:
        raise RotationUnavailable(f"the key-encryption key at {self._location} is static")

    def destroy_before(self, generation: int) -> None:
        raise RotationUnavailable(f"the key-encryption key at {self._location} is static")


def keks_at(location: str) -> KeyEncryptionKeys:
    """The key-encryption keys a store records it is wrapped by (`chronicle.kek_state.location`)."""
    kind, _, where = location.partition(":")
    if kind == "dir":
        return KekDirectory(Path(where))
    if kind == "file":
        return StaticKek(location, base64.b64decode(Path(where).read_text().strip(), validate=True))
    if kind == "env":
        value = os.environ.get(where)
        if not value:
            raise LookupError(f"the key-encryption key is in the variable {where}, which is not set")
        return StaticKek(location, base64.b64decode(value.strip(), validate=True))
    raise LookupError(f"no key-encryption keys known at {location!r}")


class AttachedKeks(KeyEncryptionKeys):
    """The KEKs a process is given once it has started (chosen by the settings and attached
    to the store, entrypoints/kek.py): the composition root builds this empty, connecting to
    nothing, and hands it to the key ring, the service keys and the rotation, which use it
    only after the start has attached the real ones."""

    def __init__(self) -> None:
        self._keks: KeyEncryptionKeys | None = None

    def attach(self, keks: KeyEncryptionKeys) -> None:
        self._keks = keks

    @property
    def attached(self) -> KeyEncryptionKeys:
        if self._keks is None:
            raise RuntimeError("the key-encryption keys are used before the start attached them")
        return self._keks

    @property
    def location(self) -> str:
        return self.attached.location

    def generations(self) -> list[int]:
        return self.attached.generations()

    def wrap(self, generation: int, key: bytes, context: bytes) -> bytes:
        return self.attached.wrap(generation, key, context)

    def unwrap(self, generation: int, wrapped: bytes, context: bytes) -> bytes:
        return self.attached.unwrap(generation, wrapped, context)

    def next_generation(self) -> int:
        return self.attached.next_generation()

    def destroy_before(self, generation: int) -> None:
        self.attached.destroy_before(generation)
