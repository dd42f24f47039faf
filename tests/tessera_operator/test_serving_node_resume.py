"""A new leader finishes an interrupted re-partition of a serving node from the cluster's state alone.

Each test is one state the change is left in when the leader dies between
two of its steps (the kill points after-cordon, after-scale-to-zero,
after-node-relabel, after-mig-success, after-uncordon: operator/testhooks.py),
read as a fresh operator reads it: nothing but the cluster (gpu-a's labels
and its annotation tessera.ai/cordoned, the Deployments, the pods holding
gpu-a's GPUs, the mig-parted ConfigMap's stamps). Each asserts the next step,
and that no step already taken is taken again. The decisions are one
reconcile's, in the reconciler's order: decide_relabels, decide_serving_nodes,
decide_children.

The scenario is test_serving_nodes.py's: gpu-a serves object-detection from
the previous plan's Deployment (2 replicas) on an older layout and must change
to the plan's; the plan puts detection on no other node, so the change goes on
without replacement capacity (--without-replacement change, the default).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.gpus.node_plans import place, placed_gpus
from tessera.operator.reconcile.actions import (Action, ApplyChild, CordonNode, DeleteChild, LabelNode, ScaleToZero,
                                                UncordonNode)
from tessera.operator.reconcile.decide import (NodeMig, PoolOutcome, decide_children, decide_relabels, desired_mig,
                                               live_children, nodes_to_relabel, planned_children,
                                               replacements_awaited, system_status)
from tessera.operator.reconcile.node_changes import NO_HOLD, NodeHold
from tessera.operator.reconcile.serving_nodes import Rules, decide_serving_nodes

from .conftest import pool_of
from .test_decide import NOW, SETTINGS, available, live, mig_labels, system
from .test_serving_nodes import OLD_POD, node, older

PROPAGATION_S = 90.0
OLD = "traffic-old-detection"
"""The previous plan's detection Deployment on gpu-a (test_serving_nodes.py's name)."""


@dataclass(frozen=True)
class Stand:
    """gpu-a as the interrupted change left it."""

    cordoned: bool = True
    """tessera's cordon and its annotation naming the planned config."""
    mig: str = "old"
    """"old": the older config, `success`; "pending": relabelled, mig-manager at work; "applied": the planned
    config's `success` with the planned counts."""
    old_replicas: int | None = 2
    """Spec replicas of the previous plan's Deployment on gpu-a (0: scaled to zero; None: deleted)."""
    pod: bool = True
    """Its pod still holds gpu-a's GPUs (serving, or terminating after the scale to zero)."""
    new_up: bool = False
    """The plan's Deployment on gpu-a applied and available."""
    loss: str | None = None
    """What the cordon recorded the change to cost (annotation tessera.ai/change-loss)."""


@dataclass
class Reconciled:
    actions: list[Action]
    gpu_a: NodeMig
    requeue: list[float]
    outcome: PoolOutcome

    def mig_condition(self) -> st.Condition:
        """The system's MigLayoutApplied, from this reconcile."""
        _, conditions, _ = system_status(system(), self.outcome)
        return next(c for c in conditions if c.type == st.MIG_LAYOUT_APPLIED)

    def steps(self) -> list[tuple[str, str]]:
        """The change's steps among the actions: (action, node or Deployment)."""
        return [(type(a).__name__, a.node) if isinstance(a, (CordonNode, UncordonNode, LabelNode))
                else (type(a).__name__, a.name) if isinstance(a, ScaleToZero)
                else (type(a).__name__, a.body["metadata"]["name"])
                for a in self.actions
                if isinstance(a, (CordonNode, UncordonNode, LabelNode, ScaleToZero))
                or (isinstance(a, ApplyChild) and a.kind == "Deployment")]


