"""AdapterPools end to end on the test cluster: `kubectl apply` to vLLM server Deployments on whole GPUs.

The operator runs as a subprocess against the test cluster, as in
test_operator.py. The planned servers are computed here by `tessera place`'s
own placement of the same file, and compared with what the Deployment
controller and the scheduler made of tessera's writes. No vLLM runs: KWOK
reports the pods Running, and the servers' stand-in (tests/cluster/vllm_standin.py)
answers for them, so their readiness gates open (test_adapter_loading.py tests that).
"""

from __future__ import annotations

import json
from collections import Counter

import yaml

from cluster.gpu_nodes import gpu_states
from cluster.kube import wait_crd_established, wait_for
from kubernetes import client

from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.reconcile.adapter_pool_decide import within
from tessera.planner.placement import place
from tessera.planner.placement.pool_file import load_problem

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .operator_harness import (EXAMPLES, GROUP, VERSION, OperatorProcess, is_true, pinned_node, pods_not_running,
                               system_yaml, wait_ready)

POOL_FILE = EXAMPLES / "adapter-pools" / "support-bots.yaml"
POOL = "support-bots"
READY_TIMEOUT_S = 120


def adapter_pool(custom, namespace: str) -> dict | None:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "adapterpools")["items"]
    return next((i for i in items if i["metadata"]["name"] == POOL), None)


def wait_pool_ready(custom, operator: OperatorProcess, kubectl) -> dict:
    wait_crd_established(custom.api_client, "adapterpools.tessera.ai")

    def ready():
        if not operator.alive():
            raise AssertionError(f"operator exited:\n{operator.log_text()}")
        found = adapter_pool(custom, operator.namespace)
        return found if found is not None and is_true(found, "Ready") else None
    try:
        return wait_for(ready, READY_TIMEOUT_S, f"AdapterPool {POOL} Ready", interval=0.5)
    except TimeoutError:
        found = adapter_pool(custom, operator.namespace) or {}
        raise AssertionError(f"not Ready: {json.dumps(found.get('status'), indent=1)}\n"
                             f"{pods_not_running(custom.api_client, operator.namespace)}\n"
                             f"{operator.log_text()}") from None


def pool_deployments(api_client, namespace: str) -> list:
    return client.AppsV1Api(api_client).list_namespaced_deployment(
        namespace, label_selector=f"tessera.ai/pool={POOL}").items


