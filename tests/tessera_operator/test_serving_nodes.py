"""Re-partitioning a serving node without dropping what it carries (operator/reconcile/serving_nodes.py).

The plan fixture serves object-detection from gpu-a and car-classification
from gpu-b. Here gpu-a must change its layout while a Deployment of the
previous plan serves detection there (2 replicas); `elsewhere` adds the
plan's detection Deployment on a third node, gpu-c, to carry it meanwhile.
"""

from __future__ import annotations

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.gpus.discovery import group_pools, node_facts
from tessera.operator.reconcile import builders
from tessera.operator.reconcile.actions import CordonNode, ScaleToZero, UncordonNode
from tessera.operator.reconcile.decide import (decide_relabels, desired_mig, live_children, planned_children,
                                               system_status)
from tessera.operator.reconcile.serving_nodes import Rules, decide_serving_nodes
from tessera.operator.gpus.node_plans import place, placed_gpus
from tessera.operator.reconcile.decide import PoolOutcome

from .conftest import gpu_node, pool_of
from .test_decide import NOW, SETTINGS, available, live, mig_labels, pinned_to, system

DEFAULT_RULES = Rules()
OLD_POD = "shop/traffic-old-detection-7d9f-abcde"


def node(name: str, labels: dict | None = None, cordoned_for: str | None = None) -> dict:
    body = gpu_node(name, extra_labels=labels, unschedulable=cordoned_for is not None)
    if cordoned_for is not None:
        body["metadata"]["annotations"] = {naming.CORDONED: cordoned_for}
    return body


