"""The operator end to end on the real test cluster: `kubectl apply` to model servers on MIG instances.

The operator runs as a subprocess (`python -m tessera operator`) against
the test cluster; the MIG-manager stand-in plays the GPU Operator. What is
checked is what the stand-in, the scheduler and the Deployment controller
did with tessera's writes (node GPU states, pod placement, available
replicas), not tessera's own view of them.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from cluster.gpu_nodes import gpu_states
from cluster.kube import wait_for

from tessera.operator.api.v1alpha1 import child_name

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import (
    EXAMPLES, OperatorProcess, apply_examples, audit_lines, children, condition, gpu_resource, is_true,
    operator_writes, pinned_node, systems, system_yaml, wait_ready,
)

READY_TIMEOUT_S = 240
PLANS = "tessera_plans_stored_total"


def _planned_layouts(core, operator: OperatorProcess) -> dict[str, list]:
    """Per node, per GPU, the layout of the operator's stored plan (None: MIG off / untouched)."""
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    plan = json.loads(state.data["plan"])
    layouts = {node: [None] * 8 for node in operator.pool.nodes}
    for gpu in plan["gpus"]:  # the planner names each GPU by node and device
        layouts[gpu["node"]][gpu["device"]] = {profile: count for profile, count in gpu["layout"]}
    return layouts


def test_three_examples_run_on_the_mig_instances_of_their_plan(run_operator, core, custom, api_client, kubectl):
    operator = run_operator(nodes=4).start()
    names = apply_examples(kubectl, operator.namespace)
    found = wait_ready(custom, operator.namespace, names, READY_TIMEOUT_S, operator)

    # The stand-in applied exactly the planned layouts, GPU by GPU.
    planned = _planned_layouts(core, operator)
    for node in operator.pool.nodes:
        assert gpu_states(core.read_node(node)) == planned[node], node

    # Deployments pinned to planned nodes request the planned MIG resources; their pods run there.
    deployments, services = children(api_client, operator.namespace)
    held = Counter()
    for deployment in deployments:
        node = pinned_node(deployment)
        resource = gpu_resource(deployment)
        held[(node, resource)] += deployment.spec.replicas
        assert deployment.status.available_replicas == deployment.spec.replicas
        selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
        pods = core.list_namespaced_pod(operator.namespace, label_selector=selector).items
        assert len(pods) == deployment.spec.replicas
        assert all(p.status.phase == "Running" and p.spec.node_name == node for p in pods)
    for (node, resource), replicas in held.items():
        profile = resource.removeprefix("nvidia.com/mig-")
        assert replicas <= sum((gpu or {}).get(profile, 0) for gpu in planned[node]), (node, resource)

    # Every system Ready with its plan summary, which agrees with the Deployments.
    for name in names:
        summary = found[name]["status"]["plan"]
        assert found[name]["status"]["phase"] in ("Ready", "Degraded")
        assert summary["servedRequestsPerSecond"] == summary["demandRequestsPerSecond"] and summary["gpus"] >= 1
        planned_replicas = sum(c["replicas"] for t in summary["tasks"] for c in t["configurations"])
        running = sum(d.spec.replicas for d in deployments if d.metadata.labels["tessera.ai/system"] == name)
        assert running == planned_replicas, name
        assert {s.metadata.name for s in services} >= {child_name(name, t["name"]) for t in summary["tasks"]}

    table = kubectl("get", "compoundinferencesystems", "-n", operator.namespace).stdout
    header = table.splitlines()[0].split()
    assert header[:8] == ["NAME", "READY", "PHASE", "GPUS", "SLICES", "POOL-%", "ACCURACY", "LATENCY-MS"]
    assert all(" True " in line for line in table.splitlines()[1:])


def test_an_idle_resync_writes_nothing_by_the_audit_log(run_operator, cluster, custom, kubectl):
    operator = run_operator(nodes=2, resync_s=3.0).start()
    names = apply_examples(kubectl, operator.namespace, ("single-model.yaml",))
    wait_ready(custom, operator.namespace, names, READY_TIMEOUT_S, operator)
    wait_for(lambda: "reconciled (resync" in operator.log.read_text(), 30, "a first resync")
    start = audit_lines(cluster.audit_log)
    resyncs_before = operator.log.read_text().count("reconciled (resync")
    wait_for(lambda: operator.log.read_text().count("reconciled (resync") >= resyncs_before + 3, 30,
             "three more resyncs")
    assert operator_writes(cluster.audit_log, start) == []
    assert operator_writes(cluster.audit_log, 0), "the audit log records the operator's writes at all"


