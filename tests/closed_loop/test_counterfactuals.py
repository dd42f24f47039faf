"""How the loop starts, and its switches for attributing violations (bench/closed_loop_sweep.py): each off by default."""

import numpy as np
import pytest

from tessera.closed_loop import ClosedLoop, LoopSettings, NoFirstPlan
from tessera.planner.simulation.workloads import RateTrace
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems
from tessera.shipped import example

# The first minute at twice the mean's multiplier, then a quarter: a warm start must read only the first minute.
TRACE = RateTrace("two-levels", np.concatenate([np.full(60, 2.0), np.full(540, 0.25)]))


def _loop(settings: LoopSettings) -> ClosedLoop:
    return ClosedLoop(load_systems(example("single-model.yaml")), "H100-80GB", 1, TRACE, PlannerOptions(),
                      settings=settings)


def test_the_loop_starts_from_the_specs_rate():
    loop = _loop(LoopSettings())
    assert loop.start_rates() == {s.name: s.demand_rps for s in loop.base}


def test_a_warm_start_plans_for_the_traces_first_rate_window():
    loop = _loop(LoopSettings(start_from_trace=True))
    assert loop.start_rates() == {s.name: round(2.0 * s.demand_rps, 3) for s in loop.base}


def test_node_changes_take_the_planners_reconfigure_time_unless_the_loop_sets_its_own():
    assert _loop(LoopSettings()).change_s == PlannerOptions().reconfigure_s
    assert _loop(LoopSettings(change_s=0.0)).change_s == 0.0


def test_a_loop_whose_slo_no_plan_reaches_says_so_with_the_outcome():
    systems = [s.model_copy(update={"slo": s.slo.model_copy(update={"latency_ms": 0.01})})
               for s in load_systems(example("single-model.yaml"))]
    loop = ClosedLoop(systems, "H100-80GB", 1, TRACE, PlannerOptions())
    with pytest.raises(NoFirstPlan) as raised:
        loop.run()
    assert raised.value.answer == "infeasible"
