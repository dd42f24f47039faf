"""The planner's models reach HiGHS as pyomo's appsi interface would hand them over (planner/highs_driver.py).

load_model replaced appsi's set_instance for speed; HiGHS solving the same columns, rows and coefficients in the
same order is what keeps every plan as it was. appsi stays the reference here, on the models the planner writes:
exact and approximate pools, the queueing wait, quotas, a re-plan with layouts in force, and the packing model.
"""

import gc
from pathlib import Path

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.contrib.appsi.solvers import Highs as AppsiHighs
from pyomo.core.expr.numeric_expr import LinearExpression, MonomialTermExpression

from tessera.planner.features import Features
from tessera.planner.highs_driver import COLLECTOR, _any_row, _linear_row, load_model
from tessera.planner.milp import CompoundMilp
from tessera.planner.model import Pool
from tessera.planner.nodes import pool_gpus
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.quota import InstanceQuota
from tessera.planner.solve import PlannerOptions, _milp_input, plan
from tessera.planner.spec_file import load_systems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU = "H100-80GB"
SYSTEMS = [s for name in ("traffic-analysis", "social-media", "ar-assistant")
           for s in load_systems(EXAMPLES / f"{name}.yaml")]
STORE = build_profile_store(SYSTEMS, GPU)


def model_of(systems, gpus: int, options=PlannerOptions(), current=None, quotas=()) -> pyo.ConcreteModel:
    data = _milp_input(systems, pool_gpus(Pool(gpu=GPU, gpus=gpus)), STORE, Features(), options, current, quotas)
    return CompoundMilp(data).m


def appsi_loaded(model: pyo.ConcreteModel):
    loader = AppsiHighs()
    loader.config.load_solution = False
    loader.set_instance(model)
    return loader._solver_model, loader._pyomo_var_to_solver_var_map, loader._pyomo_con_to_solver_con_map


def assert_same_in_highs(model: pyo.ConcreteModel) -> None:
    reference, columns, rows = appsi_loaded(model)
    loaded = load_model(model)
    assert loaded.column == dict(columns) and loaded.row == dict(rows)
    ours, theirs = loaded.h.getLp(), reference.getLp()
    for part in ("col_lower_", "col_upper_", "row_lower_", "row_upper_", "integrality_"):
        assert np.array_equal(np.array(getattr(ours, part)), np.array(getattr(theirs, part))), part
    for part in ("start_", "index_", "value_"):
        assert np.array_equal(np.array(getattr(ours.a_matrix_, part)), np.array(getattr(theirs.a_matrix_, part))), part


@pytest.mark.parametrize("system", SYSTEMS, ids=lambda s: s.name)
def test_each_example_alone_on_an_exact_pool_reaches_highs_as_appsi_gives_it(system):
    assert_same_in_highs(model_of([system], 8))


def test_the_examples_together_on_an_approximate_pool_reach_highs_as_appsi_gives_them():
    assert_same_in_highs(model_of(SYSTEMS, 100, PlannerOptions(exact_up_to_gpus=0)))


def test_a_model_with_the_queueing_wait_and_quotas_reaches_highs_as_appsi_gives_it():
    quotas = [InstanceQuota(systems=frozenset({SYSTEMS[0].name}), mig_profile="1g.10gb", limit=2, source="quota")]
    assert_same_in_highs(model_of(SYSTEMS[:2], 4, PlannerOptions(queueing=True), quotas=quotas))


def test_a_replan_with_the_layouts_in_force_reaches_highs_as_appsi_gives_it():
    current = plan(SYSTEMS[:1], Pool(gpu=GPU, gpus=4), STORE)
    assert_same_in_highs(model_of(SYSTEMS, 4, current=current))


def test_a_system_without_demand_reaches_highs_as_appsi_gives_it():
    # Its served share's terms have a coefficient of 0: appsi still gives the variable a column.
    assert_same_in_highs(model_of([SYSTEMS[0].model_copy(update={"demand_rps": 0.0})], 2))


def the_bench_systems():
    """bench/decompose_phases.py's 20 systems with distinct demands: the examples in turn, the i-th's demand
    lowered by i %."""
    return [example.model_copy(update={"name": f"bench-{i}", "demand_rps": example.demand_rps * (1 - i / 100)})
            for i, example in ((i, SYSTEMS[i % 3]) for i in range(20))]


def same_row(one, other) -> bool:
    """The same columns in the same order of first appearance, terms, coefficients and constant."""
    def read(row):
        return list(dict.fromkeys(id(v) for v in row.variables)), [id(v) for v in row.terms], row.coefficients, \
            row.constant
    return read(one) == read(other)


def test_every_linear_row_reads_in_one_pass_as_pyomo_reads_it():
    # The reference: identify_variables' order and generate_standard_repn's terms, as load_model read every row
    # before the one-pass reader; on each part the bench's 20 systems build and on the examples together.
    models = [model_of([system], 8) for system in the_bench_systems()]
    models.append(model_of(SYSTEMS, 100, PlannerOptions(exact_up_to_gpus=0, queueing=True)))
    read = 0
    for model in models:
        for constraint in model.component_data_objects(pyo.Constraint, active=True):
            body = constraint.to_bounded_expression(evaluate_bounds=True)[1]
            fast = _linear_row(body)
            if fast is not None:
                read += 1
                assert same_row(fast, _any_row(body, constraint.name)), constraint.name
    assert read > 70_000  # nearly every row is such a sum (75,519 rows in the 20 parts)


def test_a_row_repeating_a_variable_or_with_a_zero_coefficient_reads_in_one_pass_as_pyomo_reads_it():
    # The planner writes neither today; pyomo sums a repeated variable's coefficients and leaves out those of 0.
    m = pyo.ConcreteModel()
    m.a, m.b = pyo.Var(), pyo.Var()
    body = LinearExpression([MonomialTermExpression((2.0, m.a)), MonomialTermExpression((0.0, m.b)), 3.0,
                             MonomialTermExpression((1.5, m.a)), m.b, MonomialTermExpression((-1.0, m.b))])
    fast = _linear_row(body)
    assert fast is not None and same_row(fast, _any_row(body, "row"))
    assert [v.name for v in fast.terms] == ["a"] and fast.coefficients == [3.5] and fast.constant == 3.0


def test_a_model_with_a_pyomo_objective_is_refused():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(bounds=(0, 1))
    m.c = pyo.Constraint(expr=m.x <= 1)
    m.o = pyo.Objective(expr=m.x)
    with pytest.raises(ValueError, match="set_objective"):
        load_model(m)


def test_a_model_with_a_fixed_variable_is_refused():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(bounds=(0, 1))
    m.c = pyo.Constraint(expr=m.x <= 1)
    m.x.fix(1)
    with pytest.raises(ValueError, match="fixed"):
        load_model(m)


def test_the_collector_is_held_off_while_a_model_is_built_and_runs_again_after():
    assert gc.isenabled()
    with COLLECTOR.held():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_runs_again_only_when_the_last_of_builds_at_once_is_done():
    first, second = COLLECTOR.held(), COLLECTOR.held()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_held_off_before_a_build_stays_so_after_it():
    gc.disable()
    try:
        with COLLECTOR.held():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_plan_lets_the_collector_run_again():
    plan(SYSTEMS[:1], Pool(gpu=GPU, gpus=4), STORE)
    assert gc.isenabled()
