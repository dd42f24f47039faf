"""Early dropping's one rule (tessera.planner.dropping), as the frontend and `tessera simulate` both apply it."""

import numpy as np

from tessera.planner.dropping import doomed, least_time_after, needed_s
from tessera.planner.simulation import engine
from tessera.planner.simulation.entities import single_server
from tessera.planner.simulation.policies import Policies
from tessera.planner.simulation.workloads import constant


def test_a_request_is_doomed_when_its_budget_is_below_what_the_path_ahead_needs_plus_the_margin():
    assert doomed(0.009, 0.010)
    assert not doomed(0.010, 0.010)
    assert doomed(0.012, 0.010, margin_s=0.005)
    assert list(doomed(np.array([0.005, 0.02]), np.array([0.01, 0.01]))) == [True, False]


def test_the_least_time_after_a_stage_follows_its_slowest_child_path_with_a_hop_per_stage():
    # a -> b -> d and a -> c: b+d is the slower branch
    after = least_time_after(["a", "b", "c", "d"], {"a": ["b", "c"], "b": ["d"]},
                             {"a": 0.010, "b": 0.020, "c": 0.025, "d": 0.010}, hop_s=0.001)
    assert after == {"d": 0.0, "c": 0.0, "b": 0.011, "a": 0.032}
    assert needed_s(0.010, after["a"], 0.001) == 0.043


def test_the_simulation_drops_on_arrival_exactly_the_requests_the_rule_dooms():
    # One replica, batch 1, 50 ms a request, SLO 60 ms, 1 ms hop: a request arriving behind another is
    # still admitted (the rule sees only its own budget) but the kernel drops it at batch start; with a
    # margin above the budget left every request is doomed on arrival.
    server = single_server(1, 1, 0.0, np.array([0.0, 0.050]), slo_s=0.060, demand_rps=5)
    kept = engine.run(server, constant(5.0), Policies(early_dropping=True, hop_ms=1.0, p99_over_p50=1.0))
    assert np.isfinite(kept.systems[0].finish).any()
    doomed_all = engine.run(server, constant(5.0), Policies(early_dropping=True, hop_ms=1.0, p99_over_p50=1.0,
                                                            drop_margin_ms=9.5))
    assert np.isnan(doomed_all.systems[0].finish).all()
