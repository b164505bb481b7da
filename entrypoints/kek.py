"""Which key-encryption keys the settings choose: a static one (a variable, a secret file),
a directory the settings name, or, with none of them set, the ones the store records (by
default a directory under the data directory, made on the store's first start)."""

from __future__ import annotations

import base64

from adapters.store.kek import KekDirectory, StaticKek, keks_at
from adapters.store.kek_rotation import recorded_location
from adapters.store.postgres import PostgresTarget
from entrypoints.settings import Settings
from services.ports.keys import KeyEncryptionKeys

KEK_VARIABLE = "CHRONICLE_KEK"


def key_encryption_keys(settings: Settings, target: PostgresTarget) -> KeyEncryptionKeys:
    """The variable wins over the file, the file over the directory. A static key is recorded
    as where it is (`env:CHRONICLE_KEK`, `file:PATH`), so that every process of the deployment
    reads it from there, never from the database. With none set, a process opens the KEKs
    the store records (an operator command run with another data directory still opens the
    service's); a new store gets `<data dir>/kek`. Blocking (reads the store)."""
    if settings.kek is not None:
        return StaticKek(f"env:{KEK_VARIABLE}", base64.b64decode(settings.kek.get_secret_value().strip(), validate=True))
    if settings.kek_file is not None:
        path = settings.kek_file.absolute()
        return StaticKek(f"file:{path}", base64.b64decode(path.read_text().strip(), validate=True))
    if settings.kek_dir is not None:
        return KekDirectory(settings.kek_dir)
    recorded = recorded_location(target)
    return keks_at(recorded) if recorded is not None else KekDirectory(settings.data_dir / "kek")
