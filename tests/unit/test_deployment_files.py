"""The deployment files under infra/ say only what Chronicle and nats-server understand:
every CHRONICLE_* variable given to a Chronicle process is one of its settings, every
command is one the CLI takes, every variable the NATS configs read is given to each node,
and every file mounted from the repository exists. (Their shape runs on loopback in
tests/faults: the NATS cluster from infra/nats/cluster.conf as is.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from entrypoints.cli import parser
from entrypoints.settings import Settings

INFRA = Path(__file__).resolve().parents[2] / "infra"
COMPOSE = INFRA / "compose" / "compose.yaml"
K8S = sorted((INFRA / "k8s").glob("*.yaml"))
NATS_CONFIGS = [INFRA / "nats" / "cluster.conf", INFRA / "nats" / "chronicle.conf"]
SETTINGS = {f"CHRONICLE_{name.upper()}" for name in Settings.model_fields}


def nats_variables(configs: list[Path] = NATS_CONFIGS) -> set[str]:
    """The $VARIABLES the NATS configs read (comments and quoted subjects left out)."""
    text = "\n".join(re.sub(r'#.*|"[^"]*"', "", path.read_text()) for path in configs)
    return set(re.findall(r"\$([A-Z_0-9]+)", text))


def test_the_static_roles_config_reads_only_what_chronicle_conf_reads() -> None:
    """infra/nats/static-roles.conf stands in for chronicle.conf: the same variables do."""
    static = nats_variables([INFRA / "nats" / "static-roles.conf"])
    assert static == nats_variables([INFRA / "nats" / "chronicle.conf"])


def compose_services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def k8s_containers() -> list[dict[str, Any]]:
    containers = []
    for path in K8S:
        for document in yaml.safe_load_all(path.read_text()):
            spec = document.get("spec", {})
            pod = spec.get("template", {}).get("spec", {})
            containers += pod.get("containers", [])
    return containers


def test_compose_gives_chronicle_processes_only_settings_they_have_and_commands_they_take() -> None:
    chronicle = {name: s for name, s in compose_services().items() if s.get("image") == "chronicle:latest"}
    assert {"migrate", "chronicle", "projections", "http", "mcp"} <= set(chronicle)
    for name, service in chronicle.items():
        unknown = {v for v in service.get("environment", {}) if v not in SETTINGS}
        assert not unknown, f"{name}: not settings: {unknown}"
        parser().parse_args(service["command"])  # exits (fails the test) on a command the CLI does not take


def test_compose_nats_nodes_get_every_variable_the_configs_read_and_distinct_names() -> None:
    nodes = {name: s for name, s in compose_services().items() if name.startswith("nats-")}
    assert len(nodes) == 3
    for name, node in nodes.items():
        missing = nats_variables() - set(node["environment"])
        assert not missing, f"{name} misses {missing}"
        assert node["environment"]["CHRONICLE_NATS_NODE"] == name
        assert "/etc/nats/cluster.conf" in node["command"]


def test_compose_mounts_only_files_of_the_repository() -> None:
    for name, service in compose_services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name} mounts {source}, which is not in the repository"


@pytest.mark.parametrize("container", k8s_containers(), ids=lambda c: c["name"])
def test_kubernetes_containers_read_only_known_settings_and_variables(container: dict[str, Any]) -> None:
    names = {variable["name"] for variable in container.get("env", [])}
    if container["image"].startswith("chronicle"):
        assert not names - SETTINGS, f"not settings: {names - SETTINGS}"
        parser().parse_args(container["args"])
    else:
        assert nats_variables() <= names, f"misses {nats_variables() - names}"


def test_kustomize_packs_the_nats_configs_the_cluster_mounts() -> None:
    kustomization = yaml.safe_load((INFRA / "kustomization.yaml").read_text())
    files = kustomization["configMapGenerator"][0]["files"]
    assert {INFRA / f for f in files} == set(NATS_CONFIGS)
    assert all((INFRA / resource).exists() for resource in kustomization["resources"])
