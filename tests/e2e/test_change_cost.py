"""A change-aware plan on the test cluster: a second system lands on free capacity, the first's node untouched.

The operator never re-partitions a node whose GPUs serve (NodeInUse); a
plan that prices a change (planner/change_cost.py) is what lets a second
system wait for, and then run on, a node that serves nothing.
"""

from __future__ import annotations

from cluster.gpu_nodes import create_gpu_nodes, gpu_states
from cluster.kube import wait_node_ready

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import H100, POOL_LABEL, children, pinned_node, system_yaml, wait_ready

READY_TIMEOUT_S = 120


def test_a_second_system_runs_on_a_fresh_node_without_touching_the_first_systems_node(run_operator, core, custom,
                                                                                      api_client, kubectl):
    """`first` runs on some GPUs of the pool's one node; `second`, applied later, would fit on that node's
    other GPUs only by re-partitioning it, which the operator does not do while it serves. Once a fresh
    node joins, `second` runs there and the first node keeps every GPU's layout (before the change price,
    the joint re-plan put `second` on the first node's free GPUs and `second` never deployed)."""
    operator = run_operator(nodes=1).start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("first", demandRequestsPerSecond=10000))
    wait_ready(custom, namespace, ["first"], READY_TIMEOUT_S, operator)
    (first_node,) = operator.pool.nodes
    before = gpu_states(core.read_node(first_node))
    assert any(before) and not all(before), f"the check needs free GPUs on {first_node}: {before}"

    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("second", demandRequestsPerSecond=10000))
    (fresh,) = create_gpu_nodes(core, 1, H100, gpus_per_node=8, name_prefix=f"h100-{operator.pool.id}")
    operator.pool.nodes.append(fresh)  # deleted with the pool
    core.patch_node(fresh, {"metadata": {"labels": {POOL_LABEL: operator.pool.id}}})
    wait_node_ready(core, fresh)
    wait_ready(custom, namespace, ["first", "second"], READY_TIMEOUT_S, operator)

    assert gpu_states(core.read_node(first_node)) == before
    deployments, _ = children(api_client, namespace)
    second = [d for d in deployments if d.metadata.labels["tessera.ai/system"] == "second"]
    assert second and {pinned_node(d) for d in second} == {fresh}
    assert all(d.status.available_replicas == d.spec.replicas for d in deployments)
