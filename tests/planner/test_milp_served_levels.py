"""The budget levels a task can take while all demand is served, and the level-step rows above them.

(That plans stay optimal is test_milp_matches_exhaustive.py's, these instances included: these say what the
model is made of.)
"""

from __future__ import annotations

import pytest
from pyomo.core.expr.visitor import identify_variables

from tessera.planner import solve
from tessera.planner.latency import Routing
from tessera.planner.milp import CompoundMilp
from tessera.planner.model import Edge, Slo, SystemSpec, Task, Variant
from tessera.planner.nodes import pool_gpus

from .test_milp_matches_exhaustive import _instance, _store, compare, options_for

# With an SLO of 100 ms in ten levels of 10 ms, a's batches (2 x 30 ms) fit from its level 5 (60 ms) on,
# which leaves b at most 40 ms (level 3) on the path; b's (2 x 2 ms) fit from level 0.
POINTS = [("av", "1g.10gb", 1, 1, 30.0, 100.0), ("av", "1g.10gb", 1, 2, 30.0, 180.0),
          ("bv", "1g.10gb", 1, 1, 2.0, 500.0), ("bv", "1g.10gb", 1, 2, 3.0, 900.0)]


def _chain(demand: float) -> SystemSpec:
    return SystemSpec(
        name="s", tasks=[Task(name="a", variants=[Variant(name="av", accuracy=0.9, memory_gb=4)]),
                         Task(name="b", variants=[Variant(name="bv", accuracy=0.9, memory_gb=4)])],
        edges=[Edge(source="a", target="b", factor=2.0)], slo=Slo(latency_ms=100.0), demand_rps=demand)


def _milp(demand: float, routing: Routing) -> CompoundMilp:
    instance = _instance([_chain(demand)], _store(POINTS), levels=10, batches=(1, 2), routing=routing)
    data = solve._milp_input(instance.systems, pool_gpus(instance.pool), instance.store, instance.features,
                             options_for(instance), None, ())
    return CompoundMilp(data)


def test_while_all_demand_is_served_a_task_takes_no_level_above_what_its_path_leaves_it_with_the_others_lowest():
    milp = _milp(50.0, Routing.PER_REQUEST)
    assert milp.served_levels == {("s", "a"): (5, 8), ("s", "b"): (0, 3)}
    m = milp.m
    cuts = {tuple(id(v) for v in identify_variables(cut.body)) for cut in m.full_demand_cuts.values()}
    assert (id(m.Z["s", "a", 9]),) in cuts and (id(m.Z["s", "b", 4]),) in cuts


def test_the_least_load_rows_of_steps_above_the_levels_all_demand_allows_wait_until_it_is_not_served():
    milp = _milp(50.0, Routing.PER_REQUEST)
    waiting = sorted((milp.candidate(row.args[0]).task, level)
                     for row in milp.part_served_rows if row.func == milp._shortfall
                     for level, least in milp.options[row.args[0]].steps if least == row.args[1])
    assert waiting == [("a", 9)] + [("b", level) for level in range(4, 10)]


@pytest.mark.parametrize("demand", [50.0, 5000.0], ids=["served", "too-small-a-pool"])
def test_plans_with_the_levels_bounded_match_the_exhaustive_search(demand):
    compare(_instance([_chain(demand)], _store(POINTS), levels=10, batches=(1, 2), routing=Routing.PER_REQUEST))
