"""Fixtures of the operator's end-to-end tests (imported by the test modules that use them)."""

from __future__ import annotations

import pytest
from kubernetes import client

from cluster.kube import wait_crd_established
from cluster.vllm_standin import VllmStandin
from cluster.weights_store import S3Store, WeightsStore

from .operator_harness import EXAMPLES, OperatorProcess, delete_pool, make_pool, new_namespace

CRDS = EXAMPLES.parent / "crds"


@pytest.fixture(scope="module")
def crds(kubectl, api_client):
    kubectl("apply", "-f", str(CRDS))
    wait_crd_established(api_client, "compoundinferencesystems.tessera.ai")


@pytest.fixture
def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module")
def s3_store():
    """The examples' adapters in moto's S3 server (tests/cluster/weights_store.py), one per test module."""
    store = S3Store().start()
    yield store
    store.stop()


@pytest.fixture
def weights(tmp_path, s3_store):
    """tessera's fetcher filling a folder of this test's from the S3 server (tests/cluster/weights_store.py)."""
    store = WeightsStore(s3_store, tmp_path / "adapters").start()
    yield store
    store.stop()


@pytest.fixture
def vllm(weights):
    """The AdapterPool servers' stand-in (tests/cluster/vllm_standin.py), one vLLM process per fake pod, finding
    adapters only where the fetcher put them."""
    standin = VllmStandin(adapter_root=weights.folder).start()
    standin.fetcher_url = weights.fetcher_url
    yield standin
    standin.stop()


@pytest.fixture
def run_operator(cluster, core, tmp_path, crds, mig_manager):
    """Factory: a fresh pool of fake H100 nodes, a namespace, and an operator process watching them."""
    started = []

    def make(nodes: int, resync_s: float = 5.0, gpus_per_node: int = 8,
             adapter_servers: VllmStandin | None = None) -> OperatorProcess:
        """`adapter_servers`: the stand-in the AdapterPool servers' pods are reached at (the address hook)."""
        pool = make_pool(core, nodes, gpus_per_node)
        extra = (["--adapter-server-url", adapter_servers.url_template,
                  "--adapter-fetcher-url", adapter_servers.fetcher_url or ""] if adapter_servers else [])
        operator = OperatorProcess(cluster.kubeconfig, tmp_path, new_namespace(core, "op"), pool,
                                   state_namespace=f"tessera-{pool.id}", resync_s=resync_s, extra_args=extra)
        started.append(operator)
        return operator

    yield make
    for operator in started:
        operator.stop()
        core.delete_namespace(operator.namespace)
        delete_pool(core, operator.pool)
        try:
            core.delete_namespace(operator.state_namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
