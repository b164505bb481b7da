"""Configuration from CHRONICLE_* environment variables."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Literal

from chronicle_contract.bus import server_urls
from psycopg.conninfo import conninfo_to_dict
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

NATS_SCHEMES = ("nats", "tls", "ws", "wss")


class SetupError(Exception):
    """Why Chronicle cannot start with these settings or servers, in one line that says what
    to set: the command line prints it and exits, with no traceback."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHRONICLE_", extra="ignore")

    database_url: str | None = Field(
        default=None, description="PostgreSQL URL; unset starts an embedded server under data_dir"
    )
    read_database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL of one streaming replica of database_url that serves queries (read-your-writes"
        " waits for its replay); unset: queries read the primary",
    )
    nats_url: str | None = Field(
        default=None, description="NATS URL; unset starts an embedded nats-server under data_dir"
    )
    nats_callout_seed: SecretStr | None = Field(
        default=None,
        description="account nkey seed whose public key is the NATS server's auth_callout issuer; set, this "
        "instance answers the server's auth callouts (infra/nats/chronicle.conf)",
    )
    nats_callout_url: str | None = Field(
        default=None, description="NATS URL with the callout account's credentials, for answering auth callouts"
    )
    nats_account: str = Field(default="CHRONICLE", description="the NATS account users are placed in")
    embedded_nats_auth: bool = Field(
        default=True,
        description="an embedded nats-server requires credentials (auth callout); users connect with their token; "
        "false: an open bus anyone on the machine can read and write",
    )
    embedded_nats_port: int = Field(
        default=0, ge=0, le=65535,
        description="the embedded nats-server's port; 0: the one remembered in data_dir (a free one on the first"
        " start), so a client configured once keeps finding it",
    )
    data_dir: Path = Field(default=Path(".chronicle"), description="where embedded servers keep data")
    subject_prefix: str = Field(default="chronicle", pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    service_name: str = "chronicle"

    jwt_secret: str | None = Field(default=None, description="HS256 secret for bearer tokens")
    jwt_public_key: str | None = Field(default=None, description="RS256 public key (PEM) for bearer tokens")

    log_level: str = "INFO"
    max_in_flight: int = Field(default=2048, ge=1, description="requests handled at once per instance")
    limit_requests_per_minute: int = Field(default=100, ge=0, description="requests a user may make a minute; 0: no limit")
    limit_search_per_minute: int = Field(default=10, ge=0, description="searches a user may make a minute; 0: no limit")
    limit_export_per_minute: int = Field(default=5, ge=0, description="exports a user may make a minute; 0: no limit")
    limit_heavy_per_minute: int = Field(
        default=30, ge=0, description="pareto, lineage and by-example queries a user may make a minute; 0: no limit"
    )
    limit_in_flight_per_user: int = Field(default=64, ge=0, description="a user's requests handled at once; 0: no limit")
    limit_heavy_in_flight_per_user: int = Field(
        default=2, ge=0, description="a user's pareto, lineage and by-example queries handled at once; 0: no limit"
    )
    limit_bulk_factor: int = Field(
        default=100, ge=1, description="how many times each limit a token with the `bulk` role gets"
    )
    flood_refusals: int = Field(
        default=1000, ge=0,
        description="a user's refused requests within CHRONICLE_FLOOD_WINDOW seconds that put them off the bus "
        "(their connections closed, their connects refused) for CHRONICLE_FLOOD_COOLDOWN seconds; 0: never",
    )
    flood_window: float = Field(default=10.0, gt=0, le=3600, description="seconds over which refusals are counted")
    flood_cooldown: float = Field(default=30.0, gt=0, le=86400, description="seconds a flooding user stays off the bus")
    limit_sync_interval: float = Field(
        default=0.2, ge=0, le=10,
        description="seconds between an instance's reports to the others of what its users spent (one budget per "
        "user across the instances); 0: each instance counts alone (N instances: up to N times each limit)",
    )
    check_replies: bool = Field(
        default=False, description="validate every reply against its contract model before sending it (tests do)"
    )
    group_commit_max_batch: int = Field(default=512, ge=1)
    aggregate_cache_size: int = Field(default=20_000, ge=0, description="aggregates the command bus keeps in memory")
    aggregate_cache_bytes: int = Field(
        default=64 * 1024 * 1024, ge=0,
        description="bytes they may hold at most (each counted as its state's JSON); one above a quarter of it is not kept",
    )
    projection_batch_size: int = Field(default=2000, ge=1)
    projection_threads: int = Field(default=1, ge=1, description="threads following the log for the read models")
    rebuild_helper_from: int = Field(
        # (all read models rebuilt, side by side: 10,284 events 1.48 -> 1.36 s, 51,406: 6.5 -> 5.3 s)
        default=20_000, ge=0,
        description="events in the log from which a rebuild (and a first start) has a helper process load every read"
        " model but the heaviest, on another core (below it, starting one saves little); 0: never",
    )
    read_model_vacuum_every: int = Field(
        default=100_000, ge=0, description="events between VACUUM ANALYZE of a read model when autovacuum is off; 0: never"
    )
    run_projections: bool = Field(default=True, description="run the projection engine with the service")
    projection_process: bool = Field(
        default=True, description="run it in a child process (off: in the service's own threads)"
    )
    projection_nice: int = Field(
        # (0: under a write load that fills the cores, a lower priority left the read models
        # behind, projection lag p99 52-81 ms against 34-46 at 0, for no more writes)
        default=0, ge=0, le=19, description="how much lower the child process's CPU priority is (0: the same)"
    )
    snapshot_every: int = Field(
        default=500, ge=0, description="snapshot an aggregate each time its version passes a multiple of this; 0: never"
    )
    snapshot_keep: int = Field(
        default=0, ge=0, description="latest snapshots kept per aggregate; 0: all (an audit at any version starts near it)"
    )
    stream_replicas: int = Field(
        default=1, ge=1, le=5,
        description="copies JetStream keeps of each of Chronicle's streams and stores (3 on a three-node cluster)",
    )
    event_feed: bool = Field(default=True, description="publish every committed event to the event feed's stream")
    feed_process: bool = Field(
        default=True, description="publish it from a child process (off: from the service's own event loop)"
    )
    feed_batch_interval: float = Field(
        default=0.05, ge=0, le=10,
        description="seconds from the start of one event-feed batch to the next under a steady write load (fewer,"
        " larger batches: the feed costs the writes less, its followers wait up to this much longer); 0: a batch"
        " as soon as a commit's events gather",
    )
    event_feed_max_age: float = Field(
        default=0, ge=0, description="seconds the event feed's stream keeps an event; 0: for ever (the whole history)"
    )
    ready_timeout: float = Field(
        default=60, gt=0, description="seconds a start waits for its read models to be built before serving (longer: logged as rebuilding)"
    )
    max_json_bytes: int = Field(
        default=65_536, ge=1_024, le=16 * 1024 * 1024,
        description="bytes a request's JSON field (metadata, document_context, data, candidate, ...) may take as compact JSON",
    )
    database_unavailable_after: float = Field(
        default=2.0, gt=0, le=60,
        description="seconds after which a request that cannot reach Postgres is answered `unavailable`",
    )
    query_wait_timeout: float = Field(default=5.0, gt=0, description="seconds a query waits for min_position")
    query_pool_size: int = Field(default=8, ge=1)
    search_language: str = Field(default="english", description="Postgres text search configuration")
    embedder: Literal["hashed", "openai", "none"] = Field(
        default="hashed",
        description="semantic search's embedder: the built-in offline one (hashed word and character"
        " trigrams), the OpenAI-compatible endpoint at openai_url, or none (full text only)",
    )
    embedding_model: str = Field(default="text-embedding-3-small", description="model name sent to the endpoint")
    embedding_dimensions: int = Field(
        default=0, ge=0, le=16_000,
        description="vector size: the model's own with openai (1536 for text-embedding-3-small); 0: 256 with hashed,"
        " 1536 with openai",
    )
    semantic_min_similarity: float = Field(
        default=0.3, ge=-1, le=1, description="cosine similarity below which a semantic match is not a hit"
    )
    kek_dir: Path | None = Field(
        default=None,
        description="directory of the key-encryption keys that wrap every data key (one file per generation, mode"
        " 0600; the service rotates them after an erasure); unset: the ones the store records, for a new store"
        " data_dir/kek. On several machines, a volume every process mounts read-write",
    )
    kek_file: Path | None = Field(
        default=None,
        description="a static key-encryption key instead: a file holding 32 bytes in base64 (a mounted secret);"
        " the service cannot rotate it (see the README on backups)",
    )
    kek: SecretStr | None = Field(
        default=None,
        description="a static key-encryption key instead, 32 bytes in base64 (never logged); the service cannot"
        " rotate it",
    )
    erasure_epoch: float = Field(
        default=3600, ge=0.5, le=30 * 86400,
        description="seconds within which an erasure's key-encryption key rotation is done: after it, no WAL"
        " segment, replica or backup can unwrap the erased user's key",
    )
    digest_interval: float = Field(
        default=3600, ge=0, description="seconds between audit digests, published only when events arrived; 0: never"
    )

    http_port: int = Field(
        default=8470, ge=0, le=65535, description="the REST API's port with `chronicle serve` and `chronicle http`; 0: none"
    )
    http_host: str = Field(default="127.0.0.1", description="the address the REST API listens on")
    http_cors_origins: list[str] = Field(
        default=["*"], description="origins a browser front end may call the REST API from (JSON list)"
    )
    console_local_sign_in: bool | None = Field(
        default=None,
        description="the web console's one-click sign-in for a loopback browser (POST /api/console/local-sign-in); "
        "unset: on only with the embedded default's token secret (no jwt_secret or jwt_public_key set)",
    )
    console_local_user: str = Field(
        default="local", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._@-]+$",
        description="the user the console's local sign-in signs in (never with a role)",
    )
    console_local_ttl: int = Field(default=8 * 3600, ge=60, le=30 * 24 * 3600,
                                   description="seconds a local sign-in's token lasts")
    http_header_timeout: float = Field(
        default=5.0, gt=0, le=300,
        description="seconds a connection of the REST or MCP HTTP gateway has to send a request's line and headers"
        " (from its opening, or from its next request's first byte); past it the connection is closed (408)",
    )
    http_body_timeout: float = Field(
        default=10.0, gt=0, le=3600, description="seconds a request's body has to arrive once its headers have"
    )
    http_max_connections: int = Field(
        default=1024, ge=1,
        description="connections an HTTP gateway holds at once; past it a new one takes the place of the one that"
        " has waited longest without a request in progress",
    )
    http_max_connections_per_address: int = Field(
        default=128, ge=0,
        description="connections an HTTP gateway holds at once from one client address (more: 429); 0: no cap"
        " (behind a proxy that caps them itself)",
    )
    metrics_port: int = Field(
        default=9464, ge=0, le=65535,
        description="the port `chronicle serve` and `chronicle projections run` serve Prometheus metrics on"
        " (/metrics); 0: none",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="the address the metrics endpoint listens on (it has no authentication)"
    )
    mcp_port: int = Field(default=8471, ge=1, le=65535, description="`chronicle mcp --http`'s port")
    token: SecretStr | None = Field(
        default=None, description="`chronicle mcp` over stdio: the bearer token its tools act with (never logged)"
    )

    @field_validator("database_url", "read_database_url")
    @classmethod
    def _postgres_url(cls, url: str | None) -> str | None:
        if url:
            try:
                conninfo_to_dict(url)
            except Exception:
                raise ValueError(
                    "not a PostgreSQL URL: write postgresql://USER@HOST:PORT/DATABASE (or libpq's key=value form)"
                ) from None
        return url

    @field_validator("nats_url", "nats_callout_url")
    @classmethod
    def _nats_url(cls, url: str | None) -> str | None:
        for server in server_urls(url) if url else []:
            parts = urllib.parse.urlsplit(server)
            try:
                parts.port  # noqa: B018  # (raises on a port that is not a number)
            except ValueError:
                parts = parts._replace(netloc="")
            if parts.scheme not in NATS_SCHEMES or not parts.hostname:
                raise ValueError("not a NATS URL: write nats://HOST:PORT (a cluster's nodes comma-separated)")
        return url

    generator: Literal["offline", "openai"] = Field(
        default="offline", description="artifact generator: the built-in offline one, or an OpenAI-compatible endpoint"
    )
    openai_url: str = Field(default="https://api.openai.com/v1", description="chat-completions base URL")
    openai_model: str = Field(default="gpt-4o-mini", description="model name sent to the endpoint")
    openai_api_key: SecretStr | None = Field(default=None, description="bearer key for the endpoint (never logged)")
    artifact_retention_days: float = Field(
        default=0, ge=0, description="remove artifacts older than this many days; 0: keep forever"
    )
    artifact_max_per_session: int = Field(
        default=0, ge=0, description="keep at most this many artifacts per session (the newest); 0: no limit"
    )
    retention_interval: float = Field(default=3600, gt=0, description="seconds between retention sweeps")
    agent: Literal["offline", "openai"] = Field(
        default="offline", description="job agent: the built-in offline one, or the OpenAI-compatible endpoint above"
    )
    job_workers: int = Field(default=2, ge=0, description="job workers in this process; 0: none (run them elsewhere)")
    job_ack_wait: float = Field(
        default=30, gt=0, description="seconds a job stays with a silent worker before another takes it over"
    )


def load_settings() -> Settings:
    """The settings from the environment; a bad value is a SetupError naming the variable."""
    try:
        return Settings()
    except ValidationError as error:
        raise SetupError(settings_problem(error)) from None


def settings_problem(error: ValidationError) -> str:
    """One line naming each bad variable and why; never its value (it may hold a password)."""
    prefix = Settings.model_config.get("env_prefix", "")
    problems = []
    for found in error.errors():
        name = prefix + "_".join(str(part) for part in found["loc"][:1]).upper()
        message = found["msg"].removeprefix("Value error, ")
        problems.append(f"{name}: {message[:1].lower()}{message[1:]}")
    return "bad setting " + "; ".join(problems) + " (fix it, or unset it for the default)"
