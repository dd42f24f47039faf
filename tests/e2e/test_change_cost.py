"""A change-aware plan on the test cluster: a second system is served on free capacity, the first's node untouched.

The operator never re-partitions a node whose GPUs serve (NodeInUse); a
plan that prices a change (planner/change_cost.py) is what lets a second
system wait for, and then run on, a node that serves nothing.
"""

from __future__ import annotations

import json

from cluster.gpu_nodes import create_gpu_nodes, gpu_states
from cluster.kube import wait_node_ready

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from tessera.planner.change_cost import ChangeSummary

from .operator_harness import H100, POOL_LABEL, system_yaml, wait_ready

READY_TIMEOUT_S = 120


def test_a_second_system_is_served_on_free_capacity_without_touching_the_first_systems_node(
        run_operator, core, custom, kubectl):
    """`first` runs on some GPUs of the pool's one node; `second`, applied later with a fresh node, fits on
    free capacity: idle instances and the fresh node. Its plan keeps the first node's layout, and both are
    served in full (before the change price, the joint re-plan re-partitioned the first node to save a
    GPU: NodeInUse, and `second` never deployed; the same test with the price off, `--reconfigure-s 0`,
    fails at its second wait_ready). The operator solves jointly (`--joint-only`): the price is the joint
    solve's; an incremental re-plan keeps the first system's node by construction and prices nothing."""
    operator = run_operator(nodes=1)
    operator.extra_args.append("--joint-only")
    operator.start()
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
    found = wait_ready(custom, namespace, ["first", "second"], READY_TIMEOUT_S, operator)

    for name in ("first", "second"):
        summary = found[name]["status"]["plan"]
        assert summary["servedRequestsPerSecond"] == summary["demandRequestsPerSecond"], name
    assert gpu_states(core.read_node(first_node)) == before
    # The plan says why: the stored plan's change summary keeps the node, a change declined for its price.
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    changes = ChangeSummary.model_validate(json.loads(state.data["plan"])["changes"])
    assert first_node in changes.nodes_kept and changes.nodes_changed == []
    assert "less than their price" in changes.summary, changes.summary
    # ... and so does each system's status, in brief.
    for name in ("first", "second"):
        shown = found[name]["status"]["plan"]["changes"]
        assert shown["summary"] == changes.summary and shown["nodesChanged"] == 0, shown
    # Not checked: which of `first`'s replicas stay on their instances. The cost stage may move them (the
    # price counts layouts, not replica moves): docs/planner.md, "What a change costs".
