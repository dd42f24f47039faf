"""The planner's contract: a request keyed by namespace/name in, one typed outcome out."""

import pickle

import pytest

from tessera.planner import solve as solve_module
from tessera.planner.contract import (Infeasible, InvalidInput, Planned, PlannerFailed, PlanRequest, SystemInput,
                                      TimeLimit, outcome_of, solve_request)
from tessera.planner.model import Pool

from .test_solve import GPU, ONE_TASK, OPTIONS, make_system


def request(*systems: SystemInput, gpus: int = 2, **fields) -> PlanRequest:
    return PlanRequest(systems=list(systems), pool=Pool(gpu=GPU, gpus=gpus), options=OPTIONS, **fields)


def system(namespace="team-a", name="s", **spec) -> SystemInput:
    return SystemInput(namespace=namespace, name=name, spec=make_system(ONE_TASK, name=name, **spec))


def test_a_plan_that_serves_everything_is_planned_and_keyed_by_namespace_and_name():
    outcome = solve_request(request(system("team-a", demand=300), system("team-b", demand=300)))
    assert isinstance(outcome, Planned)
    assert [s.system for s in outcome.plan.systems] == ["team-a/s", "team-b/s"]
    # Planned apart (decompose.py): each system's cost is proven, the whole's against the joint optimum is not.
    assert outcome.plan.solver.method == "decomposed" and outcome.plan.solver.cost is None


def test_a_pool_planned_jointly_carries_the_proof_of_its_cost():
    joint = request(system("team-a", demand=300), system("team-b", demand=300))
    outcome = solve_request(joint.model_copy(update={"options": OPTIONS.model_copy(update={"decompose": False})}))
    assert isinstance(outcome, Planned) and outcome.plan.solver.method == "joint"
    assert outcome.plan.solver.cost.proven


def test_the_request_and_every_outcome_survive_pickling():
    req = request(system(demand=300))
    outcome = solve_request(pickle.loads(pickle.dumps(req)))
    assert pickle.loads(pickle.dumps(outcome)) == outcome


def test_a_pool_too_small_is_infeasible_with_the_exact_share_it_serves_and_the_best_partial_plan():
    outcome = solve_request(request(system(demand=2000), gpus=1))
    assert isinstance(outcome, Infeasible)
    assert outcome.served["team-a/s"].served_rps == pytest.approx(700 / 1.1, rel=1e-3)
    assert outcome.plan is not None and outcome.plan.gpus_used == 1
    assert any("serves at most 636.4 of 2000.0 requests/s (32%)" in line for line in outcome.diagnosis)


def test_a_tiny_share_served_is_never_rounded_to_zero():
    # 0.01 req/s per slice: one GPU serves 0.0636 req/s of 100.
    spec = make_system({"t": [("v", 1.0, 10, 0.01)]}, demand=100)
    outcome = solve_request(request(SystemInput(namespace="ns", name="s", spec=spec), gpus=1))
    assert isinstance(outcome, Infeasible)
    assert outcome.served["ns/s"].served_rps == pytest.approx(0.07 / 1.1, rel=1e-3)
    assert any("serves at most 0.0636 of 100.0 requests/s (0.064%)" in line for line in outcome.diagnosis), \
        outcome.diagnosis


def test_no_plan_at_all_is_infeasible_with_the_reason():
    # the path a -> b needs 40 ms at least; a 30 ms SLO serves nothing
    spec = make_system({"a": [("av", 1.0, 10, 100)], "b": [("bv", 1.0, 10, 100)]},
                       edges=[{"source": "a", "target": "b"}], latency_slo=30)
    outcome = solve_request(request(SystemInput(namespace="ns", name="s", spec=spec)))
    assert isinstance(outcome, Infeasible) and outcome.plan is None
    assert any("fastest choices take 40.0 ms" in line for line in outcome.diagnosis)


def test_repeated_namespace_and_name_is_invalid_input():
    outcome = solve_request(request(system("a"), system("a")))
    assert isinstance(outcome, InvalidInput) and "repeated namespace/name ['a/s']" in outcome.reason


def test_a_variant_without_profiles_or_figures_is_invalid_input_naming_it():
    spec = make_system(ONE_TASK).model_copy(update={"profiles": []})
    outcome = solve_request(request(SystemInput(namespace="ns", name="s", spec=spec)))
    assert isinstance(outcome, InvalidInput)
    assert "variant 'v'" in outcome.reason and "gflops" in outcome.reason


def test_a_plan_the_checker_refuses_is_a_planner_failure_never_a_plan(monkeypatch):
    # Drop the last GPU the assignment places: the real checker finds replicas without instances.
    assign = solve_module.assign_gpus
    monkeypatch.setattr(solve_module, "assign_gpus", lambda *args, **kwargs: assign(*args, **kwargs)[:-1])
    outcome = solve_request(request(system(demand=300)))
    assert isinstance(outcome, PlannerFailed)
    assert any("replicas but 0 MIG instances" in error for error in outcome.errors), outcome.errors


def test_a_plan_whose_cost_proof_the_time_limit_cut_short_is_a_time_limit_with_the_plan():
    planned = solve_request(request(system(demand=300)))
    report = planned.plan.solver.model_copy(update={"time_limited": ["cost"]})
    outcome = outcome_of(planned.plan.model_copy(update={"solver": report}))
    assert isinstance(outcome, TimeLimit) and outcome.plan is not None
    assert not outcome.retryable and outcome.cost == report.cost
    assert "stopped cost" in outcome.reason


def test_a_plan_whose_accuracy_tie_break_alone_ran_out_of_time_is_still_planned():
    planned = solve_request(request(system(demand=300)))
    report = planned.plan.solver.model_copy(update={"time_limited": ["accuracy"]})
    assert isinstance(outcome_of(planned.plan.model_copy(update={"solver": report})), Planned)
