"""The reconciler's demand hook: what the planner is handed, what status says (operator/demand/planning.py).

Prometheus is a local HTTP server answering the value a test sets (conftest.py).
"""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from tessera.operator.api import status as st
from tessera.operator.demand.planning import DemandPlanner
from tessera.operator.demand.settings import DemandSettings
from tessera.operator.api.systems import read_system

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-model.yaml"
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


@pytest.fixture
def prometheus(prometheus_stub):
    prometheus_stub.values = ("500",)
    return prometheus_stub


def system(status=None, **source):
    document = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["demandSource"] = {"query": "sum(rate(requests_total[1m]))", **source}
    document["metadata"].update(namespace="tenant-a", uid="u1", generation=1)
    document["status"] = status or {}
    return read_system(document)


def planner(url, clock, **settings):
    return DemandPlanner(DemandSettings(prometheus_url=url, stabilization_s=60, **settings), clock=clock)


def test_the_planner_gets_the_measured_demand_and_the_query_is_confined(prometheus):
    (planned,) = planner(prometheus.url, lambda: T0).apply([system()], [])
    assert planned.spec.demand_rps == 500
    assert "namespace%3D%22tenant-a%22" in prometheus.requests[0]["body"]


def test_dry_run_reports_the_recommendation_and_plans_for_the_spec(prometheus):
    hook = planner(prometheus.url, lambda: T0)
    original = system(dryRun=True)
    (planned,) = hook.apply([original], [])
    assert planned.spec.demand_rps == 200
    status = hook.status_of(original, [])
    assert status["dryRun"] and status["recommendedRequestsPerSecond"] == 500
    assert status["plannedRequestsPerSecond"] == 200


def test_unknown_is_not_zero_and_the_condition_says_why(prometheus):
    prometheus.values = ()
    hook = planner(prometheus.url, lambda: T0)
    original = system()
    (planned,) = hook.apply([original], [])
    assert planned.spec.demand_rps == 200
    _, conditions, _ = hook.decorate(original, "Ready", [], None)
    (metrics,) = conditions
    assert (metrics.type, metrics.status, metrics.reason) == ("MetricsAvailable", False, "NoData")


def test_the_windows_survive_a_restart_through_status(prometheus):
    url = prometheus.url
    now = [T0]
    hook = planner(url, lambda: now[0])
    first = system()
    hook.apply([first], [])  # scales up to 500
    prometheus.values = ("100",)
    status = {"demand": hook.status_of(first, [])}
    for minute in range(1, 4):  # the operator restarts each minute: a new hook, the status it wrote
        now[0] = T0 + timedelta(seconds=30 * minute)
        restarted = planner(url, lambda: now[0])
        current = system(status=status)
        (planned,) = restarted.apply([current], [])
        status = {"demand": restarted.status_of(current, [])}
        if minute < 3:
            assert planned.spec.demand_rps == 500, minute  # inside the 60 s window
    assert planned.spec.demand_rps == 375  # one bounded step once the window passed


def blocked_layout():
    return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.NODE_IN_USE, "node gpu-0 serves: its layout stays")


def test_a_rise_that_needs_a_new_layout_on_nodes_that_serve_is_degraded_capacity_change_deferred(prometheus):
    hook = planner(prometheus.url, lambda: T0)
    original = system()
    hook.apply([original], [])  # the spec's 200 req/s, measured 500: a scale-up
    phase, conditions, _ = hook.decorate(original, "Ready", [blocked_layout()], None)
    degraded = [(c.status, c.reason) for c in conditions if c.type == "Degraded"]
    assert phase == "Degraded" and degraded == [(True, "CapacityChangeDeferred")]


def test_a_layout_kept_without_a_rise_in_demand_is_not_degraded(prometheus):
    prometheus.values = ("200",)
    hook = planner(prometheus.url, lambda: T0)
    original = system()
    hook.apply([original], [])
    phase, conditions, _ = hook.decorate(original, "Ready", [blocked_layout()], None)
    assert phase == "Ready" and not [c for c in conditions if c.type == "Degraded"]