def reconcile(plan, stand: Stand, config_written_ago_s: float = 3600.0, hold: NodeHold = NO_HOLD) -> Reconciled:
    """One reconcile of a fresh leader over the cluster `stand` describes."""
    bare = pool_of(node("gpu-a"), node("gpu-b"), node("gpu-c"))
    placement = place(placed_gpus(plan), plan.tasks, {"gpu-a": 8, "gpu-b": 8, "gpu-c": 8})
    wanted = desired_mig(bare, placement)
    config = wanted["gpu-a"].config
    a_labels = {"old": mig_labels("tessera-v1-older", "success", {"3g.40gb": 2}),
                "pending": mig_labels(config, "pending", {}),
                "applied": mig_labels(config, "success", wanted["gpu-a"].expected)}[stand.mig]
    gpu_a = node("gpu-a", a_labels, cordoned_for=config if stand.cordoned else None)
    if stand.loss is not None:
        gpu_a["metadata"]["annotations"][naming.CHANGE_LOSS] = stand.loss
    pool = pool_of(gpu_a,
                   node("gpu-b", mig_labels(wanted["gpu-b"].config, "success", wanted["gpu-b"].expected)),
                   node("gpu-c"))
    outcome = PoolOutcome(plan=plan, placement=placement)
    mig = desired_mig(pool, placement)
    # the reconciler reads the GPU pods of the nodes to relabel only
    pods = {name: ({OLD_POD: OLD} if name == "gpu-a" and stand.pod else {}) for name in nodes_to_relabel(pool, mig)}
    outcome.mig, relabels, requeue = decide_relabels(pool, mig, {config: NOW - config_written_ago_s},
                                                     {name: list(found) for name, found in pods.items()}, NOW,
                                                     PROPAGATION_S, SETTINGS.mig_poll_s, hold)
    planned, _ = planned_children(pool, [system()], outcome, SETTINGS)
    bodies = {body["metadata"]["labels"][naming.TASK_LABEL]: body for (kind, _, _), (body, _) in planned.items()
              if kind == "Deployment"}
    children = [live(body) for (kind, _, _), (body, _) in planned.items() if kind == "Service"]
    children.append(available(bodies["car-classification"]))
    if stand.new_up:
        children.append(available(bodies["object-detection"]))
    if stand.old_replicas is not None:
        children.append(_previous(bodies["object-detection"], stand.old_replicas))
    current = live_children(children, [system()])
    outcome.mig, changes = decide_serving_nodes(pool, outcome.mig, pods, current,
                                                [body for body, _ in planned.values()], Rules())
    planned, outcome.deployments = planned_children(pool, [system()], outcome, SETTINGS)
    outcome.live = current
    outcome.awaited = replacements_awaited(planned, current, outcome)
    return Reconciled([*relabels, *changes, *decide_children(planned, [system()], current, outcome)],
                      outcome.mig["gpu-a"], requeue, outcome)


def _previous(body: dict, replicas: int) -> dict:
    """The previous plan's Deployment on gpu-a: serving, or as Cluster.scale_to_zero leaves it."""
    deployment = older(body, OLD, replicas)
    if replicas == 0:
        deployment["metadata"] = {**deployment["metadata"], "annotations": {naming.APPLIED_HASH: naming.SCALED_TO_ZERO}}
    return deployment


def new_detection(plan) -> str:
    (name,) = [n for kind, n in reconcile(plan, Stand(cordoned=False, mig="applied", old_replicas=None,
                                                      pod=False)).steps() if kind == "ApplyChild"]
    return name


def test_after_the_cordon_the_next_leader_scales_the_nodes_deployments_to_zero_and_cordons_nothing_again(plan):
    found = reconcile(plan, Stand())
    assert found.steps() == [("ScaleToZero", OLD)]
    assert not [a for a in found.actions if isinstance(a, DeleteChild)], "a serving Deployment is scaled, not deleted"
    assert found.gpu_a.serving_change is not None and found.gpu_a.serving_change[0] == st.NODE_CHANGED_WITHOUT_REPLACEMENT


def test_after_the_scale_to_zero_the_next_leader_waits_for_the_nodes_pods_to_go(plan):
    found = reconcile(plan, Stand(old_replicas=0))
    assert found.steps() == []
    assert found.gpu_a.blocked_by == [OLD_POD] and found.gpu_a.serving_change[0] == st.NODE_CHANGED_WITHOUT_REPLACEMENT


