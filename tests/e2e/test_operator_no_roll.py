"""No roll without a reason (issue 28, item 7): a server's pod template changes only with its own system.

Read from the cluster: each Deployment's metadata.generation (the API server
bumps it on any spec change, a pod-template change included) and a digest of
its pod template. resourceVersion is not compared: it moves with every
status write of the Deployment controller and proves nothing.
"""

from __future__ import annotations

import json

from cluster.gpu_nodes import create_gpu_nodes
from cluster.kube import wait_for, wait_node_ready

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import (H100, POOL_LABEL, OperatorProcess, condition, server_fingerprints, systems,
                               system_yaml, wait_ready)

READY_TIMEOUT_S = 240


def _stored_plan(core, operator: OperatorProcess) -> dict[str, str]:
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    return state.data


def _budgets(core, operator: OperatorProcess, system: str) -> dict[str, float]:
    plan = json.loads(_stored_plan(core, operator)["plan"])
    return {t["task"]: t["budget_ms"] for t in plan["tasks"] if t["system"] == f"{operator.namespace}/{system}"}


def test_editing_one_system_changes_no_pod_template_of_another(run_operator, core, custom, api_client, kubectl):
    """Made non-vacuous by the planner: the joint re-plan for a's new demand gives b's task another latency
    budget (100 -> 150 ms) on the same configuration; before, TESSERA_MAX_BATCH_DELAY_MS followed it. The
    operator solves jointly (`--joint-only`): an incremental re-plan keeps b's part as it is, budgets included,
    which would make the check vacuous; the joint solve is still what plans a pool where the incremental one
    cannot stand."""
    operator = run_operator(nodes=2)
    operator.extra_args.append("--joint-only")
    operator.start()
    ns = operator.namespace
    kubectl("apply", "-n", ns, "-f", "-", input=system_yaml("a"))
    kubectl("apply", "-n", ns, "-f", "-", input=system_yaml("b"))
    wait_ready(custom, ns, ["a", "b"], READY_TIMEOUT_S, operator)
    before, budgets = server_fingerprints(api_client, ns, "b"), _budgets(core, operator, "b")
    assert before

    kubectl("apply", "-n", ns, "-f", "-", input=system_yaml("a", demandRequestsPerSecond=400))
    wait_for(lambda: (a := systems(custom, ns)["a"].get("status") or {}).get("observedGeneration") == 2
             and a["plan"]["demandRequestsPerSecond"] == 400, 120, "a re-planned for 400 requests/s")
    wait_ready(custom, ns, ["a", "b"], READY_TIMEOUT_S, operator)
    assert _budgets(core, operator, "b") != budgets, "the re-plan kept b's budgets: the check would be vacuous"
    assert server_fingerprints(api_client, ns, "b") == before


def test_adding_a_node_restarts_no_server(run_operator, core, custom, api_client, kubectl):
    operator = run_operator(nodes=1, resync_s=3.0).start()
    ns = operator.namespace
    kubectl("apply", "-n", ns, "-f", "-", input=system_yaml("steady"))
    wait_ready(custom, ns, ["steady"], READY_TIMEOUT_S, operator)
    before, pool_hash = server_fingerprints(api_client, ns), _stored_plan(core, operator)["pool"]

    (added,) = create_gpu_nodes(core, 1, H100, gpus_per_node=8, name_prefix=f"h100-{operator.pool.id}-added")
    operator.pool.nodes.append(added)  # removed with the pool
    core.patch_node(added, {"metadata": {"labels": {POOL_LABEL: operator.pool.id}}})
    wait_node_ready(core, added)
    # The pool planned again with the node in it (the stored plan's pool hash names its GPU slots) ...
    wait_for(lambda: _stored_plan(core, operator)["pool"] != pool_hash, 120, "a re-plan with the new node")
    resyncs = operator.log.read_text().count("reconciled (resync")
    wait_for(lambda: operator.log.read_text().count("reconciled (resync") >= resyncs + 2, 30, "two resyncs after it")
    # ... and every server kept its Deployment, generation and template.
    assert server_fingerprints(api_client, ns) == before
    assert condition(systems(custom, ns)["steady"], "Ready")["status"] == "True"
