"""What a newcomer meets first, without a server: bad settings said in one line, the roles a
token may name, `./dev`'s usage, the test servers' choice printed, the developer's data dir
left alone by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.embedded import forget_dead_users
from adapters.store.postgres import PostgresTarget
from entrypoints import cli
from entrypoints.settings import SetupError, load_settings
from tests.servers import DATABASE_VARIABLE, NATS_VARIABLE, REPOSITORY, DataDirWatch, ServerChoice


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("CHRONICLE_HTTP_PORT", "abc", "valid integer"),
        ("CHRONICLE_DATABASE_URL", "notaurl", "postgresql://"),
        ("CHRONICLE_NATS_URL", "garbage", "nats://HOST:PORT"),
        ("CHRONICLE_NATS_URL", "nats://127.0.0.1:xx", "nats://HOST:PORT"),
        ("CHRONICLE_READ_DATABASE_URL", "db.example", "postgresql://"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable_and_never_its_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SetupError) as refused:
        load_settings()
    message = str(refused.value)
    assert "\n" not in message and variable in message and said in message
    assert f"'{value}'" not in message and f"={value}" not in message


def test_good_urls_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONICLE_DATABASE_URL", "host=/tmp/socket dbname=test user=postgres")  # (libpq's form)
    monkeypatch.setenv("CHRONICLE_NATS_URL", "nats://chronicle:pw@n1:4222, nats://n2:4222")
    settings = load_settings()
    assert settings.database_url and settings.nats_url


def test_a_token_names_only_roles_that_exist(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.parser().parse_args(["token", "dave", "--role", "nope"])
    assert refused.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
    args = cli.parser().parse_args(["token", "dave", "--role", "auditor", "--role", "feed"])
    assert args.roles == ["auditor", "feed"]


def test_the_ready_lines_postgres_is_a_url_psql_accepts() -> None:
    socket = PostgresTarget("postgresql://postgres:@/postgres?host=/tmp/data/postgres").describe()
    assert socket == "postgresql://postgres@/postgres?host=/tmp/data/postgres&port=5432"
    tcp = PostgresTarget("postgresql://alice:secret@db.example:6543/chronicle").describe()
    assert tcp == "postgresql://alice@db.example:6543/chronicle"  # (never the password)


def test_dev_prints_clean_usage() -> None:
    unknown = subprocess.run([str(REPOSITORY / "dev"), "frobnicate"], capture_output=True, text=True, timeout=60)
    helped = subprocess.run([str(REPOSITORY / "dev"), "help"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and helped.returncode == 0
    assert unknown.stderr.splitlines()[0] == "./dev: unknown command 'frobnicate'"
    for usage in (unknown.stderr, helped.stdout):
        assert "./dev serve" in usage and "./dev python ARGS" in usage
        assert "set -euo" not in usage and not any(line.startswith("#") for line in usage.splitlines())


def test_the_test_servers_are_chosen_by_variables_only() -> None:
    bare = ServerChoice.of({})
    assert bare == ServerChoice(None, None)
    assert bare.describe() == (f"test servers: Postgres embedded (set {DATABASE_VARIABLE} for another); "
                               f"NATS embedded (set {NATS_VARIABLE} for another)")
    named = ServerChoice.of({DATABASE_VARIABLE: "postgresql://postgres@127.0.0.1:5432/postgres",
                             NATS_VARIABLE: "nats://127.0.0.1:4222"})
    assert named.describe() == (f"test servers: Postgres postgresql://postgres@127.0.0.1:5432/postgres "
                                f"({DATABASE_VARIABLE}); NATS nats://127.0.0.1:4222 ({NATS_VARIABLE})")


@pytest.mark.parametrize("named", [False, True])
def test_a_test_run_prints_its_servers_first_even_quiet(named: bool) -> None:
    # (Without this run's temporary root: the run below makes its own.)
    env = {k: v for k, v in os.environ.items() if k not in (DATABASE_VARIABLE, NATS_VARIABLE, "PYTEST_DEBUG_TEMPROOT")}
    if named:
        env.update({DATABASE_VARIABLE: "postgresql://postgres@127.0.0.1:5432/postgres", NATS_VARIABLE: "nats://127.0.0.1:4222"})
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_contract_values.py"],
        cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[0] == ServerChoice.of(env).describe()


def test_the_watch_sees_any_write_under_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / ".chronicle"
    absent = DataDirWatch.begin(data_dir)
    assert absent.changed() == []
    (data_dir / "postgres").mkdir(parents=True)
    assert absent.changed() == [".", "postgres"]

    (data_dir / "jwt-secret").write_text("kept")
    watch = DataDirWatch.begin(data_dir)
    (data_dir / "jwt-secret").write_text("changed!")
    (data_dir / "serve.lock").write_text("")
    assert watch.changed() == ["jwt-secret", "serve.lock"]


def test_the_watch_leaves_a_running_services_own_files_to_it(tmp_path: Path) -> None:
    """A developer's `./dev serve` on the data dir writes its servers' files: those are its own."""
    (tmp_path / "serve.lock").write_text(f'{{"pid": {os.getpid()}, "database_url": "x", "nats_url": "y"}}')
    watch = DataDirWatch.begin(tmp_path)
    assert watch.served
    (tmp_path / "postgres").mkdir()
    (tmp_path / "postgres" / "base").write_text("pages")
    (tmp_path / "nats.log").write_text("log")
    assert watch.changed() == []
    (tmp_path / "nats-secrets.json").write_text("{}")
    assert watch.changed() == ["nats-secrets.json"]


def test_a_killed_process_does_not_keep_the_embedded_postgres_running(tmp_path: Path) -> None:
    """pgserver stops its server when the last process listed as using it stops it: a pid of
    a process that was killed is dropped from the list before anyone joins it."""
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    pids = tmp_path / ".handle_pids.json"
    pids.write_text(f"[{killed.pid}, {os.getpid()}]")
    forget_dead_users(pids)
    assert pids.read_text() == f"[{os.getpid()}]"
