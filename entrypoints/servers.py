"""The database and NATS a Chronicle uses: the configured ones, or embedded ones it starts."""

from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from typing import IO

from adapters.embedded import BusSecrets, EmbeddedNats, EmbeddedPostgres
from adapters.messaging.connect import without_credentials
from entrypoints.settings import Settings


@dataclass(frozen=True)
class Callout:
    """How this instance answers the NATS server's auth callouts."""

    url: str  # with the callout account's credentials
    issuer_seed: str


@dataclass
class Servers:
    """The database and NATS URLs in use, starting embedded servers for the missing ones."""

    settings: Settings
    database_url: str = ""
    nats_url: str = ""  # what users connect to (with their token, when the bus needs credentials)
    service_nats_url: str = ""  # the same server, with Chronicle's own credentials when it needs them
    callout: Callout | None = None
    started: list[EmbeddedPostgres | EmbeddedNats] = field(default_factory=list)
    _lock: IO[str] | None = None

    def start(self, *, nats: bool = True) -> Servers:
        """Embedded servers for the URLs not set (NATS only when asked for: the operator's
        commands need just the database)."""
        settings = self.settings
        if not settings.database_url or (nats and not settings.nats_url):
            self._lock_data_dir()
        self.database_url = settings.database_url or self._embed(EmbeddedPostgres(settings.data_dir))
        if nats and settings.nats_url:
            self.service_nats_url = settings.nats_url
            self.nats_url = without_credentials(settings.nats_url)  # (logged, and what tests hand users)
            if settings.nats_callout_seed is not None:
                if not settings.nats_callout_url:
                    raise ValueError("CHRONICLE_NATS_CALLOUT_SEED needs CHRONICLE_NATS_CALLOUT_URL")
                self.callout = Callout(settings.nats_callout_url, settings.nats_callout_seed.get_secret_value())
        elif nats:
            auth = BusSecrets.kept_in(settings.data_dir) if settings.embedded_nats_auth else None
            self.nats_url = self.service_nats_url = self._embed(EmbeddedNats(settings.data_dir, auth=auth))
            if auth is not None:
                self.service_nats_url = auth.service_url(self.nats_url)
                self.callout = Callout(auth.callout_url(self.nats_url), auth.issuer_seed)
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
