"""Status: conditions keep their transition times, Events only for decisions, nothing new at idle."""

from __future__ import annotations

from tessera.operator.api import status as st
from tessera.operator.api.v1alpha1 import SystemPlanSummary
from tessera.planner.change_cost import ChangeSummary


def _conditions(ready: bool, reason: str) -> list[st.Condition]:
    return [st.Condition(st.READY, ready, reason, "m"), st.Condition(st.PLANNED, True, st.PLAN_FOUND, "2 slices")]


def test_a_condition_keeps_its_transition_time_while_its_status_stays():
    first = st.build_status(1, st.PHASE_DEPLOYING, _conditions(False, st.SERVERS_STARTING), None, {}, "t1")
    second = st.build_status(1, st.PHASE_DEPLOYING, _conditions(False, st.MIG_PENDING), None, first, "t2")
    third = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), None, second, "t3")
    assert second["conditions"][0]["lastTransitionTime"] == "t1"
    assert third["conditions"][0]["lastTransitionTime"] == "t3"
    assert third["conditions"][1]["lastTransitionTime"] == "t1"


def test_an_unchanged_status_is_not_a_change():
    first = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), {"gpus": 1}, {}, "t1")
    again = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), {"gpus": 1}, first, "t2")
    assert not st.status_changed(first, again)
    assert st.events_for(first, again) == []


def test_conditions_come_in_a_fixed_order_with_observed_generation():
    built = st.build_status(4, st.PHASE_READY, list(reversed(_conditions(True, st.SERVERS_READY))), None, {}, "t")
    assert [c["type"] for c in built["conditions"]] == [st.READY, st.PLANNED]
    assert built["observedGeneration"] == 4 and all(c["observedGeneration"] == 4 for c in built["conditions"])


def test_events_report_changed_decisions_with_warnings_for_problems():
    before = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), None, {}, "t1")
    after = st.build_status(1, st.PHASE_DEPLOYING, _conditions(False, st.SERVERS_UNAVAILABLE), None, before, "t2")
    assert st.events_for(before, after) == [st.EventSpec("Warning", st.SERVERS_UNAVAILABLE, "Ready: m")]


def test_a_new_plan_is_an_event_even_when_planned_stays_true():
    before = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), None, {}, "t1")
    replanned = [st.Condition(st.READY, True, st.SERVERS_READY, "m"),
                 st.Condition(st.PLANNED, True, st.PLAN_FOUND, "3 slices")]
    after = st.build_status(2, st.PHASE_READY, replanned, None, before, "t2")
    assert [e.reason for e in st.events_for(before, after)] == [st.PLAN_FOUND]


def test_the_last_plan_summary_stays_when_no_new_one_is_given():
    before = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), {"gpus": 2}, {}, "t1")
    invalid = st.build_status(2, st.PHASE_INVALID, [st.Condition(st.INVALID, True, st.INVALID_SPEC, "x")], None,
                              before, "t2")
    assert invalid["plan"] == {"gpus": 2}


def test_an_event_names_the_system_it_is_about(system_ref):
    body = st.event_body(system_ref, st.EventSpec("Normal", st.PLAN_FOUND, "Planned: 2 slices"), "t")
    assert body["involvedObject"]["uid"] == system_ref.uid
    assert body["involvedObject"]["kind"] == "CompoundInferenceSystem"
    assert body["metadata"]["namespace"] == "shop"


def test_status_is_changed_only_where_the_merge_patch_would_change_what_is_stored():
    stored = {"phase": st.PHASE_READY, "plan": {"gpus": 1, "slices": 3}, "foreign": {"kept": True}}
    assert not st.status_changed(stored, {"phase": st.PHASE_READY, "plan": {"gpus": 1}})
    assert st.status_changed(stored, {"phase": st.PHASE_READY, "plan": {"gpus": 2}})
    assert not st.status_changed(stored, {"frontend": None})  # removing what is not there changes nothing


def test_a_removed_demand_source_removes_status_demand_once_then_the_status_is_unchanged():
    before = st.build_status(1, st.PHASE_READY, _conditions(True, st.SERVERS_READY), None, {}, "t1",
                             demand={"source": "Prometheus", "observedRequestsPerSecond": 5})
    after = st.build_status(2, st.PHASE_READY, _conditions(True, st.SERVERS_READY), None, before, "t2")
    assert after["demand"] is None and st.status_changed(before, after)
    stored = st.merge_patched(before, after)
    assert "demand" not in stored
    again = st.build_status(2, st.PHASE_READY, _conditions(True, st.SERVERS_READY), None, stored, "t3")
    assert not st.status_changed(stored, again)


def test_the_plan_summary_says_what_the_plan_changed_and_why_with_its_node_names_bounded(plan):
    changed = [f"gpu-{i}" for i in range(12)]
    why = ChangeSummary(nodes_changed=changed, nodes_kept=["gpu-a"], price=3.0, slices_saved=9, forgone_slices=2,
                        forgone_nodes=1)
    summary = st.plan_summary(plan.model_copy(update={"changes": why}), "shop/traffic", gpus=2, slices=13,
                              pool_slices=14)
    assert summary["changes"] == {"summary": why.summary, "nodesChanged": 12, "nodesKept": 1,
                                  "nodesChangedExamples": changed[:8]}
    assert "changes 12 nodes: saves 9 slices" in summary["changes"]["summary"]
    SystemPlanSummary.model_validate(summary)  # within the CRD's bounds
    assert "changes" not in st.plan_summary(plan, "shop/traffic", gpus=2, slices=13, pool_slices=14)
