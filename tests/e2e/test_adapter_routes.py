"""A stable route per adapter, end to end: a Service per adapter whose EndpointSlice holds exactly its pods.

The operator runs as a subprocess against the test cluster, the vLLM
stand-in answering for each fake pod (as in test_adapter_loading.py, whose
fixtures and steps this reuses). What each server must hold is `tessera
place`'s own placement of the same file; what a pod holds is what the
stand-in registered for it; which pods are Ready is what the API server
says (KWOK's stages leave the readiness gate to tessera, so a pod is Ready
only once its server lists its adapters). The cluster's
kube-controller-manager runs its EndpointSlice and mirroring controllers:
a slice they considered theirs would be rewritten or removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from cluster.kube import wait_crd_established, wait_for
from cluster.weights_store import adapter_files, adapter_weights
from tessera.operator.reconcile.adapter_loading import HOLDS_PREFIX, SOURCES_ANNOTATION, source_digest
from tessera.operator.reconcile.adapter_routes import SERVICE_NAME_LABEL, SLICE_MANAGER, SLICE_MANAGER_LABEL
from tessera.operator.vllm import VllmClient
from tessera.planner.placement import place

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .test_adapter_loading import is_ready, placed, server_pods, start_ready_pool
from .test_adapter_pools import POOL, POOL_FILE, adapter_pool, wait_pool_ready
from .test_adapter_replacement import operator_placement, problem_of, rate_changes, servers_by_name

WAIT_S = 90
INFERENCE_MODULE = "sigs.k8s.io/gateway-api-inference-extension@v1.3.0"
INFERENCE_POOL_CRD = "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"


@pytest.fixture(scope="module")
def inference_pool_crd(kubectl, api_client, tmp_path_factory):
    """The Gateway API Inference Extension's InferencePool CRD of v1.3.0, as its Go module ships it: `go mod
    download` puts the module in the module cache (fetching it where it is not there yet), the CRD is applied
    from there, and removed after this module's tests."""
    go = shutil.which("go")
    assert go, "the Go toolchain fetches the Gateway API Inference Extension's CRDs (tests/cluster/README.md)"
    work = tmp_path_factory.mktemp("inference-extension")
    found = subprocess.run([go, "mod", "download", "-json", INFERENCE_MODULE], cwd=work, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "GOFLAGS": "-mod=mod"})
    assert found.returncode == 0, found.stdout + found.stderr
    crd = Path(json.loads(found.stdout)["Dir"]) / INFERENCE_POOL_CRD
    kubectl("apply", "--server-side", "-f", str(crd))
    wait_crd_established(api_client, "inferencepools.inference.networking.k8s.io")
    yield crd
    kubectl("delete", "-f", str(crd), "--wait=false")


def route(adapter: str) -> str:
    return f"{POOL}-{adapter}"


def slice_pods(discovery, namespace: str, adapter: str) -> list[str] | None:
    """The pods the adapter's route lists (None: no slice yet)."""
    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector=f"{SERVICE_NAME_LABEL}={route(adapter)}").items
    if not slices:
        return None
    (found,) = slices
    return sorted(e.target_ref.name for e in found.endpoints or [])


def holders(core, namespace: str, servers: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each adapter's Ready pods, by the placement: the pods of the server it is placed on."""
    found: dict[str, list[str]] = {}
    for deployment, adapters in servers.items():
        pods = sorted(p.metadata.name for p in server_pods(core, namespace, deployment) if is_ready(p))
        for adapter in adapters:
            found[adapter] = pods
    return found


def routes_match(discovery, core, namespace: str, servers: dict[str, list[str]]) -> dict[str, list[str]] | None:
    """Each adapter's holders once every route lists exactly them and each server has a Ready pod; else None."""
    expected = holders(core, namespace, servers)
    if any(not pods for pods in expected.values()):
        return None
    return expected if all(slice_pods(discovery, namespace, a) == pods for a, pods in expected.items()) else None


def edit_seen(custom, namespace: str) -> bool:
    """The operator has reconciled the pool's last edit: its status is written after the Deployments were applied
    (so rolled_out sees their new generation), the loads and the routes."""
    found = adapter_pool(custom, namespace) or {}
    return (found.get("status") or {}).get("observedGeneration") == found["metadata"]["generation"]


def rolled_out(core, namespace: str, servers: dict[str, list[str]]) -> bool:
    """Every server Deployment has its one pod of the current template, and no other pod of the pool is left (a
    pod of the template before, being replaced, may hold the adapter placed on its Deployment meanwhile)."""
    apps = client.AppsV1Api(core.api_client)
    for name in servers:
        status = apps.read_namespaced_deployment(name, namespace)
        if (status.status.observed_generation != status.metadata.generation
                or status.status.updated_replicas != 1 or status.status.available_replicas != 1):
            return False
    pods = core.list_namespaced_pod(namespace, label_selector=f"tessera.ai/pool={POOL}").items
    return len(pods) == len(servers)


def server_of(servers: dict[str, list[str]], adapter: str) -> str | None:
    return next((d for d, adapters in servers.items() if adapter in adapters), None)


def a_re_placement() -> tuple[dict, dict[str, list[str]], str]:
    """An edit of the pool (a tenth of its adapters 10% hotter) that makes the operator move an adapter to another
    server: the edited pool, its placement (re-placed against the one applied), and the adapter it moves."""
    document = yaml.safe_load(POOL_FILE.read_text())
    first = place(problem_of(document), "tessera")
    before = servers_by_name(first)
    for edited in rate_changes(document):
        after = operator_placement(edited, first)
        moved = [a for names in after.values() for a in names if server_of(after, a) != server_of(before, a)]
        if moved:
            return edited, after, moved[0]
    raise AssertionError("no 10% rate change moves an adapter: pick another edit")


def test_each_adapters_service_routes_exactly_to_the_ready_pods_holding_it(run_operator, core, custom, kubectl, vllm):
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    discovery = client.DiscoveryV1Api(core.api_client)
    servers = placed()
    expected = wait_for(lambda: routes_match(discovery, core, operator.namespace, servers), WAIT_S,
                        "every adapter's route lists exactly its server's Ready pods", interval=0.5)
    adapter, pods = next(iter(expected.items()))
    service = core.read_namespaced_service(route(adapter), operator.namespace)
    assert service.spec.selector is None and service.spec.cluster_ip  # its endpoints are only tessera's slice
    (endpoints,) = discovery.list_namespaced_endpoint_slice(
        operator.namespace, label_selector=f"{SERVICE_NAME_LABEL}={route(adapter)}").items
    assert endpoints.metadata.labels[SLICE_MANAGER_LABEL] == SLICE_MANAGER
    for name in pods:  # what the pod's server registered, and its labels say so
        pod = core.read_namespaced_pod(name, operator.namespace)
        assert adapter in vllm.listed(operator.namespace, name)
        assert f"{HOLDS_PREFIX}{adapter}" in pod.metadata.labels and SOURCES_ANNOTATION in pod.metadata.annotations
    routes = wait_for(lambda: ((adapter_pool(custom, operator.namespace) or {}).get("status") or {}).get(
        "plan", {}).get("routes"), WAIT_S, "the pool's status names its routes")
    assert routes["servicePattern"].format(adapter=adapter) == route(adapter) and routes["serviceExceptionsCount"] == 0
    others = {a for d, names in servers.items() if adapter not in names for a in names}
    for other in others:
        assert set(slice_pods(discovery, operator.namespace, other) or []).isdisjoint(pods)


def test_a_route_follows_a_re_placement_and_never_lists_a_pod_not_holding_its_adapter(
        run_operator, core, custom, kubectl, vllm):
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    discovery = client.DiscoveryV1Api(core.api_client)
    before = placed()
    wait_for(lambda: routes_match(discovery, core, operator.namespace, before), WAIT_S, "the routes settled",
             interval=0.5)
    edited, after, adapter = a_re_placement()
    old_pods = set(slice_pods(discovery, operator.namespace, adapter) or [])
    deadline = time.monotonic() + WAIT_S
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=yaml.safe_dump(edited))

    samples = 0
    while time.monotonic() < deadline:
        listed = slice_pods(discovery, operator.namespace, adapter) or []
        for name in listed:  # sampled during the move: only pods whose server registered the adapter
            assert adapter in vllm.listed(operator.namespace, name), (name, listed)
        samples += 1
        if (edit_seen(custom, operator.namespace) and rolled_out(core, operator.namespace, after)
                and routes_match(discovery, core, operator.namespace, after)):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the routes did not follow the re-placement: {slice_pods(discovery, operator.namespace, adapter)}")
    new_pods = slice_pods(discovery, operator.namespace, adapter)
    assert new_pods and set(new_pods).isdisjoint(old_pods) and samples > 1
    new_server = server_of(after, adapter)
    assert {p.metadata.name for p in server_pods(core, operator.namespace, new_server)} >= set(new_pods)


def test_an_adapter_a_server_lists_but_is_not_placed_on_it_is_unloaded_there_and_never_routed_to_it(
        run_operator, core, custom, kubectl, vllm):
    """A registration the placement does not want there (as a re-placement that keeps a server's pod leaves behind):
    loaded into a pod's server behind tessera's back, through the stand-in's own endpoint."""
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    discovery = client.DiscoveryV1Api(core.api_client)
    servers = placed()
    wait_for(lambda: routes_match(discovery, core, operator.namespace, servers), WAIT_S, "the routes settled",
             interval=0.5)
    (first, first_adapters), (_, other_adapters) = list(servers.items())[:2]
    (pod,) = server_pods(core, operator.namespace, first)
    stray = other_adapters[0]
    VllmClient(5).load_adapter(vllm.url_template.format(namespace=operator.namespace, pod=pod.metadata.name), stray,
                               f"/adapters/{stray}")
    unload = ("POST", operator.namespace, pod.metadata.name, "/v1/unload_lora_adapter")
    deadline = time.monotonic() + WAIT_S
    while unload not in vllm.requests and time.monotonic() < deadline:  # the resync (5 s) finds it
        assert pod.metadata.name not in (slice_pods(discovery, operator.namespace, stray) or [])
        time.sleep(0.2)
    assert unload in vllm.requests, "the stray registration was not unloaded"
    assert sorted(vllm.listed(operator.namespace, pod.metadata.name)) == sorted(first_adapters)
    assert pod.metadata.name not in (slice_pods(discovery, operator.namespace, stray) or [])


def test_a_changed_source_reloads_the_adapter_and_the_route_holds_the_new_copy(run_operator, core, custom, kubectl,
                                                                              vllm, weights):
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    discovery = client.DiscoveryV1Api(core.api_client)
    servers = placed()
    wait_for(lambda: routes_match(discovery, core, operator.namespace, servers), WAIT_S, "the routes settled",
             interval=0.5)
    document = yaml.safe_load(POOL_FILE.read_text())
    entry = document["spec"]["adapters"][0]
    adapter = entry["name"]
    (pod,) = server_pods(core, operator.namespace, server_of(servers, adapter))
    loads_before = vllm.loads(operator.namespace, pod.metadata.name)
    new_uri = entry["weights"]["uri"] + "-v2"  # a new version of its files, at a new uri with its digest
    weights.s3.put(new_uri, adapter_files(f"{adapter}-v2"))
    entry["weights"] = adapter_weights(f"{adapter}-v2", new_uri)
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=yaml.safe_dump(document))

    new_source = source_digest(entry["weights"]["uri"], entry["weights"]["digest"])

    def reloaded():
        found = core.read_namespaced_pod(pod.metadata.name, operator.namespace)
        return found if (found.metadata.labels or {}).get(f"{HOLDS_PREFIX}{adapter}") == new_source else None
    wait_for(reloaded, WAIT_S, "the pod labelled with the new copy", interval=0.5)
    assert ("POST", operator.namespace, pod.metadata.name, "/v1/unload_lora_adapter") in vllm.requests
    assert vllm.loads(operator.namespace, pod.metadata.name) == loads_before + 1  # that adapter only
    assert slice_pods(discovery, operator.namespace, adapter) == [pod.metadata.name]


def test_a_pool_with_a_picker_gets_an_inference_pool_valid_against_the_v1_3_0_crd_selecting_exactly_its_servers(
        inference_pool_crd, run_operator, core, custom, kubectl, vllm):
    document = yaml.safe_load(POOL_FILE.read_text())
    document["spec"]["endpointPickerRef"] = {"name": f"{POOL}-picker", "port": {"number": 9002}}
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=yaml.safe_dump(document))
    wait_pool_ready(custom, operator, kubectl)

    def written():
        items = custom.list_namespaced_custom_object("inference.networking.k8s.io", "v1", operator.namespace,
                                                     "inferencepools")["items"]
        return items[0] if items else None
    found = wait_for(written, WAIT_S, "the pool's InferencePool", interval=0.5)  # the API server validated it
    assert found["metadata"]["name"] == POOL
    assert found["spec"]["endpointPickerRef"] == {"kind": "Service", "group": "", "name": f"{POOL}-picker",
                                                  "port": {"number": 9002}, "failureMode": "FailClose"}
    assert found["spec"]["targetPorts"] == [{"number": 8000}]
    selector = ",".join(f"{k}={v}" for k, v in found["spec"]["selector"]["matchLabels"].items())
    selected = {p.metadata.name for p in core.list_namespaced_pod(operator.namespace, label_selector=selector).items}
    servers = {p.metadata.name for d in placed() for p in server_pods(core, operator.namespace, d)}
    assert len(servers) >= 2 and selected == servers
