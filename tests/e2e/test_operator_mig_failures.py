"""mig-manager's `failed` and `rebooting` end to end: the stand-in fails or reboots a node, the operator copes.

The stand-in keeps NVIDIA's label contract (`nvidia.com/mig.config.state`
pending, rebooting, failed, success); a faulty node (`refuse`) fails every
apply and keeps its GPUs as they were, `heal` repairs it and applies its
config again, as a restarted mig-manager does. Pools of one-GPU nodes make
a plan of two GPUs span two nodes, so one can fail while the other serves.
Each test picks the node to fail from the operator's stored plan, before
the relabel (a longer --mig-config-propagation leaves the time), so the
failure always hits a node the plan uses.
"""

from __future__ import annotations

import json
import time

from cluster.gpu_nodes import MIG_CONFIG, MIG_STATE, gpu_states
from cluster.kube import wait_for

from tessera.operator import naming

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import OperatorProcess, children, condition, is_true, pinned_node, systems, system_yaml, wait_ready
from .test_serving_node_change import Sampler, no_task_below_its_capacity_in_force

READY_TIMEOUT_S = 120
PROPAGATION = ["--mig-config-propagation", "4"]


def _planned_nodes(core, operator: OperatorProcess) -> list[str]:
    """The nodes the operator's stored plan uses, once it is stored."""
    def stored():
        found = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                 if c.metadata.name.startswith("tessera-pool-") and (c.data or {}).get("plan")]
        return found and sorted({gpu["node"] for gpu in json.loads(found[0].data["plan"])["gpus"]})
    return wait_for(stored, 120, "a stored plan")


def _degraded_by_mig(custom, operator: OperatorProcess, name: str) -> dict:
    def degraded():
        found = systems(custom, operator.namespace).get(name)
        cond = found and condition(found, "Degraded")
        return cond if cond and cond["status"] == "True" and cond["reason"] == "MigLayoutFailed" else None
    return wait_for(degraded, 90, f"{name} Degraded by MigLayoutFailed")


def _warnings(kubectl, namespace: str, reason: str) -> list[str]:
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    return [e["message"] for e in events if e["type"] == "Warning" and e["reason"] == reason]


def _failure_record(core, node: str) -> dict | None:
    text = (core.read_node(node).metadata.annotations or {}).get(naming.MIG_FAILURE)
    return json.loads(text) if text else None


def _no_node_cordoned(core, operator: OperatorProcess) -> None:
    assert [n for n in operator.pool.nodes if core.read_node(n).spec.unschedulable] == []


def test_mig_failed_on_one_node_keeps_its_layout_degrades_naming_it_and_recovers_when_mig_manager_succeeds(
        run_operator, mig_manager, core, custom, api_client, kubectl):
    operator = run_operator(nodes=3, gpus_per_node=1)
    operator.extra_args = [*PROPAGATION, "--mig-failure-backoff", "600"]  # recovery comes from the node, not the back-off
    operator.start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("spread", demandRequestsPerSecond=12000))
    planned = _planned_nodes(core, operator)
    assert len(planned) == 2, f"the plan spans two nodes: {planned}"
    healthy, faulty = planned
    before = gpu_states(core.read_node(faulty))
    mig_manager.refuse(faulty)

    degraded = _degraded_by_mig(custom, operator, "spread")
    assert f"node {faulty}" in degraded["message"] and healthy not in degraded["message"]
    found = systems(custom, operator.namespace)["spread"]
    assert found["status"]["phase"] == "Degraded" and not is_true(found, "Ready")
    assert any(faulty in message for message in _warnings(kubectl, operator.namespace, "MigLayoutFailed"))
    # The faulty node keeps its old layout and tessera asks nothing else of it; the healthy one serves.
    node = core.read_node(faulty)
    assert node.metadata.labels[MIG_STATE] == "failed" and gpu_states(node) == before
    assert _failure_record(core, faulty)["config"] == node.metadata.labels[MIG_CONFIG]

    def healthy_serves():
        deployments, _ = children(api_client, operator.namespace)
        on_healthy = [d for d in deployments if pinned_node(d) == healthy]
        return on_healthy and all((d.status.available_replicas or 0) == d.spec.replicas for d in on_healthy)
    wait_for(healthy_serves, 60, f"the Deployments on {healthy} available")
    assert not [d for d in children(api_client, operator.namespace)[0] if pinned_node(d) == faulty]

    mig_manager.heal(faulty)
    found = wait_ready(custom, operator.namespace, ["spread"], READY_TIMEOUT_S, operator)["spread"]
    assert condition(found, "Degraded")["status"] == "False"
    assert {pinned_node(d) for d in children(api_client, operator.namespace)[0]} == {healthy, faulty}
    assert _failure_record(core, faulty) is None
    _no_node_cordoned(core, operator)


def test_rebooting_then_success_never_reads_degraded(run_operator, mig_manager, core, custom, kubectl):
    operator = run_operator(nodes=1, gpus_per_node=1)
    (node,) = operator.pool.nodes
    mig_manager.reboot(node)
    operator.start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("rebooted"))

    # Sampled every 0.2 s until Ready: the node's state and the system's Degraded condition.
    states, degraded = set(), []
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        states.add(core.read_node(node).metadata.labels.get(MIG_STATE))
        found = systems(custom, operator.namespace).get("rebooted")
        cond = found and condition(found, "Degraded")
        if cond and cond["status"] == "True":
            degraded.append(cond)
        if found and is_true(found, "Ready"):
            break
        time.sleep(0.2)
    assert "rebooting" in states, f"the stand-in rebooted the node (states seen: {states})"
    assert found and is_true(found, "Ready")
    assert degraded == []
    assert _failure_record(core, node) is None
    _no_node_cordoned(core, operator)


