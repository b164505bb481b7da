"""Which key-encryption keys the settings choose, attached to the store: a static one (a
variable, a secret file), a directory the settings name, or, with none of them set, the
ones the store records (for a new store, a directory under the data directory)."""

from __future__ import annotations

import base64

from adapters.store.kek import KekDirectory, StaticKek
from adapters.store.kek_rotation import attach
from adapters.store.postgres import PostgresTarget
from entrypoints.settings import Settings
from services.ports.keys import KeyEncryptionKeys

KEK_VARIABLE = "CHRONICLE_KEK"


def attached_keks(settings: Settings, target: PostgresTarget) -> KeyEncryptionKeys:
    """The variable wins over the file, the file over the directory. A static key is recorded
    as where it is (`env:CHRONICLE_KEK`, `file:PATH`), so that every process of the deployment
    reads it from there, never from the database. With none set, a process opens the KEKs
    the store records (an operator command run with another data directory opens the
    service's; instances starting at once on a new store agree on the first one's); a new
    store gets `<data dir>/kek`. Blocking (attaches them: adapters/store/kek_rotation.py)."""
    if settings.kek is not None:
        secret = base64.b64decode(settings.kek.get_secret_value().strip(), validate=True)
        return attach(target, StaticKek(f"env:{KEK_VARIABLE}", secret))
    if settings.kek_file is not None:
        path = settings.kek_file.absolute()
        return attach(target, StaticKek(f"file:{path}", base64.b64decode(path.read_text().strip(), validate=True)))
    if settings.kek_dir is not None:
        return attach(target, KekDirectory(settings.kek_dir))
    return attach(target, KekDirectory(settings.data_dir / "kek"), or_recorded=True)