def flags(args: list[str]) -> dict[str, str]:
    return {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--max")}


def test_an_adapter_pool_gets_its_planned_vllm_servers_a_ready_status_and_printer_columns(
        run_operator, core, custom, api_client, kubectl, vllm):
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    kubectl("apply", "-n", operator.namespace, "-f", str(POOL_FILE))
    found = wait_pool_ready(custom, operator, kubectl)

    planned = place(within(load_problem(POOL_FILE), 8), "tessera").servers
    assert len(planned) >= 2  # more than one server: the per-server flags differ
    deployments = {d.metadata.name: d for d in pool_deployments(api_client, operator.namespace)}
    assert set(deployments) == {child_name(POOL, "server", str(i)) for i in range(len(planned))}
    for index, server in enumerate(planned):
        deployment = deployments[child_name(POOL, "server", str(index))]
        container = deployment.spec.template.spec.containers[0]
        assert container.image == yaml.safe_load(POOL_FILE.read_text())["spec"]["baseModel"]["image"]
        assert "--enable-lora" in container.args
        assert flags(container.args) == {
            "--max-loras": str(server.max_loras), "--max-lora-rank": str(server.max_lora_rank),
            "--max-cpu-loras": str(max(len(server.adapters), server.max_loras)), "--max-model-len": "32768"}
        assert {e.name: e.value for e in container.env}["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
        assert container.resources.limits == {"nvidia.com/gpu": "1"}
        assert deployment.metadata.owner_references[0].kind == "AdapterPool"
        assert deployment.status.available_replicas == 1
        pods = core.list_namespaced_pod(operator.namespace,
                                        label_selector=f"tessera.ai/deployment={deployment.metadata.name}").items
        assert [(p.status.phase, p.spec.node_name) for p in pods] == [("Running", pinned_node(deployment))]
        # its PodDisruptionBudget, as a compound system's server has (builders.disruption_budget)
        budget = client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget(deployment.metadata.name,
                                                                                       operator.namespace)
        assert budget.spec.selector.match_labels == deployment.spec.selector.match_labels
        assert budget.spec.max_unavailable == 1 and budget.metadata.owner_references[0].kind == "AdapterPool"

    status = found["status"]
    assert status["phase"] == "Ready" and is_true(found, "AdaptersPlaced") and not is_true(found, "Degraded")
    assert status["plan"]["gpus"] == status["plan"]["serversReady"] == len(planned)
    assert status["plan"]["adaptersPlaced"] == sum(len(s.adapters) for s in planned) == 60
    assert [s["loraSlots"] for s in status["plan"]["servers"]] == [s.max_loras for s in planned]

    table = kubectl("get", "ap", "-n", operator.namespace).stdout.splitlines()
    assert table[0].split()[:7] == ["NAME", "READY", "PHASE", "SERVERS", "GPUS", "ADAPTERS", "UNPLACED"]
    assert table[1].split()[:7] == [POOL, "True", "Ready", str(len(planned)), str(len(planned)), "60", "0"]


def test_a_compound_system_and_an_adapter_pool_on_one_node_never_claim_one_gpu_twice(
        run_operator, core, custom, api_client, kubectl, vllm):
    """One node of 8 GPUs, both applied before the operator starts, the compound system's demand more than the
    node serves: left alone, its plan would take all 8 GPUs, so the two are disjoint only because the AdapterPool's
    GPUs are reserved in the compound solve (and the scheduler alone counts resources, not GPUs). Checked on the
    planned GPUs (the compound plan's devices against the pool's servers' GPUs, which the MIG stand-in must show
    with MIG off) and on the running pods' requests."""
    operator = run_operator(nodes=1, adapter_servers=vllm)
    (node,) = operator.pool.nodes
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("single-model", demandRequestsPerSecond=60000))
    kubectl("apply", "-n", operator.namespace, "-f", str(POOL_FILE))
    operator.start()
    found = wait_pool_ready(custom, operator, kubectl)
    wait_ready(custom, operator.namespace, ["single-model"], READY_TIMEOUT_S, operator)

    adapter_gpus = {(s["node"], s["gpu"]) for s in found["status"]["plan"]["servers"]}
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    compound_gpus = {(g["node"], g["device"]) for g in json.loads(state.data["plan"])["gpus"]}
    assert adapter_gpus and compound_gpus and {n for n, _ in adapter_gpus | compound_gpus} == {node}
    assert not adapter_gpus & compound_gpus
    assert len(compound_gpus) == 8 - len(adapter_gpus)  # the compound plan fills every GPU left to it
    layouts = gpu_states(core.read_node(node))
    assert all(layouts[gpu] is None for _, gpu in adapter_gpus), layouts  # whole GPUs, MIG off
    assert all(layouts[gpu] for _, gpu in compound_gpus), layouts

    pods = core.list_namespaced_pod(operator.namespace).items
    assert pods and all(p.status.phase == "Running" and p.spec.node_name == node for p in pods), \
        pods_not_running(api_client, operator.namespace)
    requested = Counter(resource for p in pods for c in p.spec.containers
                        for resource in (c.resources.limits or {}) if resource.startswith("nvidia.com/"))
    assert requested["nvidia.com/gpu"] == len(adapter_gpus) <= sum(1 for layout in layouts if layout is None)
    for resource, count in requested.items():
        if resource != "nvidia.com/gpu":
            profile = resource.removeprefix("nvidia.com/mig-")
            assert count <= sum((layout or {}).get(profile, 0) for layout in layouts), resource
