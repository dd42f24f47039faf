"""One simulated hour of the closed loop (issue 31): the operator's decisions with the serving simulation as the
cluster. single-model on one H100 node: 15 minutes at its spec's demand, then eight times that, which its
layout cannot serve, so the serving node must be re-partitioned (it has no other node to move to).
"""

import numpy as np
import pytest

from tessera.closed_loop import ClosedLoop, LoopResult
from tessera.operator.settings import OperatorSettings
from tessera.planner.simulation.workloads import RateTrace
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems
from tessera.shipped import example

RISE_S = 900.0
HOUR_S = 3600.0
OPTIONS = PlannerOptions.model_validate({**OperatorSettings().planner.model_dump(), "queueing": True,
                                         "routing": "per-request", "time_limit_s": 20})


def _single_model():
    return load_systems(example("single-model.yaml"))


def _loop(cache_dir) -> ClosedLoop:
    trace = RateTrace("step", np.concatenate([np.ones(int(RISE_S)), np.full(int(HOUR_S - RISE_S), 8.0)]))
    return ClosedLoop(_single_model(), "H100-80GB", 1, trace, OPTIONS, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("solves")


@pytest.fixture(scope="module")
def hour(cache) -> LoopResult:
    return _loop(cache).run()


def _bins(result: LoopResult, start_s: float, end_s: float) -> slice:
    return slice(int(start_s // result.bin_s), int(np.ceil(end_s / result.bin_s)))


def test_steady_demand_keeps_the_first_plan(hour):
    assert all(e.at_s > RISE_S for e in hour.events)


def test_a_demand_rise_re_plans_with_more_capacity(hour):
    before = np.array(hour.capacity_rps[0][_bins(hour, 0, RISE_S)])
    after = np.array(hour.capacity_rps[0][-10:])
    demand_after = np.array(hour.demand_rps[0][-10:])
    assert any(e.what == "re-plan" for e in hour.events)
    assert after.min() > 4 * before.max()
    assert (after > demand_after).all()


def test_the_clock_charges_each_re_plan_its_solve_time_before_its_plan_serves(hour):
    replans = [e for e in hour.events if e.what == "re-plan"]
    change = next(e for e in hour.events if e.what == "re-partition")
    last = max((e for e in replans if e.at_s <= change.at_s), key=lambda e: e.at_s)
    assert last.charged_s > 0
    assert change.at_s == pytest.approx(last.at_s + last.charged_s)


def test_re_partitioning_the_serving_node_loses_its_capacity_for_the_mig_manager_duration(hour):
    change = next(e for e in hour.events if e.what == "re-partition")
    assert hour.repartitions == 1
    assert hour.lost_slice_s == pytest.approx(OPTIONS.reconfigure_s * int(change.detail.split(": ")[1].split()[0]))
    during = _bins(hour, change.at_s + hour.bin_s, change.at_s + OPTIONS.reconfigure_s - hour.bin_s)
    assert max(hour.allocated_slices[during]) == 0
    assert max(hour.capacity_rps[0][during]) == 0


def test_violations_are_counted_where_capacity_falls_short_and_not_where_it_suffices(hour):
    totals = hour.totals()
    change = next(e for e in hour.events if e.what == "re-partition")
    during = _bins(hour, change.at_s + hour.bin_s, change.at_s + OPTIONS.reconfigure_s - hour.bin_s)
    assert min(hour.violation_pct[0][during]) == 100
    assert totals.unserved > 0 and totals.late >= totals.unserved
    assert max(hour.violation_pct[0][_bins(hour, 0, RISE_S)]) < 1
    assert max(hour.violation_pct[0][-10:]) < 1


def test_early_dropping_turns_late_requests_into_drops(hour):
    totals = hour.totals()
    assert totals.dropped > 0
    assert totals.late_with_dropping < totals.late


def test_every_result_names_the_latency_model_of_its_plans(hour):
    assert hour.latency_model.startswith("queueing wait") and "per-request" in hour.latency_model


def test_an_identical_run_answers_every_solve_from_the_cache(hour, cache):
    again = _loop(cache).run()
    assert again.solves == 0 and again.cache_hits == hour.solves
    assert again.totals() == hour.totals()
