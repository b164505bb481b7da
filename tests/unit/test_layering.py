"""The dependency rules of docs/architecture.md, checked on the code's own imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ("psycopg", "psycopg_pool", "eventsourcing.persistence", "eventsourcing.postgres")


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules_of(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_client_and_contract_load_no_database_driver() -> None:
    contract = [f"services.contract.{p.stem}" for p in modules_of("services/contract") if p.stem != "__init__"]
    program = (
        "import sys, importlib\n"
        f"for name in {['services.client', *contract]!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.startswith({DRIVERS!r})))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


@pytest.mark.parametrize("path", modules_of("domain"), ids=lambda p: p.name)
def test_domain_imports_no_io_and_no_outer_layer(path: Path) -> None:
    outer = [m for m in imported_modules(path) if under(m, "psycopg", "nats", "orjson", "adapters", "services", "projections")]
    assert outer == []


@pytest.mark.parametrize("path", modules_of("adapters"), ids=lambda p: p.name)
def test_adapters_depend_on_ports_and_the_contract_only(path: Path) -> None:
    reached = [m for m in imported_modules(path) if under(m, "services") and not under(m, "services.contract", "services.ports")]
    assert reached == []


@pytest.mark.parametrize("path", modules_of("projections"), ids=lambda p: p.name)
def test_projections_import_no_service(path: Path) -> None:
    # (the ports are declarations only: the semantic read model embeds through one)
    assert [m for m in imported_modules(path) if under(m, "services") and not under(m, "services.ports")] == []


@pytest.mark.parametrize("path", modules_of("services/contract") + modules_of("services/client"), ids=lambda p: p.name)
def test_contract_and_client_reach_no_server_side_package(path: Path) -> None:
    allowed = ("services.contract", "services.client")
    reached = [m for m in imported_modules(path) if under(m, "services", "adapters", "projections") and not under(m, *allowed)]
    assert reached == []


@pytest.mark.parametrize("path", modules_of("services/gateways"), ids=lambda p: p.name)
def test_gateways_are_clients_of_the_service(path: Path) -> None:
    """REST and MCP reach the service over NATS like any client: no server-side package."""
    allowed = ("services.contract", "services.client", "services.gateways")
    reached = [m for m in imported_modules(path) if under(m, "services", "adapters", "projections") and not under(m, *allowed)]
    assert reached == []
