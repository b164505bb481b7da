"""The dependency rules of docs/architecture.md, checked on the code's own imports.

Layers, lowest first: the wire contract; the domain and the client; the application
(capabilities, runtime, ports) and the read models' logic; the adapters; the entry
points. An import may only point down. Type-checking-only imports count like any other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients" / "python"
SERVER_PACKAGES = ("psycopg", "psycopg_pool", "eventsourcing", "pgserver", "starlette", "fastapi", "uvicorn", "mcp")

# What each package of ours may import of ours (itself included), the most specific first.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "chronicle_contract": ("chronicle_contract",),
    "chronicle_client": ("chronicle_contract", "chronicle_client"),
    "domain": ("domain",),
    "projections": ("domain", "services.ports", "projections"),
    "services.ports": ("domain", "chronicle_contract", "services.ports"),
    "services.runtime": ("domain", "chronicle_contract", "services.ports", "services.runtime"),
    # (each capability, services/<name>: these and itself; see rule_of)
    "services": ("domain", "chronicle_contract", "services.ports", "services.runtime"),
    "adapters": ("domain", "chronicle_contract", "services.ports", "projections", "adapters"),
    "entrypoints.gateways": ("chronicle_contract", "chronicle_client", "entrypoints.gateways"),
    "entrypoints": ("domain", "chronicle_contract", "chronicle_client", "services", "projections", "adapters", "entrypoints"),
}
OURS = ("chronicle_contract", "chronicle_client", "domain", "projections", "services", "adapters", "entrypoints")

# Imports that break the rules above today, each to be removed as its layer is mended
# (issue 28). A new one fails the test; a mended one must leave this list.
KNOWN_BREACHES: dict[str, set[str]] = {
}


def source_files() -> Iterator[tuple[str, Path]]:
    """(module name, path) of every module of ours."""
    for base, packages in ((ROOT, ("domain", "projections", "services", "adapters", "entrypoints")),
                           (CLIENTS, ("chronicle_contract", "chronicle_client"))):
        for package in packages:
            for path in sorted((base / package).rglob("*.py")):
                parts = path.relative_to(base).with_suffix("").parts
                yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


MODULES = dict(source_files())


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement names, `from a import b` as `a.b` when that is a module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)
    return found


def under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def rule_of(module: str) -> tuple[str, ...]:
    package = next(p for p in sorted(MAY_IMPORT, key=len, reverse=True) if under(module, p))
    if package == "services":  # a capability: the runtime, the ports and its own folder, no other capability
        return (*MAY_IMPORT[package], ".".join(module.split(".")[:2]))
    return MAY_IMPORT[package]


def breaches(module: str) -> set[str]:
    allowed = rule_of(module)
    return {m for m in imported_modules(MODULES[module]) if under(m, *OURS) and not under(m, *allowed)}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    assert breaches(module) - KNOWN_BREACHES.get(module, set()) == set()


def test_the_list_of_known_breaches_holds_only_real_ones() -> None:
    mended = {m: sorted(known - breaches(m)) for m, known in KNOWN_BREACHES.items() if known - breaches(m)}
    assert mended == {}, "remove these from KNOWN_BREACHES"


def test_no_import_cycle() -> None:
    graph = {m: {i for i in imported_modules(p) if i in MODULES and i != m} for m, p in MODULES.items()}
    # A package's __init__ re-exporting its modules is not a cycle of design: leave those arrows out.
    graph = {m: {i for i in deps if not under(m, i)} for m, deps in graph.items()}
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


@pytest.mark.parametrize("module", sorted(m for m in MODULES if under(m, "domain")))
def test_domain_imports_no_io(module: str) -> None:
    assert [m for m in imported_modules(MODULES[module]) if under(m, "psycopg", "nats", "orjson")] == []


def test_the_client_distribution_loads_nothing_of_the_server() -> None:
    """Importing every module of clients/python loads no server package and no module of the server."""
    names = [m for m in MODULES if under(m, "chronicle_contract", "chronicle_client")]
    program = (
        "import sys, importlib\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_PACKAGES + OURS[2:]!r}))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", program], cwd=CLIENTS, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_the_client_distribution_declares_no_server_dependency() -> None:
    import tomllib

    declared = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]["dependencies"]
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip() for d in declared)
    assert names == ["nats-py", "orjson", "pydantic"]
