"""decide: what one reconcile writes, from what it read, without a cluster (operator/reconcile/decide.py).

Each test is one rule of docs/operator.md's "Invariants of a reconcile" table.
The known-false ones are strict xfails naming the issue that makes them hold.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.api.systems import read_system
from tessera.operator.gpus.node_plans import place, placed_gpus
from tessera.operator.reconcile import builders
from tessera.operator.reconcile.actions import ApplyChild, DeleteChild, LabelNode, PatchStatus, PostEvent
from tessera.operator.reconcile.decide import (PoolOutcome, decide_children, decide_mig_configs, decide_relabels,
                                               decide_status, desired_mig, invalid_status, layout_applied,
                                               live_children, no_pool_status, nodes_left_by_system,
                                               planned_children, replacements_awaited, replacements_in_place,
                                               stored_plan_stands,
                                               system_status)
from tessera.operator.reconcile.node_changes import NO_HOLD, NodeHold
from tessera.operator.settings import OperatorSettings

from .conftest import gpu_node, pool_of

SETTINGS = OperatorSettings(default_image="example.org/default:1")
SYSTEM = {
    "apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem",
    "metadata": {"name": "traffic", "namespace": "shop", "uid": "uid-1", "generation": 3},
    "spec": {"slo": {"latencyMilliseconds": 250, "accuracy": 0.8}, "demandRequestsPerSecond": 50,
             "tasks": [{"name": "object-detection", "variants": [
                           {"name": "yolov5m", "accuracy": 1.0, "gpuMemoryGigabytes": 2.5, "image": "example.org/y:1"}]},
                       {"name": "car-classification", "variants": [
                           {"name": "effnet-b0", "accuracy": 1.0, "gpuMemoryGigabytes": 1.0}]}],
             "edges": [{"source": "object-detection", "target": "car-classification", "factor": 2.0}]},
}
NOW = 1_000_000.0


def system(status: dict | None = None, **spec):
    return read_system({**SYSTEM, "spec": {**SYSTEM["spec"], **spec}, "status": status or {}})


def mig_labels(config: str | None, state: str | None, counts: dict[str, int]) -> dict[str, str]:
    labels = {f"nvidia.com/mig-{profile}.count": str(n) for profile, n in counts.items()}
    if config:
        labels["nvidia.com/mig.config"] = config
    if state:
        labels["nvidia.com/mig.config.state"] = state
    return labels


def pool_with(states: dict[str, tuple[str | None, str | None, dict[str, int]]] | None = None):
    """gpu-a and gpu-b; `states` gives a node's (config, mig-manager state, advertised counts)."""
    states = states or {}
    return pool_of(*[gpu_node(name, extra_labels=mig_labels(*states.get(name, (None, None, {}))))
                     for name in ("gpu-a", "gpu-b")])


def outcome_for(plan, pool, applied: set[str] = frozenset(), **fields) -> PoolOutcome:
    outcome = PoolOutcome(plan=plan, placement=place(placed_gpus(plan), plan.tasks, {"gpu-a": 8, "gpu-b": 8}),
                          **fields)
    outcome.mig = desired_mig(pool, outcome.placement)
    for name in applied:
        outcome.mig[name].applied = True
    return outcome


def applied_pool(plan):
    """A pool whose nodes advertise the plan's layouts on mig-manager's success."""
    bare = pool_with()
    mig = desired_mig(bare, outcome_for(plan, bare).placement)
    return pool_with({name: (m.config, "success", m.expected) for name, m in mig.items()})


def live(body: dict, **status) -> dict:
    """A child as the API server returns it: tessera's body with an owner, a uid and a status."""
    return {**body, "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}"},
            "status": status}


def children_decision(plan, pool, systems, children, **fields):
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"}, **fields)
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    return planned, decide_children(planned, systems, live_children(children, systems), outcome)


# -- children ------------------------------------------------------------------

def test_an_unchanged_cluster_gets_no_write_of_a_child(plan):
    pool, systems = applied_pool(plan), [system()]
    planned, _ = children_decision(plan, pool, systems, [])
    _, actions = children_decision(plan, pool, systems, [live(body) for body, _ in planned.values()])
    assert actions == []


def test_a_child_missing_or_different_from_the_plan_is_applied(plan):
    pool, systems = applied_pool(plan), [system()]
    planned, first = children_decision(plan, pool, systems, [])
    assert {a.body["metadata"]["name"] for a in first if isinstance(a, ApplyChild)} == {k[2] for k in planned}
    changed = [live({**body, "metadata": {**body["metadata"], "annotations": {naming.APPLIED_HASH: "old"}}})
               for body, _ in planned.values()]
    _, again = children_decision(plan, pool, systems, changed)
    assert len([a for a in again if isinstance(a, ApplyChild)]) == len(planned)


def test_services_are_applied_before_any_deployment(plan):
    _, actions = children_decision(plan, applied_pool(plan), [system()], [])
    kinds = [a.kind for a in actions if isinstance(a, ApplyChild)]
    assert kinds == sorted(kinds, key=lambda k: k != "Service") and "Deployment" in kinds


def test_no_deployment_goes_onto_a_node_whose_layout_is_not_applied(plan):
    pool, systems = pool_with(), [system()]
    outcome = outcome_for(plan, pool, applied={"gpu-b"})
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    applied = [a.body for a in decide_children(planned, systems, {}, outcome) if isinstance(a, ApplyChild)]
    nodes = {d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
             ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0] for d in applied if d["kind"] == "Deployment"}
    assert nodes == {"gpu-b"}


