"""One priority order over AdapterPools and compound systems on one GPU pool (issue 29 item 1, issue 30 item 7).

Two fake nodes of one H100 each, so a node is a GPU: a pod of each kind on one node at one moment would be one
GPU claimed twice. A sampler lists the namespace's pods every 0.2 s from the first apply to the end: no node
ever holds a pod of each kind (terminating pods count: they hold their GPU until gone).

- A low-priority AdapterPool (poolPriority 0, one server) runs first; a compound system of poolPriority 10
  whose demand needs both GPUs is applied next. It takes the AdapterPool's GPU: its plan covers both nodes, its
  pods run on both, and the AdapterPool reads Degraded PreemptedByPriority naming it.
- The reverse: the compound system (poolPriority 10) runs on both nodes first; an AdapterPool of poolPriority 20
  is applied. It claims one GPU: the compound plan leaves that node, the node is relabelled MIG off, the
  AdapterPool's server runs there, and the compound system reads Degraded PreemptedByPriority naming it.
- A mixed pool: the low-priority AdapterPool runs first; a compound system of poolPriority 10 that needs more
  than one GPU and one of poolPriority 0 that needs a third of one are applied together. The AdapterPool's GPU
  is lent only above 0: the higher one takes it, the other plans and runs on the other node only.

What makes them fail if tessera did not do it: before these rules the AdapterPool's GPU was reserved against
the compound solve whatever the priorities (the first test's plan would cover one node, and it waits for two),
and in a mixed pool it still is (the third test's plan would cover one node);
the conditions are written by tessera alone (the stand-ins write no status); the MIG stand-in advertises a whole
GPU only on a node relabelled MIG off, so the second test's server runs only after tessera's relabel; and the
sampler must have seen a pod of one kind on the node the other kind then runs on, so a test in which no GPU
changed hands fails.
"""

from __future__ import annotations

import json
import threading
import time

import yaml

from cluster.gpu_nodes import gpu_states
from cluster.kube import wait_for
from kubernetes import client

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .operator_harness import condition, is_true, system_yaml, systems, wait_ready
from .test_adapter_pools import POOL, POOL_FILE, adapter_pool, wait_pool_ready

TIMEOUT_S = 120
SAMPLE_S = 0.2


class PodSampler:
    """Every SAMPLE_S: the nodes holding a pod of each kind (AdapterPool server, compound system server)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.samples: list[tuple[float, set[str], set[str]]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stopped.is_set():
            adapter, compound = set(), set()
            for pod in self.core.list_namespaced_pod(self.namespace).items:
                if pod.spec.node_name is None or pod.status.phase in ("Succeeded", "Failed"):
                    continue
                labels = pod.metadata.labels or {}
                if labels.get("tessera.ai/pool") == POOL:
                    adapter.add(pod.spec.node_name)
                elif "tessera.ai/system" in labels:
                    compound.add(pod.spec.node_name)
            self.samples.append((time.monotonic(), adapter, compound))
            self.stopped.wait(SAMPLE_S)

    def assert_handed_over(self, node: str, to_compound: bool) -> None:
        """No sample shows a node with pods of both kinds, and `node` held a pod of the one kind before the
        other kind's first pod there (the GPU changed hands while sampled)."""
        twice = [(at, adapter & compound) for at, adapter, compound in self.samples if adapter & compound]
        assert twice == [], f"a node held pods of both kinds at once: {twice[:3]}"
        giver, taker = (1, 2) if to_compound else (2, 1)
        taken = next(sample[0] for sample in self.samples if node in sample[taker])
        assert any(node in sample[giver] for sample in self.samples if sample[0] < taken), \
            f"no pod of the other kind was seen on {node} before it changed hands"
        assert len(self.samples) > 20

    def __enter__(self) -> "PodSampler":
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopped.set()
        self.thread.join()


def wait_preempted(read, operator, what: str, says: tuple[str, ...]) -> dict:
    """The Degraded condition of the object `read` returns, once its reason is PreemptedByPriority and its
    message says each of `says`. The message follows the plan in force, so a plan on the way (one made while a
    node of the pool re-partitions, on its other GPUs) may be named first: the wait is for the one that stays."""
    def preempted():
        found = condition(read(), "Degraded") or {}
        return found if (found.get("reason") == "PreemptedByPriority" and found["status"] == "True"
                         and all(part in found.get("message", "") for part in says)) else None
    try:
        return wait_for(preempted, TIMEOUT_S, f"{what} Degraded PreemptedByPriority")
    except TimeoutError:
        raise AssertionError(f"{json.dumps(read().get('status'), indent=1)}\n{operator.log_text()}") from None


def one_server_pool() -> str:
    document = yaml.safe_load(POOL_FILE.read_text())
    document["spec"]["limits"] = {**document["spec"].get("limits", {}), "maxServers": 1}
    return yaml.safe_dump(document)


def compound_nodes(core, state_namespace: str, system: str | None = None) -> set[str]:
    """The nodes the stored compound plan lays out (with `system`: those it has instances on)."""
    found = [c for c in core.list_namespaced_config_map(state_namespace).items
             if c.metadata.name.startswith("tessera-pool-") and (c.data or {}).get("plan")]
    return {g["node"] for c in found for g in json.loads(c.data["plan"])["gpus"]
            if system is None or any(i.get("system") == system for i in g["instances"])}