def test_readings_that_jitter_within_the_plan_leave_the_status_and_its_conditions_as_they_were(prometheus):
    """Each poll reads another rate near the plan's 500: what a reconcile writes stays the same, so the
    status-changed rule (decide.decide_status) finds nothing to patch."""
    now = [T0]
    hook = planner(prometheus.url, lambda: now[0])
    status: dict = {}
    written = []
    for second, value in enumerate(("500", "503.17", "498.2", "501.9", "496.04")):
        prometheus.values = (value,)
        now[0] = T0 + timedelta(seconds=5 * second)
        current = system(status=status)
        hook.apply([current], [])
        _, conditions, _ = hook.decorate(current, "Ready", [], None)
        status = {"demand": hook.status_of(current, conditions)}
        written.append((status["demand"], [(c.type, c.reason, c.message) for c in conditions]))
    assert all(entry == written[1] for entry in written[1:]), written
    assert written[1][0]["observedRequestsPerSecond"] == 500


def test_a_reading_that_moved_beyond_the_tolerance_is_in_status_at_once(prometheus):
    hook = planner(prometheus.url, lambda: T0)
    first = system()
    hook.apply([first], [])
    status = {"demand": hook.status_of(first, [])}
    prometheus.values = ("560",)
    moved = system(status=status)
    hook.apply([moved], [])
    assert hook.status_of(moved, [])["observedRequestsPerSecond"] == 560


def served_through_its_frontend(status=None):
    document = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["frontend"] = {}
    document["metadata"].update(namespace="tenant-a", uid="u1", generation=1)
    document["status"] = status or {}
    return read_system(document)


def slo_condition(conditions):
    return next((c for c in conditions if c.type == "LatencySLOMet"), None)


VIOLATING = "late%7Cdropped%7Cfailed"  # the violation query's outcome matcher, URL-encoded


def test_a_system_served_through_its_frontend_shows_its_violation_rate_and_meets_its_slo_below_the_target(
        prometheus):
    prometheus.by_query = {VIOLATING: ("0.004",)}
    hook = planner(prometheus.url, lambda: T0)
    (read,) = hook.apply([served_through_its_frontend()], [])  # as the snapshot holds it: the default source
    _, conditions, _ = hook.decorate(read, "Ready", [], None)
    met = slo_condition(conditions)
    assert met is not None and met.status and met.reason == "ViolationsWithinTarget"
    assert hook.status_of(read, conditions)["violationPercent"] == 0.4
    assert "namespace%3D%22tenant-a%22" in [r["body"] for r in prometheus.requests if VIOLATING in r["body"]][0]


def test_violations_above_the_target_make_latency_slo_met_false(prometheus):
    prometheus.by_query = {VIOLATING: ("0.03",)}
    hook = planner(prometheus.url, lambda: T0, slo_violation_target_pct=2.0)
    (read,) = hook.apply([served_through_its_frontend()], [])  # as the snapshot holds it: the default source
    _, conditions, _ = hook.decorate(read, "Ready", [], None)
    met = slo_condition(conditions)
    assert met is not None and not met.status and met.reason == "ViolationsAboveTarget"
    assert "3% of requests" in met.message and "at most 2%" in met.message


def test_a_violation_rate_that_jitters_below_the_band_writes_the_same_status(prometheus):
    now = [T0]
    hook = planner(prometheus.url, lambda: now[0])
    status: dict = {}
    written = []
    for second, value in enumerate(("0.004", "0.0043", "0.0038", "0.0041")):
        prometheus.by_query = {VIOLATING: (value,)}
        now[0] = T0 + timedelta(seconds=5 * second)
        (current,) = hook.apply([served_through_its_frontend(status=status)], [])
        _, conditions, _ = hook.decorate(current, "Ready", [], None)
        status = {"demand": hook.status_of(current, conditions), "conditions": [
            c.as_dict(1, "2026-12-01T08:00:00Z") for c in conditions]}
        written.append((status["demand"]["violationPercent"], slo_condition(conditions)))
    assert all(entry == written[0] for entry in written), written


def test_a_system_without_a_frontend_has_no_slo_condition(prometheus):
    hook = planner(prometheus.url, lambda: T0)
    original = system()
    hook.apply([original], [])
    _, conditions, _ = hook.decorate(original, "Ready", [], None)
    assert slo_condition(conditions) is None and "violationPercent" not in hook.status_of(original, conditions)
