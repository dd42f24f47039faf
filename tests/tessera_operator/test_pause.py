"""Pause and the node-change rule (operator/reconcile/pause.py, node_changes.py), without a cluster.

Each test is one rule of docs/operator.md's "Pause, maintenance window and approval".
A pause freezes what runs (no write to a paused system's children, no relabel of
its nodes, no MIG config for a paused pool) while the status says what waits.
"""

from __future__ import annotations

import calendar
import json

import pytest

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.reconcile.actions import ApplyChild, DeleteChild
from tessera.operator.api.systems import read_system
from tessera.operator.reconcile.decide import (decide_mig_configs, decide_relabels, live_children, spec_digest,
                                               system_status)
from tessera.operator.reconcile.node_changes import MaintenanceWindow, NodeHold
from tessera.operator.reconcile.pause import (held_mig_configs, held_nodes, paused_status, paused_systems,
                                              pause_message, pool_pause, waiting_changes, without_paused)
from tessera.operator.settings import OperatorSettings

from .conftest import gpu_node, pool_of
from .test_decide import (NOW, SETTINGS, SYSTEM, applied_pool, available, children_decision, live, outcome_for,
                          pool_with, stale_deployment, system)

KEY = "shop/traffic"
POOL_CONFIGMAP = "tessera-system/tessera-pool-h100-80gb"
PAUSED = {naming.PAUSED: "true"}


def at(hour: int, minute: int = 0) -> float:
    """Seconds since the epoch at this UTC time of 2026-12-03."""
    return float(calendar.timegm((2026, 12, 3, hour, minute, 0)))


# -- who is paused --------------------------------------------------------------

def test_a_system_is_paused_by_its_annotation_true_and_by_nothing_else():
    assert paused_systems([system()], None) == {}
    assert paused_systems([with_annotations(PAUSED)], None) == {KEY: f"paused ({naming.PAUSED} on the system)"}
    assert paused_systems([with_annotations({naming.PAUSED: "false"})], None) == {}
    assert pool_pause({naming.PAUSED: "false"}, POOL_CONFIGMAP) is None and pool_pause({}, POOL_CONFIGMAP) is None


def test_a_paused_pool_pauses_each_of_its_readable_systems_and_not_one_whose_spec_is_unreadable():
    broken = with_annotations({}, name="broken", edges=[{"source": "object-detection", "target": "object-detection"}])
    why = pool_pause(PAUSED, POOL_CONFIGMAP)
    assert why == f"the pool is paused ({naming.PAUSED} on ConfigMap {POOL_CONFIGMAP})"
    assert paused_systems([system(), broken], why) == {KEY: why}


def with_annotations(annotations: dict, name: str = "traffic", **spec):
    return read_system({**SYSTEM, "metadata": {**SYSTEM["metadata"], "name": name, "annotations": annotations},
                        "spec": {**SYSTEM["spec"], **spec}})


# -- nothing that runs changes --------------------------------------------------

def test_a_paused_systems_children_are_neither_applied_changed_nor_deleted(plan):
    pool, systems = applied_pool(plan), [system()]
    stale = stale_deployment(plan, pool, systems)
    planned, _ = children_decision(plan, pool, systems, [])
    # its Services and budgets differ from the plan; its Deployments serve (so the one no plan wants may go)
    changed = [available(b) if b["kind"] == "Deployment" else
               live({**b, "metadata": {**b["metadata"], "annotations": {naming.APPLIED_HASH: "old"}}})
               for b, _ in planned.values()]
    _, actions = children_decision(plan, pool, systems, [*changed, stale])
    assert {type(a) for a in actions} == {ApplyChild, DeleteChild}, "unpaused, the same cluster gets both writes"
    assert without_paused(actions, {KEY: "paused"}) == []
    assert without_paused(actions, {"shop/other": "paused"}) == actions