def test_once_the_pods_are_gone_the_next_leader_relabels_the_node_when_its_config_had_time_to_reach_mig_manager(plan):
    config = reconcile(plan, Stand()).gpu_a.config
    assert reconcile(plan, Stand(old_replicas=0, pod=False)).steps() == [("LabelNode", "gpu-a")]
    early = reconcile(plan, Stand(old_replicas=0, pod=False), config_written_ago_s=30)
    assert early.steps() == [] and min(early.requeue) == PROPAGATION_S - 30, (
        f"the wait for {config} counts from the ConfigMap's stamp, not from the new leader's start")


def test_after_the_relabel_the_next_leader_keeps_the_cordon_and_the_deployments_away_while_mig_manager_works(plan):
    found = reconcile(plan, Stand(mig="pending", old_replicas=None, pod=False))
    assert found.steps() == []
    assert not found.gpu_a.applied and found.gpu_a.serving_change[0] == st.NODE_DRAINING


def test_after_mig_managers_success_the_next_leader_lifts_the_cordon_and_brings_the_deployments_back(plan):
    found = reconcile(plan, Stand(mig="applied", old_replicas=None, pod=False))
    assert found.steps() == [("UncordonNode", "gpu-a"), ("ApplyChild", new_detection(plan))]


def test_after_the_uncordon_the_next_leader_brings_the_deployments_back_and_cordons_nothing(plan):
    found = reconcile(plan, Stand(cordoned=False, mig="applied", old_replicas=None, pod=False))
    assert found.steps() == [("ApplyChild", new_detection(plan))]


def test_a_finished_change_gets_no_step_again(plan):
    found = reconcile(plan, Stand(cordoned=False, mig="applied", old_replicas=None, pod=False, new_up=True))
    assert found.steps() == [] and found.gpu_a.serving_change is None


def test_a_change_tessera_began_is_finished_outside_the_maintenance_window(plan):
    closed = NodeHold.of({}, "never")
    assert reconcile(plan, Stand(), hold=closed).steps() == [("ScaleToZero", OLD)]
    unbegun = reconcile(plan, Stand(cordoned=False), hold=closed)
    assert unbegun.steps() == [] and unbegun.gpu_a.waiting, "a change not begun still waits for the window"


def test_a_pause_holds_a_begun_change_where_it_stands(plan):
    paused = reconcile(plan, Stand(), hold=NodeHold({"gpu-a": "paused (tessera.ai/paused on the system)"}))
    assert paused.steps() == [] and paused.gpu_a.waiting


def test_a_change_without_replacement_records_its_loss_on_the_node_with_the_cordon(plan):
    (cordon,) = [a for a in reconcile(plan, Stand(cordoned=False)).actions if isinstance(a, CordonNode)]
    (recorded,) = [op["value"] for op in cordon.ops if op["path"].endswith("change-loss")]
    assert "traffic/object-detection loses 2 replica(s) until the node serves again" in recorded


def test_the_next_leader_states_the_loss_the_cordon_recorded_once_the_deployments_are_gone(plan):
    recorded = "without replacement capacity: traffic/object-detection loses 2 replica(s) until the node serves again"
    found = reconcile(plan, Stand(mig="pending", old_replicas=None, pod=False, loss=recorded))
    mig = found.mig_condition()
    assert (mig.status, mig.reason) == (False, st.NODE_CHANGED_WITHOUT_REPLACEMENT) and recorded in mig.message


def test_the_uncordon_lifts_the_loss_the_cordon_recorded_with_it(plan):
    recorded = "without replacement capacity: traffic/object-detection loses 2 replica(s) until the node serves again"
    found = reconcile(plan, Stand(mig="applied", old_replicas=None, pod=False, loss=recorded))
    (uncordon,) = [a for a in found.actions if isinstance(a, UncordonNode)]
    assert {"op": "remove", "path": "/metadata/annotations/tessera.ai~1change-loss"} in uncordon.ops