def test_a_persisting_failed_moves_the_nodes_work_to_a_healthy_node_after_the_backoff_across_a_restart(
        run_operator, mig_manager, core, custom, api_client, kubectl):
    backoff_s = 15
    operator = run_operator(nodes=2, gpus_per_node=1)
    operator.extra_args = [*PROPAGATION, "--mig-failure-backoff", str(backoff_s)]
    operator.start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("moved"))
    (faulty,) = _planned_nodes(core, operator)
    (healthy,) = set(operator.pool.nodes) - {faulty}
    mig_manager.refuse(faulty)
    _degraded_by_mig(custom, operator, "moved")
    record = wait_for(lambda: _failure_record(core, faulty), 30, "the failure recorded on the node")

    # A restart inside the back-off: the new process reads "failed since" from the node, it does not start again.
    operator.kill()
    operator.start()
    found = wait_ready(custom, operator.namespace, ["moved"], READY_TIMEOUT_S, operator)["moved"]
    assert time.time() >= record["since"] + backoff_s, "the node's work moved only after the back-off"
    assert condition(found, "Degraded")["status"] == "False"
    deployments, _ = children(api_client, operator.namespace)
    assert deployments and {pinned_node(d) for d in deployments} == {healthy}
    # The faulty node is left out of the plan, not cordoned, and still reads failed.
    assert _planned_nodes(core, operator) == [healthy]
    assert core.read_node(faulty).metadata.labels[MIG_STATE] == "failed"
    assert _failure_record(core, faulty) == record, "the restart kept the first failure's time"
    _no_node_cordoned(core, operator)

    # Its state changes (repaired): the record goes and the pool plans again with both nodes' GPUs.
    seen = len(operator.log.read_text())
    mig_manager.heal(faulty)
    wait_for(lambda: _failure_record(core, faulty) is None, 60, "the failure record removed")
    wait_for(lambda: "on 2 GPUs" in operator.log.read_text()[seen:], 60, "a solve on both nodes' GPUs")


def test_mig_failed_mid_change_of_a_serving_node_lifts_tessera_s_cordon_and_the_moved_replicas_keep_serving(
        run_operator, mig_manager, core, custom, api_client, kubectl):
    """test_serving_node_change.py's demand rise, with the serving node's mig-manager failing: tessera has moved
    its replicas to the free node, cordoned it, scaled it to zero and relabelled it when `failed` comes. The node
    keeps its old layout, the system reads Degraded naming it with a Warning Event, the replicas on the free node
    keep serving (no task ever below its capacity in force, sampled every 0.3 s) and tessera's cordon is lifted
    (no tessera cordon survives convergence); once the stand-in succeeds again the node serves its new layout."""
    operator = run_operator(nodes=2, gpus_per_node=1)
    operator.extra_args = ["--without-replacement", "wait", "--mig-failure-backoff", "600"]
    operator.start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("riser", demandRequestsPerSecond=200))
    wait_ready(custom, namespace, ["riser"], READY_TIMEOUT_S, operator)
    (serving,) = {pinned_node(d) for d in children(api_client, namespace)[0]}
    (free,) = set(operator.pool.nodes) - {serving}
    before = gpu_states(core.read_node(serving))
    mig_manager.refuse(serving)

    sampler = Sampler(api_client, namespace, operator.pool.nodes)
    sampler.start()
    try:
        kubectl("patch", "compoundinferencesystem", "riser", "-n", namespace, "--type", "merge",
                "-p", '{"spec": {"demandRequestsPerSecond": 12000}}')
        degraded = _degraded_by_mig(custom, operator, "riser")
        wait_for(lambda: sampler.samples[-1][2][serving][:2] == (False, None), 60, "tessera's cordon lifted")
        cordoned = sampler.first(lambda _, nodes: nodes[serving][1] is not None)
        config_at_failure = sampler.samples[-1][2][serving][2]
    finally:
        sampler.done.set()
        sampler.join(timeout=5)

    assert cordoned is not None, "the failure came before tessera's change began: the check would be vacuous"
    assert f"node {serving}" in degraded["message"]
    assert any(serving in message for message in _warnings(kubectl, namespace, "MigLayoutFailed"))
    node = core.read_node(serving)
    assert node.metadata.labels[MIG_STATE] == "failed" and gpu_states(node) == before
    assert config_at_failure != sampler.samples[0][2][serving][2], "relabelled before mig-manager failed"
    on_free = [d for d in children(api_client, namespace)[0] if pinned_node(d) == free]
    assert on_free and all((d.status.available_replicas or 0) == d.spec.replicas > 0 for d in on_free)
    assert no_task_below_its_capacity_in_force(sampler.samples)

    mig_manager.heal(serving)
    found = wait_ready(custom, namespace, ["riser"], READY_TIMEOUT_S, operator)["riser"]
    assert found["status"]["plan"]["servedRequestsPerSecond"] == 12000
    assert condition(found, "Degraded")["status"] == "False"
    wait_for(lambda: {pinned_node(d) for d in children(api_client, namespace)[0]
                      if (d.status.available_replicas or 0) > 0} == {serving, free}, 60, "both nodes serving")
    _no_node_cordoned(core, operator)