def test_the_nodes_a_paused_systems_servers_run_on_are_not_relabelled(plan):
    pool = pool_with()
    outcome = outcome_for(plan, pool)
    held = held_nodes({KEY: "paused"}, outcome, ["gpu-a", "gpu-b"], pool_paused=None)
    assert held == {"gpu-a": f"{KEY} is paused", "gpu-b": f"{KEY} is paused"}
    states, relabels, _ = decide_relabels(pool, outcome.mig, {}, {}, NOW, propagation_s=0,
                                          poll_s=SETTINGS.mig_poll_s, hold=NodeHold.of(held, None))
    assert relabels == [] and states["gpu-a"].waiting == f"{KEY} is paused"
    _, unheld, _ = decide_relabels(pool, outcome.mig, {}, {}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    assert sorted(a.node for a in unheld) == ["gpu-a", "gpu-b"], "without the pause both nodes are relabelled"


def test_every_node_of_a_paused_pool_keeps_its_layout_even_one_no_paused_system_runs_on(plan):
    outcome = outcome_for(plan, pool_with())
    why = "the pool is paused"
    assert held_nodes({}, outcome, ["gpu-a", "gpu-b", "gpu-c"], pool_paused=why) == {
        "gpu-a": why, "gpu-b": why, "gpu-c": why}, "also with no readable system in it"


def test_a_paused_pool_adds_no_mig_config_and_drops_none_its_plan_wants(plan):
    mig = outcome_for(plan, pool_with()).mig
    first, second = sorted(m.config for m in mig.values())
    held = held_mig_configs(mig, known={first})
    assert set(held) == {first}
    stored = {"metadata": {"annotations": {naming.MIG_CONFIG_WRITTEN_PREFIX + first: f"{NOW:.0f}"}},
              "data": {"config.yaml": decide_mig_configs({first: held[first]}, "gpu-operator", "mig-parted", None,
                                                         set(), NOW)[0].data["config.yaml"]}}
    write, _ = decide_mig_configs(held, "gpu-operator", "mig-parted", stored, set(), NOW + 10)
    assert write is None, "the config already there stays, the missing one is not written"


# -- the status says what waits -------------------------------------------------

def test_a_paused_systems_status_names_the_demand_change_that_waits(plan):
    pool = applied_pool(plan)
    before = paused_one(plan, pool, demand=50)
    edited = system(status=before.status, demandRequestsPerSecond=500)
    state = {"systems": json.dumps({KEY: spec_digest(before)})}
    message = pause_message("paused (tessera.ai/paused on the system)",
                            waiting_changes(edited, spec_digest(edited), state, pool_changed=False))
    assert message == "paused (tessera.ai/paused on the system): a re-plan waits: demand 50 -> 500"
    phase, conditions, summary = paused_status(edited, outcome_for(plan, pool), message)
    by_type = {c.type: c for c in conditions}
    assert (by_type[st.PROGRESSING].status, by_type[st.PROGRESSING].reason) == (False, st.PAUSED)
    assert by_type[st.PROGRESSING].message == message
    assert summary is None, "the summary of the plan that runs stays"


def test_a_paused_system_whose_spec_is_unchanged_says_nothing_waits_and_one_never_planned_waits_for_its_first(plan):
    current = system(status={"plan": {"demandRequestsPerSecond": 50}})
    state = {"paused": json.dumps({KEY: spec_digest(current)})}
    assert waiting_changes(current, spec_digest(current), state, pool_changed=False) == []
    assert "nothing waits" in pause_message("paused", [])
    assert waiting_changes(current, spec_digest(current), {}, pool_changed=False) == ["its first plan"]


def test_a_paused_pool_names_a_change_of_its_nodes(plan):
    current = system()
    state = {"systems": json.dumps({KEY: spec_digest(current)})}
    assert waiting_changes(current, spec_digest(current), state, pool_changed=True) == [
        "the pool changed (its nodes, the planner's options or measured profiles)"]


def test_a_paused_system_reads_ready_from_its_live_servers_and_keeps_its_other_conditions(plan):
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool)
    planned, _ = children_decision(plan, pool, [system()], [])
    deployments = [b for (kind, _, _), (b, _) in planned.items() if kind == "Deployment"]
    running = [live(b, availableReplicas=b["spec"]["replicas"], observedGeneration=1) for b in deployments]
    previous = {"phase": st.PHASE_READY, "conditions": [
        {"type": st.PLANNED, "status": "True", "reason": st.PLAN_FOUND, "message": "3 compute slices"},
        {"type": st.METRICS_AVAILABLE, "status": "True", "reason": "DemandRead", "message": "demand 50"}]}
    paused = system(status=previous)
    outcome.live = live_children(running, [paused])
    phase, conditions, _ = paused_status(paused, outcome, "paused")
    by_type = {c.type: c for c in conditions}
    assert phase == st.PHASE_READY and by_type[st.READY].status
    assert by_type[st.PLANNED].message == "3 compute slices"
    assert st.METRICS_AVAILABLE not in by_type, "the demand module writes MetricsAvailable afresh"
    outcome.live = live_children([live(b, availableReplicas=0) for b in deployments], [paused])
    phase, conditions, _ = paused_status(paused, outcome, "paused")
    assert phase == st.PHASE_DEPLOYING and not {c.type: c for c in conditions}[st.READY].status


