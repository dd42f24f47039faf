"""Each model server's PodDisruptionBudget on the test cluster, enforced by the real API server.

A drain (kubectl drain, the cluster autoscaler, a node upgrade) evicts pods
through the Eviction API; the API server admits an eviction only while the
budget's `status.disruptionsAllowed`, which kube-controller-manager's
disruption controller computes (one of its default controllers:
tests/cluster/controlplane.py starts it without `--controllers`), is above
zero. Until that controller has observed the budget
(`status.observedGeneration` below `metadata.generation`) the API server
refuses every eviction, so a refusal alone would prove nothing: the test
waits for the observed generation and for every pod counted healthy, and
then the first eviction must pass and the next one, right after, must be
refused by the budget.

On KWOK an evicted pod is gone at once and its ReplicaSet's replacement is
Ready within moments, so the controller may count every pod healthy again
before the second eviction and admit it (the test failed so under load).
A drain cordons the node first, which keeps the replacement Pending; the
test taints the node NoSchedule instead (the same effect on the scheduler),
because tessera reads an admin's cordon as the node leaving its pool and
re-plans at once.
"""

from __future__ import annotations

import threading

import pytest
import yaml
from kubernetes import client

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import EXAMPLES, MANAGED, wait_ready

READY_TIMEOUT_S = 240
SERVERS = f"{MANAGED},tessera.ai/component=model-server"


def servers(api_client: client.ApiClient, namespace: str) -> dict[str, object]:
    return {d.metadata.name: d for d in client.AppsV1Api(api_client).list_namespaced_deployment(
        namespace, label_selector=SERVERS).items}


def budgets(api_client: client.ApiClient, namespace: str) -> dict[str, object]:
    return {b.metadata.name: b for b in client.PolicyV1Api(api_client).list_namespaced_pod_disruption_budget(
        namespace, label_selector=MANAGED).items}


def observed(api_client: client.ApiClient, namespace: str, name: str, healthy: int):
    """The budget once the disruption controller computed it for its current spec with `healthy` pods Ready."""
    budget = budgets(api_client, namespace).get(name)
    status = budget.status if budget is not None else None
    if status is None or (status.observed_generation or 0) < budget.metadata.generation:
        return None
    return budget if status.current_healthy == healthy else None


def evict(core: client.CoreV1Api, pod) -> None:
    core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace)))


def keep_replacements_off(core: client.CoreV1Api, node: str) -> None:
    """A taint no server tolerates: a replacement pod stays Pending, as behind a drain's cordon."""
    taints = core.read_node(node).spec.taints or []
    core.patch_node(node, {"spec": {"taints": [*core.api_client.sanitize_for_serialization(taints),
                                               {"key": "test.tessera.ai/draining", "effect": "NoSchedule"}]}})


def test_a_servers_budget_lets_a_drain_evict_one_of_its_pods_and_refuses_the_next(run_operator, api_client, custom,
                                                                                   core, kubectl):
    operator = run_operator(nodes=1).start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("drained", demandRequestsPerSecond=30000))
    wait_ready(custom, operator.namespace, ["drained"], READY_TIMEOUT_S, operator)
    found = servers(api_client, operator.namespace)
    several = [d for d in found.values() if d.spec.replicas >= 2]
    assert several, f"one configuration on two or more instances of the node: {[(n, d.spec.replicas) for n, d in found.items()]}"
    deployment = several[0]
    name, replicas = deployment.metadata.name, deployment.spec.replicas
    budget = wait_for(lambda: observed(api_client, operator.namespace, name, replicas), 60,
                      f"the budget of {name} observed with {replicas} healthy pods", interval=0.5)
    assert budget.spec.max_unavailable == 1 and budget.spec.min_available is None
    assert budget.status.disruptions_allowed == 1
    assert budget.metadata.owner_references[0].to_dict() == deployment.metadata.owner_references[0].to_dict()

    pods = core.list_namespaced_pod(operator.namespace, label_selector=f"tessera.ai/deployment={name}").items
    first, second = pods[:2]
    keep_replacements_off(core, first.spec.node_name)
    evict(core, first)  # allowed: one pod may be unavailable
    with pytest.raises(client.ApiException) as refused:
        evict(core, second)
    reason = f"{refused.value.body}"
    assert refused.value.status == 429 and "disruption budget" in reason, reason
    assert "being processed" not in reason, "refused by the budget, not for want of its status"


class Sampler(threading.Thread):
    """Every 0.2 s: the names of the model-server Deployments and of the budgets."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api_client, self.namespace = api_client, namespace
        self.samples: list[tuple[set[str], set[str]]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((set(servers(self.api_client, self.namespace)),
                                 set(budgets(self.api_client, self.namespace))))
            self.done.wait(0.2)


def test_a_servers_budget_goes_with_its_deployment_and_never_before_it(run_operator, api_client, custom, kubectl):
    """Renaming the variant renames its Deployment: tessera deletes the old one (no plan wants it) and its budget."""
    operator = run_operator(nodes=2, gpus_per_node=1).start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("renamed"))
    wait_ready(custom, namespace, ["renamed"], READY_TIMEOUT_S, operator)
    (old,) = servers(api_client, namespace)
    wait_for(lambda: old in budgets(api_client, namespace), 30, f"the budget of {old}")

    sampler = Sampler(api_client, namespace)
    sampler.start()
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("renamed", renamed_variant="resnet50-next"))
        wait_for(lambda: replaced_and_guarded(api_client, namespace, old), READY_TIMEOUT_S,
                 "the old Deployment gone, its replacement there with its budget", interval=0.5)
        wait_for(lambda: old not in budgets(api_client, namespace), 30, f"the budget of {old} gone")
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
    unguarded = [i for i, (deployments, guarded) in enumerate(sampler.samples) if old in deployments - guarded]
    assert unguarded == [], "the old Deployment was there without its budget"


def replaced_and_guarded(api_client: client.ApiClient, namespace: str, old: str) -> bool:
    now = set(servers(api_client, namespace))
    return old not in now and len(now) == 1 and now <= set(budgets(api_client, namespace))


def system_yaml(name: str, renamed_variant: str | None = None, **spec_changes) -> str:
    """The single-model example with only ResNet-50 (so the plan's variant is known), under another name."""
    document = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    document["metadata"]["name"] = name
    (task,) = document["spec"]["tasks"]
    task["variants"] = [{**task["variants"][0], **({"name": renamed_variant} if renamed_variant else {})}]
    document["spec"].update(spec_changes)
    return yaml.safe_dump(document)
