"""A system's latency-SLO violation rate through its frontend: the query, what status shows, LatencySLOMet."""

import shutil
import subprocess

import pytest
import yaml

from tessera.operator.demand import slo
from tessera.operator.demand.prometheus import Reading, unknown
from tessera.operator.demand.promql import confine
from tessera.operator.demand.templates import render

TARGET = 1.0


def test_a_first_reading_is_shown_as_a_percentage():
    assert slo.shown_percent(None, Reading(0.004), TARGET) == 0.4


def test_a_reading_within_the_band_of_what_status_shows_changes_nothing():
    assert slo.shown_percent(0.4, Reading(0.0062), TARGET) == 0.4


def test_a_reading_that_moved_past_the_band_is_shown():
    assert slo.shown_percent(0.4, Reading(0.0066), TARGET) == 0.66


def test_a_reading_across_the_target_is_shown_however_small_the_step():
    assert slo.shown_percent(0.95, Reading(0.0101), TARGET) == 1.01
    assert slo.shown_percent(1.05, Reading(0.0099), TARGET) == 0.99


def test_an_unknown_reading_keeps_what_status_shows():
    assert slo.shown_percent(0.4, unknown("NotANumber", "no request in the window"), TARGET) == 0.4


def test_violations_at_most_the_target_meet_the_slo():
    met = slo.condition(1.0, TARGET, None)
    assert met is not None and met.status and met.reason == slo.WITHIN_TARGET
    assert "1% of requests late, dropped or failed" in met.message and "at most 1%" in met.message


def test_violations_above_the_target_do_not():
    met = slo.condition(1.2, TARGET, None)
    assert met is not None and not met.status and met.reason == slo.ABOVE_TARGET


def test_before_any_request_was_read_there_is_no_condition():
    assert slo.condition(None, TARGET, None) is None


def test_without_a_reading_the_condition_status_gave_stays():
    before = {"type": slo.LATENCY_SLO_MET, "status": "False", "reason": slo.ABOVE_TARGET, "message": "3% of requests"}
    kept = slo.condition(None, TARGET, before)
    assert kept is not None and (kept.status, kept.reason, kept.message) == (False, slo.ABOVE_TARGET, "3% of requests")


@pytest.mark.e2e  # promtool comes with Debian's prometheus, which tests/cluster/setup.sh installs
def test_the_violation_query_counts_late_dropped_and_failed_of_the_system_in_its_namespace_over_valid_requests(
        tmp_path):
    """Prometheus' own evaluator (promtool) on synthetic counters: per minute 96 ok, 2 late, 1 dropped, 1 failed
    and 50 invalid for the system, and 100 late for another system and for the same name in another namespace."""
    # rounded: Prometheus sums series in map order, so the last bit of the sum varies from run to run
    query = f'round({confine(render(slo.VIOLATIONS_QUERY, "traffic", "object-detection"), "shop")}, 0.0001)'
    series = [("traffic", "shop", "ok", 96), ("traffic", "shop", "late", 2), ("traffic", "shop", "dropped", 1),
              ("traffic", "shop", "failed", 1), ("traffic", "shop", "invalid", 50), ("other", "shop", "late", 100),
              ("traffic", "elsewhere", "late", 100)]
    only_ok = confine(render(slo.VIOLATIONS_QUERY, "quiet", "object-detection"), "shop")
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            *[{"series": f'tessera_frontend_requests_total{{system="{s}",namespace="{n}",outcome="{o}"}}',
               "values": f"0+{per_minute}x10"} for s, n, o, per_minute in series],
            {"series": 'tessera_frontend_requests_total{system="quiet",namespace="shop",outcome="ok"}',
             "values": "0+60x10"}],
        "promql_expr_test": [
            {"expr": query, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 0.04}]},
            {"expr": only_ok, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 0}]},
        ]}]}
    path = tmp_path / "slo_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus (tests/cluster/setup.sh installs it)"
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