def paused_one(plan, pool, demand: float):
    return system(status={"plan": {"demandRequestsPerSecond": demand}}, demandRequestsPerSecond=demand)


# -- the maintenance window and the approval -----------------------------------

RULE = NodeHold.of({}, "02:00-04:00")
NODE = pool_of(gpu_node("gpu-a")).node("gpu-a")
CONFIG = "tessera-v1-0123456789"


def test_a_serving_node_changes_only_inside_the_maintenance_window():
    assert RULE.waits(NODE, CONFIG, serving=True, now=at(2, 30)) is None
    held = RULE.waits(NODE, CONFIG, serving=True, now=at(12, 0))
    assert held is not None and "02:00-04:00 UTC" in held and f"{naming.APPROVE_MIG_CONFIG}={CONFIG}" in held
    assert RULE.waits(NODE, CONFIG, serving=True, now=at(4, 0)) is not None, "the window's end is outside it"


def test_a_window_across_midnight_holds_from_its_start_to_its_end_the_next_day():
    window = MaintenanceWindow.parse("22:30-01:15")
    assert window.contains(at(23, 0)) and window.contains(at(1, 0))
    assert not window.contains(at(1, 15)) and not window.contains(at(12, 0))


def test_an_approval_naming_the_waiting_config_lets_a_serving_node_change_and_one_naming_another_does_not():
    approved = pool_of(gpu_node("gpu-a") | {"metadata": {**gpu_node("gpu-a")["metadata"],
                                                         "annotations": {naming.APPROVE_MIG_CONFIG: CONFIG}}})
    node = approved.node("gpu-a")
    assert RULE.waits(node, CONFIG, serving=True, now=at(12, 0)) is None
    assert RULE.waits(node, "tessera-v1-other", serving=True, now=at(12, 0)) is not None


def test_never_holds_a_serving_node_until_an_approval():
    rule = NodeHold.of({}, "never")
    assert rule.waits(NODE, CONFIG, serving=True, now=at(3, 0)) is not None


def test_a_node_that_serves_nothing_changes_at_any_time_and_without_the_setting_no_rule_holds_a_serving_one():
    assert RULE.waits(NODE, CONFIG, serving=False, now=at(12, 0)) is None
    assert NodeHold.of({}, None).waits(NODE, CONFIG, serving=True, now=at(12, 0)) is None


def test_the_relabel_path_consults_the_rule_and_the_status_names_the_waiting_change(plan):
    pool = pool_with()
    outcome = outcome_for(plan, pool)
    outcome.mig, relabels, _ = decide_relabels(pool, outcome.mig, {}, {"gpu-a": ["shop/server"]}, at(12, 0),
                                               propagation_s=0, poll_s=SETTINGS.mig_poll_s, hold=RULE)
    assert [a.node for a in relabels] == ["gpu-b"], "the node that serves nothing is relabelled outside the window"
    assert "02:00-04:00 UTC" in (outcome.mig["gpu-a"].waiting or "")
    _, conditions, _ = system_status(system(), outcome)
    mig = next(c for c in conditions if c.type == st.MIG_LAYOUT_APPLIED)
    assert (mig.status, mig.reason) == (False, st.NODE_CHANGE_HELD) and "gpu-a" in mig.message


def test_the_setting_takes_a_daily_range_or_never_and_refuses_anything_else():
    assert OperatorSettings(maintenance_window="02:00-04:00").maintenance_window == "02:00-04:00"
    assert OperatorSettings(maintenance_window="never").maintenance_window == "never"
    for bad in ("2:00-4:00", "02:00", "25:00-01:00", "0 2 * * *"):
        with pytest.raises(ValueError):
            OperatorSettings(maintenance_window=bad)
