"""Pause end to end (docs/operator.md, "Pause, maintenance window and approval"): a paused system or pool keeps
what runs.

While `tessera.ai/paused: "true"` is on the system (or on its pool's plan
ConfigMap), a demand change and a node joining its pool alter nothing that
runs: the API server's audit log shows no write of the operator to the
namespace's Deployments and Services nor to any node (for a paused pool, nor
to any ConfigMap: no MIG config, no stored re-plan), and the status says what
waits. Without the pause the very
same edits re-plan and rewrite the system's Deployments (checked after the
pause is lifted), so the audit-log count is not vacuously zero: the operator
keeps reconciling meanwhile (its resyncs are counted in its log).
"""

from __future__ import annotations

import pytest

from cluster.gpu_nodes import create_gpu_nodes
from cluster.kube import wait_for, wait_node_ready

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import (H100, POOL_LABEL, audit_lines, children, condition, operator_writes, system_yaml,
                               systems, wait_ready)

READY_TIMEOUT_S = 240
PAUSED = "tessera.ai/paused"


def _progressing(custom, namespace: str, name: str) -> dict:
    return condition(systems(custom, namespace)[name], "Progressing") or {}


def _runs(api_client, namespace: str) -> dict[str, tuple[int, int]]:
    """Each Deployment's (generation, replicas): a write of tessera to it changes the generation."""
    deployments, _ = children(api_client, namespace)
    return {d.metadata.name: (d.metadata.generation, d.spec.replicas) for d in deployments}


def _resyncs(operator) -> int:
    return operator.log.read_text().count("reconciled (resync")


def _paused_object(core, operator, what: str) -> list[str]:
    """kubectl's arguments naming the object whose annotation pauses `what` (the system, or its pool)."""
    if what == "system":
        return ["compoundinferencesystem", "steady", "-n", operator.namespace]
    (plan,) = [c.metadata.name for c in core.list_namespaced_config_map(operator.state_namespace).items
               if c.metadata.name.startswith("tessera-pool-")]
    return ["configmap", plan, "-n", operator.state_namespace]


@pytest.mark.parametrize("what", ["system", "pool"])
def test_a_paused_system_or_pool_keeps_what_runs_through_a_demand_change_and_a_new_node_and_unpausing_applies_them(
        what, run_operator, cluster, core, custom, api_client, kubectl):
    operator = run_operator(nodes=1).start()
    ns = operator.namespace
    kubectl("apply", "-n", ns, "-f", "-", input=system_yaml("steady", demandRequestsPerSecond=50))
    wait_ready(custom, ns, ["steady"], READY_TIMEOUT_S, operator)
    paused = _paused_object(core, operator, what)
    kubectl("annotate", *paused, f"{PAUSED}=true")
    wait_for(lambda: _progressing(custom, ns, "steady").get("reason") == "Paused", 60, "steady reads Paused")
    running = _runs(api_client, ns)
    start = audit_lines(cluster.audit_log)

    kubectl("patch", "compoundinferencesystem", "steady", "-n", ns, "--type=merge",
            "-p", '{"spec": {"demandRequestsPerSecond": 500}}')
    (joined,) = create_gpu_nodes(core, 1, H100, name_prefix=f"h100-{operator.pool.id}-late")
    operator.pool.nodes.append(joined)  # the fixture deletes it with the pool
    core.patch_node(joined, {"metadata": {"labels": {POOL_LABEL: operator.pool.id}}})
    wait_node_ready(core, joined)
    wait_for(lambda: "a re-plan waits: demand 50 -> 500" in _progressing(custom, ns, "steady").get("message", ""),
             60, "the status names the waiting demand change")
    resyncs = _resyncs(operator)
    wait_for(lambda: _resyncs(operator) >= resyncs + 2, 60, "two resyncs while paused")

    kinds = ("deployments", "services", "nodes", *(("configmaps",) if what == "pool" else ()))
    frozen = [w for w in operator_writes(cluster.audit_log, start) if w["objectRef"].get("resource") in kinds]
    assert frozen == [], [(w["verb"], w["objectRef"]) for w in frozen]
    assert _runs(api_client, ns) == running
    assert systems(custom, ns)["steady"]["status"]["plan"]["demandRequestsPerSecond"] == 50

    kubectl("annotate", *paused, f"{PAUSED}-")
    wait_for(lambda: (systems(custom, ns)["steady"]["status"].get("plan") or {}).get("demandRequestsPerSecond") == 500,
             120, "the plan for 500 requests/s applied")
    wait_for(lambda: _runs(api_client, ns) != running, 60, "the servers follow the new plan")
    assert _progressing(custom, ns, "steady").get("reason") != "Paused"
