"""Where predictors and twin disagree, the twin decides: split what it fails, merge what it passes."""

import numpy as np

from tessera.place_cli import placement_failure
from tessera.planner.placement import AdapterDemand, Placement, PlacementProblem, ServerModel, ServiceBound, plan_placement
from tessera.planner.placement.packing import describe
from tessera.planner.placement.scenarios import Scenario, problem_of
from tessera.planner.placement.twin_check import check_placement
from tessera.planner.placement.twin_gate import twin_gate


def _failing_server():
    """60 Zipf-rated adapters on 8 slots: unstarved, but cold adapters served under 0.9."""
    weights = 1.0 / np.arange(1, 61)
    adapters = tuple(AdapterDemand(f"a{i:02d}", 16, float(20.0 * w / weights.sum())) for i, w in enumerate(weights))
    problem = PlacementProblem(adapters, "qwen", bound=ServiceBound(min_served_fraction=0.9))
    model = ServerModel(problem)
    placement = Placement("tessera", model.profile.model, (describe(model, 0, adapters, 8, 16),))
    return problem, model, check_placement(placement, adapters, model.profile, problem.bound)


def test_a_server_the_twin_fails_is_replaced_by_servers_the_twin_passes():
    problem, model, checked = _failing_server()
    assert not checked.twin_ok
    gated = twin_gate(checked, problem, model)
    # split in two (each half with its own slot count), then merged again where the twin passes
    assert gated.twin_ok and all(s.max_loras > 8 for s in gated.servers)
    assert sorted(n for s in gated.servers for n in s.adapters) == sorted(a.name for a in problem.adapters)


def test_a_placement_whose_twin_check_fails_is_reported_as_a_failure_naming_the_server():
    _, _, checked = _failing_server()
    assert "server(s) 0 fail the twin check" in placement_failure(checked)


def test_the_merge_pass_keeps_one_server_the_twin_passes_where_the_predictors_wanted_two():
    problem = problem_of(Scenario(64, 28.0, "qwen", 0.3))
    predicted = plan_placement(problem, baselines=(), gate=False).placement
    report = plan_placement(problem, baselines=())
    gated = report.placement
    assert predicted.servers_used == 2 and predicted.twin_ok
    assert gated.servers_used == 1 and gated.twin_ok and not placement_failure(gated)
    assert not gated.servers[0].predicted_ok  # the predictors alone would not have merged it
    assert any("predictors' 2 servers to 1" in note for note in report.notes)