def test_systems_the_planner_cannot_use_are_invalid_and_the_others_keep_running(run_operator, custom, kubectl):
    operator = run_operator(nodes=2).start()
    kubectl("apply", "-n", operator.namespace, "-f", str(EXAMPLES / "single-model.yaml"))
    cyclic = yaml.safe_load(system_yaml("cyclic"))
    cyclic["spec"]["tasks"].append({"name": "second", "variants": [cyclic["spec"]["tasks"][0]["variants"][0]]})
    cyclic["spec"]["edges"] = [{"source": "image-classification", "target": "second"},
                               {"source": "second", "target": "image-classification"}]
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=yaml.safe_dump(cyclic))
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("too-fast", slo={"latencyMilliseconds": 0.5}))

    wait_ready(custom, operator.namespace, ["single-model"], READY_TIMEOUT_S, operator)
    found = wait_for(lambda: (s := systems(custom, operator.namespace)) and all(
        is_true(s[n], "Invalid") for n in ("cyclic", "too-fast")) and s, 60, "both Invalid")
    assert condition(found["cyclic"], "Invalid")["reason"] == "InvalidSpec"
    assert "cycle" in condition(found["cyclic"], "Invalid")["message"]
    assert condition(found["too-fast"], "Invalid")["reason"] == "SloUnreachable"
    assert found["too-fast"]["status"]["phase"] == "Invalid"
    assert operator.alive()
    events = kubectl("get", "events", "-n", operator.namespace, "-o", "json").stdout
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in json.loads(events)["items"]}
    assert {("cyclic", "InvalidSpec"), ("too-fast", "SloUnreachable")} <= reasons


def test_a_system_turned_invalid_keeps_its_last_good_plan_running(run_operator, custom, api_client, kubectl):
    operator = run_operator(nodes=2).start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("steady"))
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("changing"))
    wait_ready(custom, operator.namespace, ["steady", "changing"], READY_TIMEOUT_S, operator)
    before = {d.metadata.uid for d in children(api_client, operator.namespace)[0]}

    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("changing", slo={"latencyMilliseconds": 0.5}))
    wait_for(lambda: is_true(systems(custom, operator.namespace)["changing"], "Invalid"), 60, "changing Invalid")
    wait_for(lambda: "reconciled" in operator.log.read_text(), 10, "a reconcile")
    found = systems(custom, operator.namespace)
    assert is_true(found["steady"], "Ready")
    assert condition(found["changing"], "Planned")["reason"] == "LastGoodPlanKept"
    after = children(api_client, operator.namespace)[0]
    assert {d.metadata.uid for d in after} == before
    assert all(d.status.available_replicas == d.spec.replicas for d in after)


def test_deleting_the_systems_leaves_no_tessera_object(run_operator, core, custom, api_client, kubectl):
    operator = run_operator(nodes=2).start()
    names = apply_examples(kubectl, operator.namespace, ("single-model.yaml",))
    wait_ready(custom, operator.namespace, names, READY_TIMEOUT_S, operator)
    kubectl("delete", "-n", operator.namespace, "compoundinferencesystems", "--all", "--wait=true")

    def nothing_left():
        deployments, services = children(api_client, operator.namespace)
        pods = core.list_namespaced_pod(operator.namespace).items
        state = core.list_namespaced_config_map(operator.state_namespace).items
        return not (deployments or services or pods or [c for c in state if c.metadata.name.startswith("tessera-pool-")])
    wait_for(nothing_left, 60, "no tessera object left", interval=0.5)
    assert operator.alive()


def resyncs(operator: OperatorProcess) -> float:
    """Reconciles the resync timer started (alone or with other triggers), by the operator's metric."""
    return sum(value for labels, value in operator.metric_samples("tessera_reconciles_total")
               if "resync" in labels["kind"].split("+"))


@pytest.mark.parametrize("restart", [False, True], ids=["running", "across-a-restart"])
def test_deleting_the_system_that_fills_a_pool_plans_the_others_again_within_one_resync(restart, run_operator,
                                                                                        custom, kubectl):
    """One node of 8 GPUs: `filler` takes 30 of its 56 slices, `waiting` needs as many. The joint plan
    cannot serve both; once `filler` is deleted (with the operator running, or while it is down), the pool
    plans again no later than the first resync after it (`tessera_plans_stored_total` moves before
    `tessera_reconciles_total` counts a second resync) and `waiting` is served in full: a stored plan made
    for a deleted system no longer stands, also for an operator that starts after the delete."""
    operator = run_operator(nodes=1).start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("filler", demandRequestsPerSecond=40000))
    wait_ready(custom, operator.namespace, ["filler"], READY_TIMEOUT_S, operator)
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("waiting", demandRequestsPerSecond=40000))
    wait_for(lambda: (s := systems(custom, operator.namespace).get("waiting")) and condition(s, "Ready")
             and not is_true(s, "Ready") and s, 120, "waiting planned and not Ready")

    if restart:
        operator.stop()
        plans = before = 0.0  # a fresh process counts from zero
    else:
        plans, before = operator.metric(PLANS), resyncs(operator)
    kubectl("delete", "compoundinferencesystem", "filler", "-n", operator.namespace)
    if restart:
        operator.start()
    (after,) = wait_for(lambda: _resyncs_once_replanned(operator, plans), READY_TIMEOUT_S, "a re-plan without filler",
                        interval=0.1)
    assert after - before <= 1, f"re-planned only after {after - before:.0f} resyncs"
    found = wait_ready(custom, operator.namespace, ["waiting"], READY_TIMEOUT_S, operator)
    summary = found["waiting"]["status"]["plan"]
    assert summary["servedRequestsPerSecond"] == summary["demandRequestsPerSecond"]


def _resyncs_once_replanned(operator: OperatorProcess, plans: float) -> tuple[float] | None:
    """(the resyncs so far,) once a plan beyond `plans` is stored; None before, or while /metrics does not answer."""
    try:
        return (resyncs(operator),) if operator.metric(PLANS) > plans else None
    except OSError:
        return None
