"""Make before break on the test cluster: a demand rise re-partitions a serving node after its replicas moved.

Three nodes of one GPU each. `bystander` serves 6,000 requests/s from its own
node; `riser` serves 200 requests/s from one instance on another node; its
demand then rises past what that node's layout (one small instance) carries,
so the plan needs the free GPU and a new layout on the serving node, and
leaves the bystander's node as it is (its layout is full and changing it
saves less than its price). The check can fail: with the operator restarted
with the price off (`--reconfigure-s 0`) once both serve, the rise's plan
re-partitions the bystander's node too, and this test fails. With `--without-replacement wait` the node may change only once
what it carries runs elsewhere: the plan's servers on the free node must be
available first, then tessera cordons the node, scales its Deployments to
zero, relabels it, brings its new Deployments up and lifts its cordon.

KWOK marks a scheduled pod Running and Ready at once, so readiness alone
would prove little. What makes it count here: a server's pod requests a MIG
instance, which a node allocates only once the mig-manager stand-in applied a
layout that has it (it rewrites allocatable), and the stand-in refuses
(`failed`) to re-partition a node while any pod holds its GPUs. So the free
node's replicas are available only after its layout is applied, and the
serving node changes only after its pods are gone. A sampler reads the
Deployments and nodes every 0.3 s throughout.
"""

from __future__ import annotations

import threading
import time

from kubernetes import client

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import MANAGED, pinned_node, server_fingerprints, system_yaml, wait_ready

READY_TIMEOUT_S = 120
CORDONED = "tessera.ai/cordoned"
MIG_CONFIG = "nvidia.com/mig.config"