def pinned_nodes(actions) -> set[str]:
    return {builders.pinned_hostname(a.body) for a in actions if isinstance(a, ApplyChild) and a.kind == "Deployment"}


def changing_pool(plan, state: str = "pending", counts: dict[str, int] | None = None,
                  allocatable: dict[str, str] | None = None, annotations: dict[str, str] | None = None):
    """gpu-a (3g.40gb planned) relabelled for its planned layout, mig-manager at `state`, advertising `counts` by its
    labels and `allocatable` by the device plugin's; gpu-b's layout applied."""
    mig = desired_mig(pool_with(), outcome_for(plan, pool_with()).placement)
    a = gpu_node("gpu-a", extra_labels=mig_labels(mig["gpu-a"].config, state, counts or {}))
    a["status"]["allocatable"] = allocatable or {}
    a["metadata"]["annotations"] = annotations or {}
    return pool_of(a, gpu_node("gpu-b", extra_labels=mig_labels(mig["gpu-b"].config, "success", mig["gpu-b"].expected)))


def servers_placed(plan, pool, gpu_pods=None, written_at: float = NOW - 100,
                   hold: NodeHold = NO_HOLD) -> tuple[set[str], PoolOutcome]:
    """The nodes one reconcile at NOW applies Deployments onto, after its relabels (the configs written at
    `written_at`, a propagation of 90 s), and its outcome."""
    outcome = outcome_for(plan, pool)
    written = {m.config: written_at for m in outcome.mig.values()}
    outcome.mig, _, _ = decide_relabels(pool, outcome.mig, written, gpu_pods or {}, NOW, propagation_s=90,
                                        poll_s=SETTINGS.mig_poll_s, hold=hold)
    planned, outcome.deployments = planned_children(pool, [system()], outcome, SETTINGS)
    return pinned_nodes(decide_children(planned, [system()], {}, outcome)), outcome


def test_a_server_goes_onto_a_node_that_serves_nothing_while_mig_manager_applies_its_layout(plan):
    nodes, outcome = servers_placed(plan, changing_pool(plan))
    assert nodes == {"gpu-a", "gpu-b"}
    _, conditions, _ = system_status(system(), outcome)
    by_type = {c.type: c for c in conditions}
    assert not by_type[st.READY].status and by_type[st.MIG_LAYOUT_APPLIED].reason == st.MIG_PENDING


def test_a_server_goes_onto_a_node_that_serves_nothing_in_the_reconcile_that_relabels_it(plan):
    nodes, _ = servers_placed(plan, pool_with())
    assert nodes == {"gpu-a", "gpu-b"}


def test_a_server_goes_onto_a_node_that_serves_nothing_while_its_layout_config_propagates(plan):
    nodes, outcome = servers_placed(plan, pool_with(), written_at=NOW)
    assert nodes == {"gpu-a", "gpu-b"}
    assert all(m.propagating and not m.changing for m in outcome.mig.values()), "the relabel itself still waits"


def test_a_server_waits_for_the_layout_of_a_node_whose_config_propagates_while_it_advertises_the_server_profile(plan):
    old_layout = pool_with({"gpu-a": ("all-3g.40gb", "success", {"3g.40gb": 2})})
    nodes, _ = servers_placed(plan, old_layout, written_at=NOW)
    assert nodes == {"gpu-b"}


def test_a_server_waits_for_the_layout_of_a_node_whose_gpus_pods_hold_or_whose_change_is_held(plan):
    serving, _ = servers_placed(plan, pool_with(), gpu_pods={"gpu-a": ["other/pod"], "gpu-b": ["other/pod"]})
    paused, _ = servers_placed(plan, pool_with(), hold=NodeHold(paused={"gpu-a": "paused", "gpu-b": "paused"}))
    assert serving == paused == set()


def test_a_server_waits_for_the_layout_of_a_node_that_advertises_its_mig_profile(plan):
    by_labels, _ = servers_placed(plan, changing_pool(plan, counts={"3g.40gb": 2}))
    by_allocatable, _ = servers_placed(plan, changing_pool(plan, allocatable={"nvidia.com/mig-3g.40gb": "2"}))
    assert by_labels == by_allocatable == {"gpu-b"}
    other_profile, _ = servers_placed(plan, changing_pool(plan, counts={"1g.10gb": 7},
                                                         allocatable={"nvidia.com/mig-1g.10gb": "7"}))
    assert other_profile == {"gpu-a", "gpu-b"}


def test_a_server_waits_for_the_layout_of_a_serving_node_tessera_cordoned_to_re_partition(plan):
    nodes, _ = servers_placed(plan, changing_pool(plan, annotations={naming.CORDONED: "tessera-v1-x"}))
    assert nodes == {"gpu-b"}


def test_a_server_waits_for_a_layout_mig_manager_failed(plan):
    nodes, _ = servers_placed(plan, changing_pool(plan, state="failed"))
    assert nodes == {"gpu-b"}


