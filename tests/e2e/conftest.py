"""Session fixtures for end-to-end tests: one real control plane, the
MIG-manager stand-in and Prometheus, started once and torn down by the PIDs
started. Only tests under tests/e2e use them, so unit tests need no cluster."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from cluster.binaries import bin_dir
from cluster.controlplane import ControlPlane
from cluster.gpu_nodes import create_cpu_node
from cluster.gpu_operator import install_cluster_policy
from cluster.kube import ensure_namespace, has_default_sa, wait_crd_established, wait_for, wait_node_ready
from cluster.mig_manager_standin import MigManagerStandIn
from cluster.prometheus import DemandExporter, Prometheus

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    # Everything in this folder needs the cluster: mark it e2e, so
    # `pytest -m "not e2e"` is the quick path.
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster_bins() -> Path:
    return bin_dir()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, cluster_bins) -> ControlPlane:
    cp = ControlPlane(tmp_path_factory.mktemp("cluster"), bins=cluster_bins).start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def api_client(cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def cpu_node(core) -> str:
    """A GPU-less node for Jobs and other pods that need no GPU."""
    name = create_cpu_node(core)
    wait_node_ready(core, name)
    return name


@pytest.fixture(scope="session")
def mig_manager(core) -> MigManagerStandIn:
    ensure_namespace(core, "gpu-operator")
    # As with the real operator, the ClusterPolicy names the mig-parted ConfigMap.
    install_cluster_policy(core.api_client, "tessera-mig-parted-config")
    standin = MigManagerStandIn(core, namespace="gpu-operator", configmap_delay=1.0).start()
    yield standin
    standin.stop()


@pytest.fixture
def namespace(core, request) -> str:
    """A fresh namespace per test, ready for pods (its default ServiceAccount exists)."""
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    ensure_namespace(core, name)
    wait_for(lambda: has_default_sa(core, name), 60, f"default ServiceAccount in {name}")
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def kubectl(cluster, cluster_bins):
    """Runs the built kubectl against the test cluster; returns the CompletedProcess."""
    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        done = subprocess.run([str(cluster_bins / "kubectl"), *args], input=input, text=True,
                              capture_output=True, env=env, timeout=240)
        if check and done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done
    return run


@pytest.fixture(scope="session")
def helm(tmp_path_factory, cluster_bins):
    home = tmp_path_factory.mktemp("helm-home")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        # Helm keeps config and cache under HOME-derived paths; keep them private.
        env = {**os.environ, "HELM_CONFIG_HOME": str(home / "config"), "HELM_CACHE_HOME": str(home / "cache"),
               "HELM_DATA_HOME": str(home / "data")}
        return subprocess.run([str(cluster_bins / "helm"), *args], text=True, capture_output=True,
                              env=env, check=check, timeout=120)
    return run


@pytest.fixture(scope="session")
def demand_exporter() -> DemandExporter:
    exporter = DemandExporter().start()
    yield exporter
    exporter.stop()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory, demand_exporter) -> Prometheus:
    """Debian's Prometheus scraping the demand exporter; ready once a query returns data."""
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), {"demand": demand_exporter.address}).start()
    try:
        prom.wait_for('up{job="demand"} == 1', timeout=60)
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="session")
def tessera_crds(kubectl, api_client) -> list[str]:
    """tessera's CRDs (crds/, as checked in) applied to the cluster and Established; their names."""
    crds_dir = HERE.parents[1] / "crds"
    applied = kubectl("apply", "--server-side", "--field-manager=tessera-tests", "-f", str(crds_dir), check=False)
    assert applied.returncode == 0, f"the API server refused crds/: {applied.stderr}"
    names = [path.name.removesuffix(".yaml") for path in sorted(crds_dir.glob("*.yaml"))]
    for name in names:
        wait_crd_established(api_client, name)
    return names