def preempted_adapter_server(operator, custom, kubectl, compound: list[tuple[str, int, int]],
                             says: tuple[str, ...]) -> tuple[str, dict]:
    """The one-server AdapterPool (poolPriority 0) running, then the compound systems (name, demand, poolPriority)
    applied: its server's node and its Degraded PreemptedByPriority, once its message says each of `says`."""
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=one_server_pool())
    operator.start()
    (server,) = wait_pool_ready(custom, operator, kubectl)["status"]["plan"]["servers"]
    for name, demand, priority in compound:
        kubectl("apply", "-n", operator.namespace, "-f", "-",
                input=system_yaml(name, demandRequestsPerSecond=demand, poolPriority=priority))
    return server["node"], wait_preempted(lambda: adapter_pool(custom, operator.namespace) or {}, operator,
                                          "the AdapterPool", says)


def test_a_higher_priority_compound_system_takes_the_gpu_of_a_lower_priority_adapter_pool_never_claiming_it_twice(
        run_operator, core, custom, kubectl, vllm):
    operator = run_operator(nodes=2, gpus_per_node=1, adapter_servers=vllm)
    namespace = operator.namespace
    with PodSampler(core, namespace) as sampler:
        held, _ = preempted_adapter_server(operator, custom, kubectl, [("urgent", 60000, 10)], (
            f"{namespace}/urgent (poolPriority 10, 2 GPU(s))", "higher spec.poolPriority than its 0",
            "carry 0% of its expected rate"))

        wait_for(lambda: compound_nodes(core, operator.state_namespace) == set(operator.pool.nodes) or None,
                 TIMEOUT_S, "the compound plan on both GPUs")
        wait_ready(custom, namespace, ["urgent"], TIMEOUT_S, operator)
        wait_for(lambda: sampler.samples and sampler.samples[-1][2] == set(operator.pool.nodes) or None,
                 TIMEOUT_S, "the compound system's pods on both nodes")
        # its status is written by the reconcile after the one that reads the new plan: wait for it, then it stays
        found = wait_for(lambda: (lambda pool: pool if pool["status"]["plan"]["servers"] == [] else None)(
            adapter_pool(custom, namespace)), TIMEOUT_S, "the AdapterPool without servers")
        assert not is_true(found, "AdaptersPlaced")
        assert client.AppsV1Api(custom.api_client).list_namespaced_deployment(
            namespace, label_selector=f"tessera.ai/pool={POOL}").items == []

    sampler.assert_handed_over(held, to_compound=True)


def test_a_higher_priority_adapter_pool_claims_a_gpu_of_a_lower_priority_compound_system_never_claiming_it_twice(
        run_operator, core, custom, kubectl, vllm):
    operator = run_operator(nodes=2, gpus_per_node=1, adapter_servers=vllm)
    namespace = operator.namespace
    with PodSampler(core, namespace) as sampler:
        kubectl("apply", "-n", namespace, "-f", "-",
                input=system_yaml("steady", demandRequestsPerSecond=60000, poolPriority=10))
        operator.start()
        wait_ready(custom, namespace, ["steady"], TIMEOUT_S, operator)
        wait_for(lambda: sampler.samples and sampler.samples[-1][2] == set(operator.pool.nodes) or None,
                 TIMEOUT_S, "the compound system's pods on both nodes")

        document = yaml.safe_load(one_server_pool())
        document["spec"]["poolPriority"] = 20
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(document))
        found = wait_pool_ready(custom, operator, kubectl)
        (server,) = found["status"]["plan"]["servers"]
        claimed = server["node"]
        assert server["ready"] and condition(found, "Degraded")["reason"] != "PreemptedByPriority", found["status"]

        wait_preempted(lambda: systems(custom, namespace).get("steady", {}), operator, "the compound system",
                       (f"AdapterPool {namespace}/{POOL} (poolPriority 20, 1 whole GPU(s))",))
        assert compound_nodes(core, operator.state_namespace) == set(operator.pool.nodes) - {claimed}
        assert gpu_states(core.read_node(claimed)) == [None]  # MIG off: the server's whole GPU

    sampler.assert_handed_over(claimed, to_compound=False)


def test_in_a_mixed_pool_a_higher_priority_compound_system_takes_the_adapter_pools_gpu_and_a_lower_one_does_not(
        run_operator, core, custom, kubectl, vllm):
    """~9400 requests/s fit one GPU (the planner's estimate for the example): 12000 need both, 3000 a third."""
    operator = run_operator(nodes=2, gpus_per_node=1, adapter_servers=vllm)
    namespace = operator.namespace
    with PodSampler(core, namespace) as sampler:
        held, _ = preempted_adapter_server(operator, custom, kubectl, [("urgent", 12000, 10), ("modest", 3000, 0)],
                                           (f"{namespace}/urgent (poolPriority 10",))
        wait_ready(custom, namespace, ["urgent", "modest"], TIMEOUT_S, operator)
        degraded = condition(adapter_pool(custom, namespace), "Degraded")
        assert "modest" not in degraded["message"], degraded["message"]
        assert held in compound_nodes(core, operator.state_namespace, f"{namespace}/urgent")
        assert compound_nodes(core, operator.state_namespace, f"{namespace}/modest") == set(operator.pool.nodes) - {held}
        wait_for(lambda: sampler.samples and held in sampler.samples[-1][2] or None, TIMEOUT_S,
                 "a compound pod on the AdapterPool's node")

    sampler.assert_handed_over(held, to_compound=True)