def test_a_server_applied_before_its_layout_is_withdrawn_with_its_budget_when_mig_manager_fails_the_layout(plan):
    pool, systems = changing_pool(plan, state="failed"), [system()]
    outcome = outcome_for(plan, pool)
    outcome.mig, _, _ = decide_relabels(pool, outcome.mig, {}, {}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    on_a = {body["metadata"]["name"] for body, _ in planned.values()
            if body["kind"] == "Deployment" and builders.pinned_hostname(body) == "gpu-a"}
    early = [live(body) for body, _ in planned.values()
             if body["kind"] in ("Deployment", "PodDisruptionBudget") and body["metadata"]["name"] in on_a]
    actions = decide_children(planned, systems, live_children(early, systems), outcome)
    assert [(a.child["kind"], a.child["metadata"]["name"]) for a in actions if isinstance(a, DeleteChild)] == sorted(
        (c["kind"], c["metadata"]["name"]) for c in early) and len(early) == 2
    serving = [{**c, "status": {"availableReplicas": 1}} if c["kind"] == "Deployment" else c for c in early]
    assert deleted(decide_children(planned, systems, live_children(serving, systems), outcome)) == []


def stale_deployment(plan, pool, systems) -> dict:
    planned, _ = children_decision(plan, pool, systems, [])
    body = next(b for (kind, _, _), (b, _) in planned.items() if kind == "Deployment")
    return live({**body, "metadata": {**body["metadata"], "name": "traffic-made-by-an-older-tessera"}})


def serving_plan(plan, pool, systems) -> list[dict]:
    """The plan's children live, its Deployments available: a child no plan wants is then free to go."""
    planned, _ = children_decision(plan, pool, systems, [])
    return [available(body) if body["kind"] == "Deployment" else live(body) for body, _ in planned.values()]


def test_an_owned_child_no_plan_wants_is_deleted(plan):
    pool, systems = applied_pool(plan), [system()]
    stale = stale_deployment(plan, pool, systems)
    _, actions = children_decision(plan, pool, systems, [stale, *serving_plan(plan, pool, systems)])
    assert [a.child["metadata"]["name"] for a in actions if isinstance(a, DeleteChild)] == [stale["metadata"]["name"]]


def test_a_failed_solve_never_deletes_a_running_server(plan):
    pool, systems = applied_pool(plan), [system()]
    stale = stale_deployment(plan, pool, systems)
    _, actions = children_decision(plan, pool, systems, [stale, *serving_plan(plan, pool, systems)],
                                   solve_error="the solver process died")
    assert not [a for a in actions if isinstance(a, DeleteChild)]


def test_an_invalid_systems_children_are_neither_rewritten_nor_deleted(plan):
    pool = applied_pool(plan)
    good = [system()]
    planned, _ = children_decision(plan, pool, good, [])
    children = [live({**b, "metadata": {**b["metadata"], "annotations": {naming.APPLIED_HASH: "old"}}})
                for b, _ in planned.values()]
    _, actions = children_decision(plan, pool, good, children, invalid={"shop/traffic": (st.INVALID_SPEC, "bad")})
    assert actions == []


def test_the_children_of_a_spec_that_turned_invalid_at_the_api_keep_running(plan):
    pool = applied_pool(plan)
    planned, _ = children_decision(plan, pool, [system()], [])
    broken = [system(edges=[{"source": "object-detection", "target": "object-detection"}])]
    _, actions = children_decision(plan, pool, broken, [live(b) for b, _ in planned.values()])
    assert not [a for a in actions if isinstance(a, DeleteChild)]


def test_the_children_of_a_system_whose_variant_was_renamed_before_its_new_plan_are_kept_as_they_are(plan):
    pool = applied_pool(plan)
    planned, _ = children_decision(plan, pool, [system()], [])
    tasks = copy.deepcopy(SYSTEM["spec"]["tasks"])
    tasks[1]["variants"][0]["name"] = "effnet-b0-next"
    renamed = [system(tasks=tasks)]
    replanned, actions = children_decision(plan, pool, renamed, [live(b) for b, _ in planned.values()])
    assert replanned == {} and actions == []


def test_a_serving_deployment_is_not_deleted_before_its_replacement_is_applied(plan):
    pool, systems = pool_with(), [system()]
    old = stale_deployment(plan, applied_pool(plan), systems)
    outcome = outcome_for(plan, pool)  # the new plan's nodes wait for their MIG layout: nothing new is applied
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    actions = decide_children(planned, systems, live_children([old], systems), outcome)
    assert not [a for a in actions if isinstance(a, DeleteChild)]


def available(body: dict) -> dict:
    """A child whose every planned replica is available and updated."""
    replicas = body["spec"]["replicas"]
    return live(body, availableReplicas=replicas, updatedReplicas=replicas)


def pinned_to(body: dict, hostname: str) -> dict:
    moved = copy.deepcopy(body)
    (term,) = moved["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    term["matchExpressions"][0]["values"] = [hostname]
    return moved


def replacement_decision(plan, pool, outcome, extra_live=(), old_on: str = "gpu-b"):
    """The stale Deployment (car-classification's, pinned to `old_on`), and what decide does with it beside
    `extra_live` (the planned bodies by task, for the test to make live)."""
    systems = [system()]
    old = pinned_to(stale_deployment(plan, applied_pool(plan), systems), old_on)
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    by_task = {body["metadata"]["labels"][naming.TASK_LABEL]: body for (kind, _, _), (body, _) in planned.items()
               if kind == "Deployment"}
    children = [old, *(make(by_task[task]) for task, make in extra_live)]
    return old, decide_children(planned, systems, live_children(children, systems), outcome)


def deleted(actions) -> list[str]:
    return [a.child["metadata"]["name"] for a in actions if isinstance(a, DeleteChild)]


def test_a_deployment_no_plan_wants_is_deleted_once_its_replacements_are_available(plan):
    pool = pool_with()
    old, waiting = replacement_decision(plan, pool, outcome_for(plan, pool), [("car-classification", live)])
    assert deleted(waiting) == [], "its replacement exists but has no available replica yet"
    old, actions = replacement_decision(plan, pool, outcome_for(plan, pool), [("car-classification", available)])
    assert deleted(actions) == [old["metadata"]["name"]]


def test_a_replacement_on_an_applied_node_where_the_old_deployment_runs_is_not_awaited(plan):
    """It may need the very MIG instances the old one holds (a renamed Deployment): waiting would never end.
    Here gpu-b's layout has the one 1g.10gb instance the plan uses there, and the old Deployment holds it."""
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    outcome.mig["gpu-b"].expected = {"1g.10gb": 1}
    old, actions = replacement_decision(plan, pool, outcome)
    assert deleted(actions) == [old["metadata"]["name"]]


def in_place(plan, without_replacement: str):
    """car-classification's old Deployment on gpu-b, whose layout has the one 1g.10gb instance the plan's
    replacement there needs, the one the old Deployment holds: (old, replacement's name, outcome, actions)."""
    pool, systems = applied_pool(plan), [system()]
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"}, without_replacement=without_replacement)
    outcome.mig["gpu-b"].expected = {"1g.10gb": 1}
    old = pinned_to(stale_deployment(plan, pool, systems), "gpu-b")
    planned, outcome.deployments = planned_children(pool, systems, outcome, SETTINGS)
    outcome.live = live_children([old], systems)
    outcome.in_place = replacements_in_place(planned, outcome.live, outcome)
    (replacement,) = [name for (kind, _, name), (body, _) in planned.items() if kind == "Deployment"
                      and body["metadata"]["labels"][naming.TASK_LABEL] == "car-classification"]
    return old, replacement, outcome, decide_children(planned, systems, outcome.live, outcome)


def test_a_replacement_that_needs_the_old_deployments_instances_is_found_in_place(plan):
    old, replacement, outcome, _ = in_place(plan, "change")
    assert outcome.in_place == {("Deployment", "shop", old["metadata"]["name"]): [replacement]}


def test_a_replacement_in_place_with_without_replacement_wait_holds_the_old_deployment_and_says_why(plan):
    """The old one keeps serving; its replacement is not applied (its pod could only wait for the instance)."""
    old, replacement, outcome, actions = in_place(plan, "wait")
    assert deleted(actions) == []
    assert replacement not in [a.body["metadata"]["name"] for a in actions if isinstance(a, ApplyChild)]
    ready = next(c for c in system_status(system(), outcome)[1] if c.type == st.READY)
    assert (ready.status, ready.reason) == (False, st.NO_REPLACEMENT_CAPACITY)
    assert old["metadata"]["name"] in ready.message and "gpu-b" in ready.message


def test_a_replacement_in_place_with_without_replacement_change_deletes_the_old_deployment_stating_the_loss(plan):
    old, replacement, outcome, actions = in_place(plan, "change")
    assert deleted(actions) == [old["metadata"]["name"]]
    assert replacement in [a.body["metadata"]["name"] for a in actions if isinstance(a, ApplyChild)]
    ready = next(c for c in system_status(system(), outcome)[1] if c.type == st.READY)
    assert (ready.status, ready.reason) == (False, st.REPLACED_IN_PLACE)
    assert f"{old['spec']['replicas']} replica(s) serve nothing" in ready.message
    assert st.REPLACED_IN_PLACE in st.WARNING_REASONS, "the loss is a Warning Event"


def test_a_replacement_in_place_of_a_task_the_plan_also_runs_elsewhere_is_make_before_break(plan):
    """With a replica of the task planned on gpu-a too, the old one waits for it (replacements_awaited): no break."""
    _, replacement, outcome, _ = in_place(plan, "wait")
    planned, _ = planned_children(applied_pool(plan), [system()], outcome, SETTINGS)
    body = planned[("Deployment", "shop", replacement)][0]
    elsewhere = pinned_to({**body, "metadata": {**body["metadata"], "name": "traffic-elsewhere"}}, "gpu-a")
    planned[("Deployment", "shop", "traffic-elsewhere")] = (elsewhere, True)
    assert replacements_in_place(planned, outcome.live, outcome) == {}
    assert list(replacements_awaited(planned, outcome.live, outcome).values()) == [["traffic-elsewhere"]]


def test_a_replacement_on_an_applied_node_with_instances_beside_the_old_deployment_is_awaited(plan):
    """gpu-b's layout has seven 1g.10gb instances, the plan uses one, the old Deployment holds one: the replacement
    can start while the old one serves, so it goes only once the replacement is available (a demand change from
    50 to 500 that moved a system to another configuration on the same node deleted its server first: e2e
    tests/e2e/test_hostile_tenant.py)."""
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    _, waiting = replacement_decision(plan, pool, outcome, [("car-classification", live)])
    assert deleted(waiting) == [], "its replacement has no available replica yet"
    old, actions = replacement_decision(plan, pool, outcome, [("car-classification", available)])
    assert deleted(actions) == [old["metadata"]["name"]]


def test_a_replacement_on_a_node_whose_change_waits_for_its_pods_to_go_is_not_awaited(plan):
    """The replacement (on gpu-b) comes only after gpu-b's pods go: the old one (on gpu-a) does not wait for it."""
    pool = pool_with()
    outcome = outcome_for(plan, pool)
    outcome.mig["gpu-b"].blocked_by = ["shop/some-server-pod"]
    old, actions = replacement_decision(plan, pool, outcome, old_on="gpu-a")
    assert deleted(actions) == [old["metadata"]["name"]]


def test_a_deployment_on_a_node_that_waits_to_change_is_left_to_the_node_change(plan):
    """Its node's re-partition scales it to zero when the node's turn comes (serving_nodes.py), not a delete now."""
    pool = pool_with()
    outcome = outcome_for(plan, pool)
    outcome.mig["gpu-b"].blocked_by = ["shop/traffic-made-by-an-older-tessera-pod"]
    _, actions = replacement_decision(plan, pool, outcome)
    assert deleted(actions) == []


def test_a_system_whose_old_deployments_wait_for_their_replacements_reads_replacement_pending(plan):
    pool, systems = pool_with(), [system()]
    old = stale_deployment(plan, applied_pool(plan), systems)
    outcome = outcome_for(plan, pool)
    planned, outcome.deployments = planned_children(pool, systems, outcome, SETTINGS)
    outcome.live = live_children([old], systems)
    outcome.awaited = replacements_awaited(planned, outcome.live, outcome)
    _, conditions, _ = system_status(system(), outcome)
    progressing = next(c for c in conditions if c.type == st.PROGRESSING)
    assert (progressing.status, progressing.reason) == (True, st.REPLACEMENT_PENDING)
    assert old["metadata"]["name"] in progressing.message


def cordoned_b(plan, left: bool, cordoned_up: bool, replacement=available):
    """gpu-b (car-classification's node) left the pool: `cordoned_up` an admin cordoned it while it is up (else it
    is gone, or NotReady past its grace); `left` the plan in force still puts the system there (the re-plan
    without it runs; else the plan made without it is in force and places car-classification on gpu-a). The
    plan's Deployments on gpu-a live as `replacement` makes them; the old one on gpu-b live and available: what
    decide does with it."""
    systems = [system()]
    pool = pool_of(gpu_node("gpu-a"))
    tasks = plan.tasks
    gpus = [g for g in placed_gpus(plan) if g.node == "gpu-a"]
    if not left:
        gpus[0].instances[1] = gpus[0].instances[1].model_copy(update={"task": "car-classification"})
    outcome = PoolOutcome(plan=plan, placement=place(gpus, tasks, {"gpu-a": 8}),
                          left_nodes={"shop/traffic": ["gpu-b"]} if left else {},
                          cordoned_up={"gpu-b": "gpu-b"} if cordoned_up else {})
    outcome.mig = desired_mig(pool, outcome.placement)
    outcome.mig["gpu-a"].applied = True
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    on_b, _ = children_decision(plan, applied_pool(plan), systems, [])
    (old,) = [available(body) for (kind, _, _), (body, _) in on_b.items() if kind == "Deployment"
              and builders.pinned_hostname(body) == "gpu-b"]
    children = [old, *(replacement(body) for (kind, _, _), (body, _) in planned.items() if kind == "Deployment")]
    outcome.live = live_children(children, systems)
    return old, outcome, deleted(decide_children(planned, systems, outcome.live, outcome))


def test_a_server_on_a_node_an_admin_cordoned_serves_until_a_plan_without_the_node_is_in_force(plan):
    """The placement on the nodes left no longer wants it and none of its task's planned Deployments waits, yet a
    cordon stopped none of its pods: it is kept, waiting for the re-plan. (Without awaits_replan it is deleted at
    once and car-classification serves nothing until the re-plan's replacement is available.)"""
    old, outcome, gone = cordoned_b(plan, left=True, cordoned_up=True)
    assert gone == []
    key = ("Deployment", "shop", old["metadata"]["name"])
    assert replacements_awaited({}, outcome.live, outcome) == {key: ["a plan without the cordoned node gpu-b"]}
    ready = next(c for c in system_status(system(), outcome)[1] if c.type == st.READY)
    assert (ready.status, ready.reason) == (False, st.PLANNING)
    assert "those on gpu-b (cordoned, up) serve on until the re-plan's replacements are available" in ready.message


def test_a_server_on_a_cordoned_node_goes_once_the_plan_without_the_node_has_its_replacements_available(plan):
    old, _, waiting = cordoned_b(plan, left=False, cordoned_up=True, replacement=live)
    assert waiting == [], "the re-plan's replacement on gpu-a has no available replica yet"
    old, _, gone = cordoned_b(plan, left=False, cordoned_up=True)
    assert gone == [old["metadata"]["name"]]


def test_a_server_on_a_node_gone_or_notready_past_its_grace_is_deleted_at_once(plan):
    """Its pods serve nothing: nothing to keep (as before the cordon rule)."""
    old, _, gone = cordoned_b(plan, left=True, cordoned_up=False)
    assert gone == [old["metadata"]["name"]]


# -- disruption budgets ---------------------------------------------------------

def budgets(planned) -> dict[str, dict]:
    return {name: body for (kind, _, name), (body, _) in planned.items() if kind == "PodDisruptionBudget"}


def budget_of(deployment: dict) -> dict:
    """The budget of a live Deployment (a stale one keeps the budget it was applied with), live."""
    return live(builders.disruption_budget(deployment))


def test_each_model_server_deployment_gets_a_budget_on_its_own_pods_owned_like_it(plan):
    planned, _ = children_decision(plan, applied_pool(plan), [system()], [])
    servers = {name: body for (kind, _, name), (body, _) in planned.items() if kind == "Deployment"}
    found = budgets(planned)
    assert found.keys() == servers.keys() and found
    for name, budget in found.items():
        deployment = servers[name]
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]
        assert budget["metadata"]["ownerReferences"] == deployment["metadata"]["ownerReferences"]
        assert budget["metadata"]["labels"][naming.CHILD_KIND_LABEL] == builders.DISRUPTION_BUDGET
        assert budget["metadata"]["labels"][naming.MANAGED_BY] == naming.MANAGED_BY_VALUE


def test_a_budget_lets_a_drain_evict_one_pod_at_a_time_even_of_a_one_replica_deployment(plan):
    """maxUnavailable 1, never a minAvailable of the replicas (with one replica that blocks every drain forever);
    a pod that is not Ready may always go (it serves nothing)."""
    planned, _ = children_decision(plan, applied_pool(plan), [system()], [])
    single = next(b for (kind, _, _), (b, _) in planned.items() if kind == "Deployment" and b["spec"]["replicas"] == 1)
    spec = builders.disruption_budget(single)["spec"]
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_a_budget_is_applied_with_its_deployment_only_onto_a_node_whose_layout_is_applied(plan):
    pool, systems = pool_with(), [system()]
    outcome = outcome_for(plan, pool, applied={"gpu-b"})
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    applied = [a.body for a in decide_children(planned, systems, {}, outcome) if isinstance(a, ApplyChild)]
    deployments = {b["metadata"]["name"] for b in applied if b["kind"] == "Deployment"}
    assert {b["metadata"]["name"] for b in applied if b["kind"] == "PodDisruptionBudget"} == deployments
    assert len(deployments) < len(budgets(planned)), "gpu-a's Deployment and budget wait for its layout"


def test_a_budget_stays_while_its_deployment_no_plan_wants_serves_for_its_replacement(plan):
    pool = pool_with()
    systems = [system()]
    old = pinned_to(stale_deployment(plan, applied_pool(plan), systems), "gpu-b")
    outcome = outcome_for(plan, pool)
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    replacement = next(b for (kind, _, _), (b, _) in planned.items() if kind == "Deployment"
                       and b["metadata"]["labels"][naming.TASK_LABEL] == "car-classification")
    actions = decide_children(planned, systems, live_children([old, budget_of(old), live(replacement)], systems),
                              outcome)
    assert deleted(actions) == []


def test_a_budget_goes_in_the_reconcile_that_deletes_its_deployment_after_it(plan):
    pool, systems = applied_pool(plan), [system()]
    stale = stale_deployment(plan, pool, systems)
    _, actions = children_decision(plan, pool, systems, [stale, budget_of(stale), *serving_plan(plan, pool, systems)])
    assert [(a.child["kind"], a.child["metadata"]["name"]) for a in actions if isinstance(a, DeleteChild)] == [
        ("Deployment", stale["metadata"]["name"]), ("PodDisruptionBudget", stale["metadata"]["name"])]


def test_a_budget_whose_deployment_is_gone_is_deleted(plan):
    pool, systems = applied_pool(plan), [system()]
    stale = stale_deployment(plan, pool, systems)
    _, actions = children_decision(plan, pool, systems, [budget_of(stale), *serving_plan(plan, pool, systems)])
    assert deleted(actions) == [stale["metadata"]["name"]]


def test_an_invalid_systems_budgets_are_kept_with_its_last_good_plan(plan):
    pool = applied_pool(plan)
    stale = stale_deployment(plan, pool, [system()])
    _, actions = children_decision(plan, pool, [system()], [budget_of(stale), *serving_plan(plan, pool, [system()])],
                                   invalid={"shop/traffic": (st.INVALID_SPEC, "bad")})
    assert deleted(actions) == []


# -- MIG -----------------------------------------------------------------------

def test_a_layout_counts_as_applied_only_on_success_with_the_planned_counts_advertised(plan):
    mig = desired_mig(pool_with(), outcome_for(plan, pool_with()).placement)["gpu-a"]
    assert layout_applied(pool_with({"gpu-a": (mig.config, "success", mig.expected)}), "gpu-a", mig)
    assert not layout_applied(pool_with({"gpu-a": (mig.config, "pending", mig.expected)}), "gpu-a", mig)
    assert not layout_applied(pool_with({"gpu-a": (mig.config, "success", {})}), "gpu-a", mig)
    assert not layout_applied(pool_with({"gpu-a": ("all-disabled", "success", mig.expected)}), "gpu-a", mig)


def test_a_node_is_relabelled_only_once_its_config_had_time_to_reach_mig_manager(plan):
    pool = pool_with()
    mig = outcome_for(plan, pool).mig
    written = {m.config: NOW for m in mig.values()}
    _, early, requeue = decide_relabels(pool, mig, written, {}, NOW + 10, propagation_s=90, poll_s=SETTINGS.mig_poll_s)
    assert early == [] and min(requeue) == pytest.approx(80)
    _, late, _ = decide_relabels(pool, mig, written, {}, NOW + 90, propagation_s=90, poll_s=SETTINGS.mig_poll_s)
    assert sorted(a.node for a in late) == ["gpu-a", "gpu-b"]


def test_the_relabel_sets_the_config_and_removes_the_state_label_in_one_patch(plan):
    pool = pool_with()
    mig = outcome_for(plan, pool).mig
    _, relabels, _ = decide_relabels(pool, mig, {}, {}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    (first, *_) = relabels
    assert isinstance(first, LabelNode)
    assert first.patch["metadata"]["labels"] == {"nvidia.com/mig.config": first.config,
                                                 "nvidia.com/mig.config.state": None}


def test_a_node_whose_gpus_serve_is_not_relabelled_and_reads_node_in_use(plan):
    pool = pool_with()
    outcome = outcome_for(plan, pool)
    outcome.mig, relabels, _ = decide_relabels(pool, outcome.mig, {}, {"gpu-a": ["other/pod"]}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    assert [a.node for a in relabels] == ["gpu-b"]
    assert outcome.mig["gpu-a"].blocked_by == ["other/pod"]
    phase, conditions, _ = system_status(system(), outcome)
    mig = next(c for c in conditions if c.type == st.MIG_LAYOUT_APPLIED)
    assert (mig.status, mig.reason) == (False, st.NODE_IN_USE)


def test_mig_manager_failed_reads_mig_layout_failed_and_the_system_is_not_ready(plan):
    bare = pool_with()
    mig = outcome_for(plan, bare).mig
    pool = pool_with({name: (m.config, "failed", {}) for name, m in mig.items()})
    outcome = outcome_for(plan, pool)
    outcome.mig, _, _ = decide_relabels(pool, outcome.mig, {}, {}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    _, conditions, _ = system_status(system(), outcome)
    by_type = {c.type: c for c in conditions}
    assert by_type[st.MIG_LAYOUT_APPLIED].reason == st.MIG_FAILED and not by_type[st.READY].status


def test_a_new_mig_config_is_written_once_with_the_time_it_was_written(plan):
    mig = outcome_for(plan, pool_with()).mig
    wanted = {m.config: m.entries for m in mig.values()}
    write, written = decide_mig_configs(wanted, "gpu-operator", "mig-parted", None, set(), NOW)
    assert write is not None and set(written) == set(wanted) and set(written.values()) == {NOW}
    stored = {"metadata": {"annotations": {k: v for k, v in write.stamps.items() if v is not None}}, "data": write.data}
    again, still = decide_mig_configs(wanted, "gpu-operator", "mig-parted", stored, set(), NOW + 500)
    assert again is None and still == written, "the stamp is when the config was first written"


def test_tessera_mig_configs_no_node_names_and_no_plan_wants_are_dropped(plan):
    mig = outcome_for(plan, pool_with()).mig
    wanted = {m.config: m.entries for m in mig.values()}
    write, _ = decide_mig_configs(wanted, "gpu-operator", "mig-parted", None, set(), NOW)
    stored = {"metadata": {"annotations": {k: v for k, v in write.stamps.items() if v is not None}}, "data": write.data}
    (kept_config, *_) = sorted(wanted)
    drop, _ = decide_mig_configs({}, "gpu-operator", "mig-parted", stored, {kept_config}, NOW)
    configs = set(yaml.safe_load(drop.data[builders.MIG_PARTED_KEY])["mig-configs"])
    assert kept_config in configs and not (set(wanted) - {kept_config}) & configs
    assert {k for k, v in drop.stamps.items() if v is None} == {f"written.tessera.ai/{c}" for c in wanted if c != kept_config}


# -- status and Events ---------------------------------------------------------

def status_of(sys_, verdict):
    phase, conditions, summary = verdict
    return st.build_status(sys_.ref.generation, phase, conditions, summary, sys_.status, "2026-01-01T00:00:00Z")


def test_an_unchanged_status_is_neither_written_nor_announced(plan):
    outcome = outcome_for(plan, applied_pool(plan), applied={"gpu-a", "gpu-b"})
    first = system()
    written = status_of(first, system_status(first, outcome))
    settled = system(status=written)
    assert decide_status(settled, status_of(settled, system_status(settled, outcome)), "later") == []


def test_a_changed_decision_is_written_with_one_event_per_changed_condition():
    fresh = system()
    actions = decide_status(fresh, status_of(fresh, no_pool_status(fresh, [])), "now")
    assert isinstance(actions[0], PatchStatus)
    announced = [a.body["message"].split(":")[0] for a in actions if isinstance(a, PostEvent)]
    assert announced and len(announced) == len(set(announced)), "one Event per condition that changed"


def test_a_message_only_change_of_a_condition_other_than_planned_is_written_without_an_event(plan):
    fresh = system()
    before = status_of(fresh, no_pool_status(fresh, []))
    later = system(status=before)
    verdict = no_pool_status(later, [])
    changed = [st.Condition(c.type, c.status, c.reason, c.message + (" (again)" if c.type == st.READY else ""))
               for c in verdict[1]]
    actions = decide_status(later, status_of(later, (verdict[0], changed, None)), "now")
    assert [type(a) for a in actions] == [PatchStatus]


def test_a_system_in_no_pool_is_pending_with_reason_no_gpu_pool():
    phase, conditions, _ = no_pool_status(system(), [])
    assert phase == st.PHASE_PENDING and {c.reason for c in conditions if c.type == st.READY} == {st.NO_GPU_POOL}


def test_a_spec_the_planner_cannot_use_reads_invalid_with_reason_invalid_spec(plan):
    broken = system(edges=[{"source": "object-detection", "target": "object-detection"}])
    phase, conditions, _ = system_status(broken, outcome_for(plan, pool_with()))
    invalid = next(c for c in conditions if c.type == st.INVALID)
    assert phase == st.PHASE_INVALID and invalid.status and invalid.reason == st.INVALID_SPEC
    assert "edges[0]" in invalid.message


def test_an_invalid_system_whose_last_good_plan_runs_reads_planned_last_good_plan_kept():
    _, conditions, _ = invalid_status(system(), st.SLO_UNREACHABLE, "no choice meets the SLOs", kept=True)
    planned = next(c for c in conditions if c.type == st.PLANNED)
    assert (planned.status, planned.reason) == (True, st.LAST_GOOD_PLAN)


def test_a_failed_solve_before_any_plan_reads_solve_failed(plan):
    outcome = PoolOutcome(solve_error="time limit without a plan")
    phase, conditions, _ = system_status(system(), outcome)
    planned = next(c for c in conditions if c.type == st.PLANNED)
    assert phase == st.PHASE_PENDING and (planned.status, planned.reason) == (False, st.SOLVE_FAILED)


def test_a_failed_re_plan_keeps_the_last_plan_and_reads_last_good_plan_kept(plan):
    outcome = outcome_for(plan, applied_pool(plan), applied={"gpu-a", "gpu-b"}, solve_error="planner failed")
    _, conditions, _ = system_status(system(), outcome)
    planned = next(c for c in conditions if c.type == st.PLANNED)
    assert (planned.status, planned.reason) == (True, st.LAST_GOOD_PLAN)


def test_a_pool_too_small_reads_degraded_insufficient_capacity_with_the_served_fraction(plan):
    half = plan.model_copy(update={"systems": [plan.systems[0].model_copy(update={"served_rps": 25})]})
    _, conditions, _ = system_status(system(), outcome_for(half, applied_pool(plan), applied={"gpu-a", "gpu-b"}))
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert degraded.status and degraded.reason == st.INSUFFICIENT_CAPACITY and "50%" in degraded.message


def test_a_server_that_fails_after_ready_reads_servers_unavailable(plan):
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    planned, outcome.deployments = planned_children(pool, [system()], outcome, SETTINGS)
    was_ready = {"conditions": [{"type": st.READY, "status": "True"}]}
    _, conditions, _ = system_status(system(status=was_ready), outcome)
    ready = next(c for c in conditions if c.type == st.READY)
    assert (ready.status, ready.reason) == (False, st.SERVERS_UNAVAILABLE)


def test_the_gpus_column_counts_the_gpus_holding_an_available_server_not_the_planned_ones(plan):
    """Planned on two GPUs (gpu-a's GPU 3 for detection, gpu-b's GPU 0 for classification); only detection's
    Deployment has an available pod: GPUS is 1, while Planned still names the plan's 2."""
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"}, gpus_of={"shop/traffic": placed_gpus(plan)})
    planned, outcome.deployments = planned_children(pool, [system()], outcome, SETTINGS)
    by_task = {body["metadata"]["labels"][naming.TASK_LABEL]: body for (kind, _, _), (body, _) in planned.items()
               if kind == "Deployment"}
    detection, classification = by_task["object-detection"], by_task["car-classification"]
    outcome.live = live_children([live(detection, availableReplicas=2), live(classification, availableReplicas=0)],
                                 [system()])
    _, conditions, summary = system_status(system(), outcome)
    assert summary["gpus"] == 1
    assert "on 2 GPU(s)" in next(c for c in conditions if c.type == st.PLANNED).message
    outcome.live = {}
    assert system_status(system(), outcome)[2]["gpus"] == 0


def test_the_nodes_left_by_a_system_are_those_of_the_plan_in_force_no_longer_in_the_pool(plan):
    """The plan puts detection on gpu-a and classification on gpu-b; gpu-b left the pool."""
    placed = placed_gpus(plan)
    assert nodes_left_by_system(placed, {"gpu-a"}, {"shop/traffic"}) == {"shop/traffic": ["gpu-b"]}
    assert nodes_left_by_system(placed, {"gpu-a", "gpu-b"}, {"shop/traffic"}) == {}
    assert nodes_left_by_system(placed, {"gpu-a"}, {"shop/other"}) == {}


def test_a_system_whose_plan_in_force_puts_servers_on_a_node_that_left_the_pool_is_not_ready_while_it_re_plans(plan):
    """Every server available, as the stored plan stood; but gpu-b left the pool and the re-plan runs off the
    reconcile: Ready=False, Planning, naming the node, never Ready on servers the cluster no longer has."""
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    planned, outcome.deployments = planned_children(pool, [system()], outcome, SETTINGS)
    outcome.live = live_children([available(body) for (kind, _, _), (body, _) in planned.items()
                                  if kind == "Deployment"], [system()])
    assert system_status(system(), outcome)[0] == st.PHASE_READY
    outcome.left_nodes = {"shop/traffic": ["gpu-b"]}
    phase, conditions, _ = system_status(system(), outcome)
    ready = next(c for c in conditions if c.type == st.READY)
    assert phase == st.PHASE_DEPLOYING and (ready.status, ready.reason) == (False, st.PLANNING)
    assert "gpu-b, no longer in the pool" in ready.message


# -- the pool's stored plan ------------------------------------------------------

def test_deleting_a_system_makes_its_pool_plan_again():
    a = system()
    hashes = {"shop/traffic": "h-a", "shop/deleted": "h-b"}
    state = {"plan": "{...}", "pool": "pool-1", "systems": json.dumps(hashes)}
    assert not stored_plan_stands(state, "pool-1", [a], {"shop/traffic": "h-a"}, present={"shop/traffic"})


def test_a_system_that_turned_unreadable_keeps_the_others_stored_plan():
    a = system()
    hashes = {"shop/traffic": "h-a", "shop/broken": "h-b"}  # shop/broken still exists, with a spec that fails to parse
    state = {"plan": "{...}", "pool": "pool-1", "systems": json.dumps(hashes)}
    assert stored_plan_stands(state, "pool-1", [a], {"shop/traffic": "h-a"}, present={"shop/traffic", "shop/broken"})


def test_builders_relabel_patch_is_the_one_the_relabel_decision_sends(plan):
    pool = pool_with()
    mig = outcome_for(plan, pool).mig
    _, relabels, _ = decide_relabels(pool, mig, {}, {}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    assert all(a.patch == builders.node_relabel_patch(a.config) for a in relabels)


def test_every_test_the_invariants_table_of_docs_operator_md_names_exists():
    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "operator.md").read_text().split("## Invariants of a reconcile")[1].split("\n## ")[0]
    named = re.findall(r"\| (?:t/)?([\w/]*test_\w+\.py)::(test_\w+) \|", section)
    files = {Path(f).name: f for f, _ in named if "/" in f}
    missing = [(f, t) for f, t in named if f"def {t}(" not in (root / "tests" / files.get(f, f)).read_text()]
    assert len(named) >= 25 and missing == []
