"""The database and NATS a Chronicle uses: the configured ones, or embedded ones it starts."""

from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from typing import IO

from adapters.embedded import EmbeddedNats, EmbeddedPostgres
from services.entrypoints.settings import Settings


@dataclass
class Servers:
    """The database and NATS URLs in use, starting embedded servers for the missing ones."""

    settings: Settings
    database_url: str = ""
    nats_url: str = ""
    started: list[EmbeddedPostgres | EmbeddedNats] = field(default_factory=list)
    _lock: IO[str] | None = None

    def start(self, *, nats: bool = True) -> Servers:
        """Embedded servers for the URLs not set (NATS only when asked for: the operator's
        commands need just the database)."""
        if not self.settings.database_url or (nats and not self.settings.nats_url):
            self._lock_data_dir()
        self.database_url = self.settings.database_url or self._embed(EmbeddedPostgres(self.settings.data_dir))
        if nats:
            self.nats_url = self.settings.nats_url or self._embed(EmbeddedNats(self.settings.data_dir))
        return self

    def _lock_data_dir(self) -> None:
        """One process at a time runs embedded servers on a data dir."""
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.settings.data_dir / "serve.lock", "w")  # noqa: SIM115  # held until stop
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise RuntimeError(
                f"another Chronicle process runs embedded servers on {self.settings.data_dir}; "
                "stop it, or set CHRONICLE_DATA_DIR / the server URLs"
            ) from None

    def _embed(self, server: EmbeddedPostgres | EmbeddedNats) -> str:
        url = server.start()
        self.started.append(server)
        return url

    def stop(self) -> None:
        while self.started:
            self.started.pop().stop()
        if self._lock is not None:
            self._lock.close()
            self._lock = None
