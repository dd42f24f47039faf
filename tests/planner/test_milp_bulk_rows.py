"""The queueing wait's rows in the MILP: how many the bulk classes cost, and the whole-slice cuts under them.

(That the plans stay optimal is test_milp_matches_exhaustive.py's: these say what the model is made of.)
"""

from __future__ import annotations

from highspy import HighsVarType
from pyomo.core.expr.visitor import identify_variables

from tessera.planner import solve
from tessera.planner.latency import Routing
from tessera.planner.milp import CompoundMilp
from tessera.planner.nodes import pool_gpus

from .test_milp_matches_exhaustive import BULK_POINTS, _bulk_chain, _instance, _store, options_for


# The parent runs batches of 1 and 2: bulks of 10 and 20 requests, two classes.
POINTS = BULK_POINTS + [("av", "1g.10gb", 1, 1, 3.0, 250.0)]


def _milp(routing: Routing, demand: float = 50.0) -> CompoundMilp:
    instance = _instance([_bulk_chain(demand)], _store(POINTS), levels=10, batches=(1, 2), routing=routing)
    data = solve._milp_input(instance.systems, pool_gpus(instance.pool), instance.store, instance.features,
                             options_for(instance), None, ())
    return CompoundMilp(data)


def _child_steps(milp: CompoundMilp) -> int:
    return sum(len(milp.options[o].steps) for o in milp.by_task[("s", "b")])


def test_a_fan_out_tasks_most_load_rows_are_one_per_step_not_one_per_step_and_bulk_class():
    milp = _milp(Routing.PER_REQUEST)
    classes = len(milp.arrivals[("s", "b")][0].bulks)
    assert classes == 2 and len(milp.m.split_bulk_rows) > 0
    assert len(milp.m.split_bulk_rows) <= _child_steps(milp)
    whole_bulk_rows = [row for row in milp.part_served_rows if row.func == milp._excess]
    assert len(whole_bulk_rows) <= _child_steps(milp)


def test_the_whole_slice_cuts_hold_under_each_bulk_class_whose_instances_carry_less():
    milp = _milp(Routing.ONE_REPLICA)
    bulk_classes = {id(u) for u in milp.m.U.values()}
    conditioned = [cut for cut in milp.m.full_demand_cuts.values()
                   if any(id(v) in bulk_classes for v in identify_variables(cut.body))]
    assert conditioned


def test_relax_and_fix_relaxes_the_bulk_classes_and_its_rounded_solve_sets_them(monkeypatch):
    integral: dict[str, set[bool]] = {}
    stage_solve = solve._StagedSolver._solve

    def recording(self, name, *args, **kwargs):
        kinds = self.highs.h.getLp().integrality_
        integral[name] = {kinds[c] != HighsVarType.kContinuous for c in self.highs.columns(self.milp.m.U.values())}
        return stage_solve(self, name, *args, **kwargs)

    monkeypatch.setattr(solve._StagedSolver, "_solve", recording)
    instance = _instance([_bulk_chain(50.0)], _store(POINTS), levels=10, batches=(1, 2))
    solve.plan(instance.systems, instance.pool, instance.store, instance.features, options_for(instance))
    assert integral["relaxed"] == {False}
    assert integral["rounded"] == {True}


def test_with_the_queueing_wait_relax_and_fix_rounds_the_variants_and_leaves_the_levels_free(monkeypatch):
    fixed: dict[str, tuple[bool, bool]] = {}
    stage_solve = solve._StagedSolver._solve

    def recording(self, name, *args, **kwargs):
        lp, m = self.highs.h.getLp(), self.milp.m

        def all_fixed(variables):
            return all(lp.col_lower_[c] == lp.col_upper_[c] for c in self.highs.columns(variables))

        fixed[name] = (all_fixed(m.y.values()), all_fixed(m.z.values()))
        return stage_solve(self, name, *args, **kwargs)

    monkeypatch.setattr(solve._StagedSolver, "_solve", recording)
    instance = _instance([_bulk_chain(50.0)], _store(POINTS), levels=10, batches=(1, 2))
    solve.plan(instance.systems, instance.pool, instance.store, instance.features, options_for(instance))
    assert fixed["rounded"] == (True, False)