def scenario(plan, gpu_a_cordoned: bool = False, gpu_a_applied: bool = False, gpu_b_serving: bool = False,
             gpu_a_failed: bool = False):
    """gpu-a serves detection on an older layout; gpu-b has its planned layout (or, `gpu_b_serving`, must change
    too while a server holds its GPUs); gpu-c is a third node of the pool. `gpu_a_failed`: gpu-a was relabelled
    for its planned layout and mig-manager answered `failed`, leaving the older one."""
    bare = pool_of(node("gpu-a"), node("gpu-b"), node("gpu-c"))
    placement = place(placed_gpus(plan), plan.tasks, {"gpu-a": 8, "gpu-b": 8, "gpu-c": 8})
    mig = desired_mig(bare, placement)
    a_labels = (mig_labels(mig["gpu-a"].config, "success", mig["gpu-a"].expected) if gpu_a_applied
                else mig_labels(mig["gpu-a"].config, "failed", {"3g.40gb": 2}) if gpu_a_failed
                else mig_labels("tessera-v1-older", "success", {"3g.40gb": 2}))
    b_labels = (mig_labels("tessera-v1-older", "success", {"1g.10gb": 7}) if gpu_b_serving
                else mig_labels(mig["gpu-b"].config, "success", mig["gpu-b"].expected))
    pool = pool_of(node("gpu-a", a_labels, cordoned_for=mig["gpu-a"].config if gpu_a_cordoned else None),
                   node("gpu-b", b_labels), node("gpu-c"))
    outcome = PoolOutcome(plan=plan, placement=placement)
    pods = {"gpu-a": {OLD_POD: "traffic-old-detection"}, **({"gpu-b": {"shop/b-pod": "traffic-old-b"}}
                                                            if gpu_b_serving else {})}
    outcome.mig, _, _ = decide_relabels(pool, desired_mig(pool, placement), {}, {n: list(p) for n, p in pods.items()},
                                        NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    planned, _ = planned_children(pool, [system()], outcome, SETTINGS)
    bodies = {body["metadata"]["labels"][naming.TASK_LABEL]: body for (kind, _, _), (body, _) in planned.items()
              if kind == "Deployment"}
    return pool, outcome, pods, bodies


def older(body: dict, name: str, replicas: int) -> dict:
    """A Deployment of the previous plan, serving: another name, its own replica count, all available."""
    renamed = {**body, "metadata": {**body["metadata"], "name": name}, "spec": {**body["spec"], "replicas": replicas}}
    return live(renamed, availableReplicas=replicas, updatedReplicas=replicas)


def elsewhere(body: dict) -> dict:
    moved = pinned_to(body, "gpu-c")
    moved["metadata"] = {**moved["metadata"], "name": body["metadata"]["name"] + "-c"}
    return moved


def decide(plan, rules: Rules = DEFAULT_RULES, extra_planned=(), extra_live=(), **shape):
    pool, outcome, pods, bodies = scenario(plan, **shape)
    old = [older(bodies["object-detection"], "traffic-old-detection", 2)]
    if shape.get("gpu_b_serving"):
        old.append(older(bodies["car-classification"], "traffic-old-b", 1))
    children = [*old, live(bodies["car-classification"]), *(make(bodies) for make in extra_live)]
    planned = [*bodies.values(), *(make(bodies) for make in extra_planned)]
    states, actions = decide_serving_nodes(pool, outcome.mig, pods, live_children(children, [system()]), planned,
                                           rules)
    return states, actions, outcome


def detection_on_c(bodies):
    return elsewhere(bodies["object-detection"])


def detection_on_c_available(bodies):
    return available(elsewhere(bodies["object-detection"]))


def test_a_serving_node_where_a_pod_tessera_does_not_own_holds_a_gpu_is_never_touched(plan):
    pool, outcome, _, bodies = scenario(plan)
    states, actions = decide_serving_nodes(pool, outcome.mig, {"gpu-a": {"team-b/trainer": None}},
                                           {}, list(bodies.values()), Rules())
    assert actions == [] and states["gpu-a"].blocked_by == ["team-b/trainer"]
    assert states["gpu-a"].serving_change is None


def test_a_serving_node_is_cordoned_and_drained_by_scaling_to_zero_once_what_it_carries_runs_elsewhere(plan):
    _, actions, outcome = decide(plan, extra_planned=[detection_on_c], extra_live=[detection_on_c_available])
    cordon, scale = actions
    assert isinstance(cordon, CordonNode) and cordon.node == "gpu-a"
    assert cordon.ops == builders.cordon_ops(outcome.mig["gpu-a"].config)
    assert isinstance(scale, ScaleToZero) and (scale.name, scale.node) == ("traffic-old-detection", "gpu-a")


def test_tessera_cordons_a_serving_node_only_while_it_is_not_cordoned(plan):
    """An admin who cordoned the node after the reconcile read it keeps the cordon as the admin's: the API server
    applies the cordon (and its record) only while its test holds, and the Actor then leaves the node's
    Deployments serving (e2e: test_node_churn.py)."""
    _, (cordon, _), outcome = decide(plan, extra_planned=[detection_on_c], extra_live=[detection_on_c_available])
    guard, *writes = cordon.ops
    assert guard == {"op": "test", "path": "/spec/unschedulable", "value": None}
    assert writes == [{"op": "add", "path": "/spec/unschedulable", "value": True},
                      {"op": "add", "path": "/metadata/annotations/tessera.ai~1cordoned",
                       "value": outcome.mig["gpu-a"].config}]


def test_a_serving_node_waits_while_its_replacements_elsewhere_are_not_available(plan):
    states, actions, _ = decide(plan, extra_planned=[detection_on_c],
                                extra_live=[lambda b: live(elsewhere(b["object-detection"]))])
    assert actions == []
    reason, message = states["gpu-a"].serving_change
    assert reason == st.REPLACEMENT_PENDING and elsewhere_name(plan) in message


def elsewhere_name(plan) -> str:
    _, _, _, bodies = scenario(plan)
    return elsewhere(bodies["object-detection"])["metadata"]["name"]


def test_without_replacement_wait_keeps_the_node_serving_and_says_so(plan):
    states, actions, outcome = decide(plan, Rules(without_replacement="wait"))
    assert actions == []
    assert states["gpu-a"].serving_change[0] == st.NO_REPLACEMENT_CAPACITY
    outcome.mig = states
    _, conditions, _ = system_status(system(), outcome)
    mig = next(c for c in conditions if c.type == st.MIG_LAYOUT_APPLIED)
    progressing = next(c for c in conditions if c.type == st.PROGRESSING)
    assert (mig.status, mig.reason) == (False, st.NO_REPLACEMENT_CAPACITY) and not progressing.status


def test_without_replacement_change_re_partitions_the_node_and_states_the_loss(plan):
    states, actions, _ = decide(plan, Rules(without_replacement="change"))
    assert [type(a) for a in actions] == [CordonNode, ScaleToZero]
    reason, message = states["gpu-a"].serving_change
    assert reason == st.NODE_CHANGED_WITHOUT_REPLACEMENT and "loses 2 replica(s)" in message and "object-detection" in message


def test_a_change_without_replacement_waits_while_another_serving_node_of_the_pool_changes(plan):
    states, actions, _ = decide(plan, Rules(max_changing=2, without_replacement="change"), gpu_b_serving=True)
    assert [(type(a), getattr(a, "node", None)) for a in actions][:1] == [(CordonNode, "gpu-a")]
    assert not [a for a in actions if isinstance(a, CordonNode) and a.node == "gpu-b"]
    assert states["gpu-b"].serving_change[0] == st.NODE_CHANGE_QUEUED


def test_at_most_max_changing_nodes_serving_nodes_of_a_pool_change_at_once(plan):
    b_elsewhere = [lambda b: elsewhere(b["car-classification"])]
    b_available = [lambda b: available(elsewhere(b["car-classification"]))]
    shape = dict(extra_planned=[detection_on_c, *b_elsewhere], extra_live=[detection_on_c_available, *b_available],
                 gpu_b_serving=True)
    one, actions, _ = decide(plan, Rules(max_changing=1), **shape)
    assert [a.node for a in actions if isinstance(a, CordonNode)] == ["gpu-a"]
    assert one["gpu-b"].serving_change[0] == st.NODE_CHANGE_QUEUED and "--max-changing-nodes 1" in one["gpu-b"].serving_change[1]
    _, both, _ = decide(plan, Rules(max_changing=2), **shape)
    assert [a.node for a in both if isinstance(a, CordonNode)] == ["gpu-a", "gpu-b"]


def test_a_node_tessera_cordoned_keeps_its_deployments_at_zero_until_its_layout_is_applied(plan):
    states, actions, _ = decide(plan, gpu_a_cordoned=True)
    assert [(type(a), a.name) for a in actions if isinstance(a, ScaleToZero)] == [(ScaleToZero, "traffic-old-detection")]
    assert not [a for a in actions if isinstance(a, (CordonNode, UncordonNode))]
    reason, message = states["gpu-a"].serving_change
    assert reason == st.NODE_CHANGED_WITHOUT_REPLACEMENT and "no other node serves traffic/object-detection" in message


def test_tessera_lifts_its_cordon_once_the_new_layout_is_applied_and_only_its_own(plan):
    _, actions, outcome = decide(plan, gpu_a_cordoned=True, gpu_a_applied=True)
    assert [(type(a), a.node) for a in actions] == [(UncordonNode, "gpu-a")]
    assert actions[0].ops == builders.uncordon_ops(outcome.mig["gpu-a"].config)
    _, untouched, _ = decide(plan, gpu_a_applied=True)
    assert untouched == [], "no uncordon of a node tessera did not cordon"


def test_tessera_lifts_its_cordon_when_mig_manager_failed_and_the_node_keeps_its_layout(plan):
    """No tessera cordon survives convergence (issue 28 item 3): a `failed` ends the change where it stands, the
    node uncordoned (its Deployments stay at zero: nothing goes onto a layout that is not applied) and never
    cordoned again for the same config (its failure backs off: mig_failures.py)."""
    states, actions, outcome = decide(plan, gpu_a_cordoned=True, gpu_a_failed=True)
    assert [(type(a), a.node) for a in actions] == [(UncordonNode, "gpu-a")]
    assert actions[0].ops == builders.uncordon_ops(outcome.mig["gpu-a"].config)
    assert "mig-manager failed" in actions[0].reason and states["gpu-a"].serving_change is None
    _, again, _ = decide(plan, gpu_a_failed=True)
    assert again == [], "the failed node, uncordoned, is not cordoned again"


def test_a_node_tessera_cordoned_stays_in_its_pool_and_one_an_admin_cordoned_leaves_it():
    ours = node("gpu-a", cordoned_for="tessera-v1-x")
    admins = gpu_node("gpu-b", unschedulable=True)
    pools, _ = group_pools([node_facts(n, naming.MIG_CONFIG_REQUESTED) for n in (ours, admins)])
    assert [n.name for p in pools for n in p.nodes] == ["gpu-a"]


def test_tessera_lifts_its_cordon_only_while_its_record_still_names_the_config_it_cordoned_for(plan):
    """An admin who took the cordon over (removed or changed tessera's record) after the reconcile read the node
    keeps it: the API server applies the uncordon only while its test holds (e2e: test_node_churn.py)."""
    _, (uncordon,), outcome = decide(plan, gpu_a_cordoned=True, gpu_a_applied=True)
    guard, *writes = uncordon.ops
    assert guard == {"op": "test", "path": "/metadata/annotations/tessera.ai~1cordoned",
                     "value": outcome.mig["gpu-a"].config}
    assert [op["op"] for op in writes] == ["remove", "add"]
