"""Node churn (issue 28 item 4): when a node counts as gone from its pool (operator/gpus/discovery.py)."""

from datetime import datetime, timezone

from tessera.operator import naming
from tessera.operator.gpus.discovery import grace_left_s, group_pools, node_facts

from .conftest import gpu_node

WENT_NOT_READY = "2026-12-04T10:00:00Z"
T0 = datetime(2026, 12, 4, 10, 0, tzinfo=timezone.utc).timestamp()
GRACE_S = 60.0


def not_ready(name: str = "gpu-0", **labels) -> dict:
    node = gpu_node(name, ready=False, extra_labels=labels)
    node["status"]["conditions"][0]["lastTransitionTime"] = WENT_NOT_READY
    return node


def in_pool(node: dict, at: float) -> bool:
    pools, _ = group_pools([node_facts(node, naming.MIG_CONFIG_REQUESTED, at, GRACE_S)])
    return bool(pools)


def test_a_node_notready_within_its_grace_period_stays_in_its_pool():
    assert in_pool(not_ready(), T0 + GRACE_S - 1)


def test_a_node_notready_past_its_grace_period_leaves_its_pool():
    assert not in_pool(not_ready(), T0 + GRACE_S + 1)


def test_a_node_rebooting_for_mig_manager_is_not_a_node_that_left_however_long():
    assert in_pool(not_ready(**{"nvidia.com/mig.config.state": "rebooting"}), T0 + 100 * GRACE_S)


def test_an_admins_cordon_takes_a_ready_node_out_at_once():
    assert not in_pool(gpu_node("gpu-0", unschedulable=True), T0)


def test_a_node_that_never_reported_ready_has_no_grace():
    node = gpu_node("gpu-0", ready=False)
    assert not in_pool(node, T0)


def test_the_reconcile_returns_when_the_grace_of_a_notready_node_ends():
    facts = node_facts(not_ready(), naming.MIG_CONFIG_REQUESTED, T0 + 20, GRACE_S)
    assert grace_left_s(facts, T0 + 20, GRACE_S) == GRACE_S - 20
    ready = node_facts(gpu_node("gpu-1"), naming.MIG_CONFIG_REQUESTED, T0, GRACE_S)
    assert grace_left_s(ready, T0, GRACE_S) is None


def test_a_node_tessera_cordoned_whose_mig_reboot_makes_it_notready_stays_in_its_pool_as_tessera_s():
    """tessera's change in progress (its cordon, then mig-manager's reboot) is not a node that left: the node keeps
    its place in the pool and tessera's record, so the change goes on and tessera lifts its own cordon after."""
    node = not_ready(**{"nvidia.com/mig.config.state": "rebooting"})
    node["spec"]["unschedulable"] = True
    node["metadata"]["annotations"] = {naming.CORDONED: "tessera-v1-next"}
    pools, _ = group_pools([node_facts(node, naming.MIG_CONFIG_REQUESTED, T0 + 100 * GRACE_S, GRACE_S)])
    assert [(n.name, n.cordoned_for) for p in pools for n in p.nodes] == [("gpu-0", "tessera-v1-next")]



def cordoned_up(node: dict, at: float) -> bool:
    facts = node_facts(node, naming.MIG_CONFIG_REQUESTED, at, GRACE_S)
    assert facts is not None
    return facts.cordoned_up


def test_a_node_an_admin_cordoned_while_it_is_up_is_known_as_one_whose_pods_serve_on():
    """Out of its pool, but a cordon stops no pod: its Deployments wait for the re-plan (decide.awaits_replan)."""
    assert cordoned_up(gpu_node("gpu-0", unschedulable=True), T0)
    within_grace = not_ready()
    within_grace["spec"]["unschedulable"] = True
    assert cordoned_up(within_grace, T0 + GRACE_S - 1)


def test_a_cordoned_node_notready_past_its_grace_or_tessera_s_cordon_or_no_cordon_is_no_such_node():
    past_grace = not_ready()
    past_grace["spec"]["unschedulable"] = True
    tessera_s = gpu_node("gpu-0", unschedulable=True)
    tessera_s["metadata"]["annotations"] = {naming.CORDONED: "tessera-v1-next"}
    assert not cordoned_up(past_grace, T0 + GRACE_S + 1)
    assert not cordoned_up(tessera_s, T0)
    assert not cordoned_up(gpu_node("gpu-0"), T0)
