"""Which key-encryption keys the settings choose: a static one (a variable, a secret file), or
the rotating directory (by default under the data directory, made on first start)."""

from __future__ import annotations

import base64

from adapters.store.kek import KekDirectory, StaticKek
from entrypoints.settings import Settings
from services.ports.keys import KeyEncryptionKeys

KEK_VARIABLE = "CHRONICLE_KEK"


def key_encryption_keys(settings: Settings) -> KeyEncryptionKeys:
    """The variable wins over the file, the file over the directory. A static key is recorded
    as where it is (`env:CHRONICLE_KEK`, `file:PATH`), so that every process of the deployment
    (the projection process, the CLI) reads it from there, never from the database."""
    if settings.kek is not None:
        return StaticKek(f"env:{KEK_VARIABLE}", base64.b64decode(settings.kek.get_secret_value().strip(), validate=True))
    if settings.kek_file is not None:
        path = settings.kek_file.absolute()
        return StaticKek(f"file:{path}", base64.b64decode(path.read_text().strip(), validate=True))
    return KekDirectory(settings.kek_dir or settings.data_dir / "kek")