class Sampler(threading.Thread):
    """Every 0.3 s: each Deployment (task, node, spec replicas, available replicas) and each node (cordon, config)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, nodes: list[str]) -> None:
        super().__init__(daemon=True)
        self.apps, self.core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
        self.namespace, self.nodes = namespace, nodes
        self.samples: list[tuple[float, dict, dict]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            deployments = {d.metadata.name: (d.metadata.labels["tessera.ai/task"], pinned_node(d), d.spec.replicas,
                                             (d.status.available_replicas or 0))
                           for d in self.apps.list_namespaced_deployment(self.namespace, label_selector=MANAGED).items
                           if d.metadata.labels.get("tessera.ai/component") == "model-server"}
            nodes = {}
            for name in self.nodes:
                node = self.core.read_node(name)
                nodes[name] = (bool(node.spec.unschedulable), (node.metadata.annotations or {}).get(CORDONED),
                               (node.metadata.labels or {}).get(MIG_CONFIG))
            self.samples.append((time.monotonic(), deployments, nodes))
            self.done.wait(0.3)

    def first(self, predicate) -> float | None:
        return next((t for t, deployments, nodes in self.samples if predicate(deployments, nodes)), None)


def test_a_demand_rise_moves_replicas_first_then_re_partitions_the_serving_node(run_operator, api_client, custom,
                                                                                   kubectl):
    operator = run_operator(nodes=3, gpus_per_node=1)
    operator.extra_args = ["--without-replacement", "wait"]
    operator.start()
    namespace = operator.namespace
    for name, rps in (("bystander", 6000), ("riser", 200)):
        kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml(name, demandRequestsPerSecond=rps))
        wait_ready(custom, namespace, [name], READY_TIMEOUT_S, operator)
    apps = client.AppsV1Api(api_client)
    placed: dict[str, set[str]] = {}
    for d in apps.list_namespaced_deployment(namespace, label_selector=MANAGED).items:
        if d.metadata.labels.get("tessera.ai/component") == "model-server":
            placed.setdefault(d.metadata.labels["tessera.ai/system"], set()).add(pinned_node(d))
    (serving,), (other,) = placed["riser"], placed["bystander"]
    assert serving != other, f"the check needs the bystander on a node of its own: {placed}"
    (free,) = set(operator.pool.nodes) - {serving, other}
    bystander = server_fingerprints(api_client, namespace, "bystander")

    sampler = Sampler(api_client, namespace, operator.pool.nodes)
    sampler.start()
    try:
        kubectl("patch", "compoundinferencesystem", "riser", "-n", namespace, "--type", "merge",
                "-p", '{"spec": {"demandRequestsPerSecond": 12000}}')
        found = wait_for_change(custom, namespace, operator, sampler, serving)
    finally:
        sampler.done.set()
        sampler.join(timeout=5)

    summary = found["riser"]["status"]["plan"]
    assert summary["servedRequestsPerSecond"] == summary["demandRequestsPerSecond"] == 12000
    assert no_task_below_its_capacity_in_force(sampler.samples)
    cordoned = sampler.first(lambda _, nodes: nodes[serving][1] is not None)
    moved = sampler.first(lambda deployments, _: any(node == free and available > 0
                                                     for _, node, _, available in deployments.values()))
    assert cordoned is not None, "the serving node was never cordoned by tessera"
    assert moved is not None and moved < cordoned, "cordoned before any replica was available on the free node"
    _, _, nodes = sampler.samples[-1]
    assert nodes[serving][:2] == (False, None), "tessera lifted its cordon and its record"
    assert no_deployment_deleted_while_it_served_before_its_replacements(sampler.samples)
    # Other nodes untouched: the bystander's node never cordoned nor relabelled, its Deployments as they were.
    touched = [nodes[other] for _, _, nodes in sampler.samples if nodes[other] != sampler.samples[0][2][other]]
    assert not touched and sampler.samples[0][2][other][:2] == (False, None), touched[:3]
    assert server_fingerprints(api_client, namespace, "bystander") == bystander


def wait_for_change(custom, namespace, operator, sampler: Sampler, serving: str) -> dict:
    """Ready again, after the serving node was re-partitioned (its config changed) and serves again."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        found = wait_ready(custom, namespace, ["riser"], max(1.0, deadline - time.monotonic()), operator)
        summary = found["riser"]["status"].get("plan") or {}
        relabelled = sampler.first(lambda _, nodes: nodes[serving][2] != sampler.samples[0][2][serving][2])
        if summary.get("demandRequestsPerSecond") == 12000 and relabelled is not None and \
                any(node == serving and available > 0 for _, node, _, available in sampler.samples[-1][1].values()):
            return found
        time.sleep(0.5)
    raise AssertionError(f"the serving node {serving} did not change and serve again:\n{operator.log_text()}")


def no_task_below_its_capacity_in_force(samples) -> bool:
    """The must-show floor, "no task ever below its planned capacity minus one replica", held strictly, as
    --without-replacement wait promises: at every sample each task has at least the available replicas (summed over
    its Deployments) it had at the first, when the demand rose and the plan in force was all available. (riser has
    one replica then: the floor less one replica would be zero and could not fail.)"""
    start, first = _available_by_task(samples[0][1]), samples[0][0]
    for at, deployments, _ in samples:
        now = _available_by_task(deployments)
        short = {task: (now.get(task, 0), before) for task, before in start.items() if now.get(task, 0) < before}
        assert not short, f"{at - first:.1f} s in, tasks below their capacity in force (available, before): {short}"
    return True


def _available_by_task(deployments: dict) -> dict[str, int]:
    found: dict[str, int] = {}
    for task, _, _, available in deployments.values():
        found[task] = found.get(task, 0) + available
    return found


def no_deployment_deleted_while_it_served_before_its_replacements(samples) -> bool:
    """Each Deployment that disappears served nothing at its last sample, or the other Deployments of its task
    were all available then."""
    for (_, before, _), (_, after, _) in zip(samples, samples[1:]):
        for name, (task, _, _, available) in before.items():
            if name in after or available == 0:
                continue
            others = [(replicas, up) for other, (t, _, replicas, up) in before.items() if t == task and other != name]
            assert others and all(up >= replicas for replicas, up in others), (
                f"{name} was deleted serving {available} replica(s) while its task's other Deployments were "
                f"{others}")
    return True
