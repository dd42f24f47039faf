"""Where predictors and twin disagree, the twin decides: split what it fails, merge or empty what it passes."""

import numpy as np

from tessera.place_cli import placement_failure
from tessera.planner.placement import (AdapterDemand, Placement, PlacementProblem, ServerModel, ServiceBound, place,
                                       plan_placement)
from tessera.planner.placement.packing import describe
from tessera.planner.placement.scenarios import Scenario, problem_of
from tessera.planner.placement.twin_check import check_placement
from tessera.planner.placement.twin_gate import GATE_SEEDS, twin_gate

SHORT_HOUR_S = 600.0  # ten simulated minutes: where a test needs a verdict, not an hour's statistics


def _zipf(prefix: str, n: int, total_rps: float, rank: int = 16) -> tuple[AdapterDemand, ...]:
    weights = 1.0 / np.arange(1, n + 1)
    return tuple(AdapterDemand(f"{prefix}{i:02d}", rank, float(total_rps * w / weights.sum())) for i, w in enumerate(weights))


def _checked(adapters, servers, hour_s=3600.0):
    """A placement of these servers (adapters, slots), twin-checked."""
    problem = PlacementProblem(adapters, "qwen", bound=ServiceBound(min_served_fraction=0.9))
    model = ServerModel(problem)
    by_name = {a.name: a for a in adapters}
    placement = Placement("tessera", model.profile.model, tuple(
        describe(model, i, [by_name[n] for n in names], slots, 16) for i, (names, slots) in enumerate(servers)))
    return problem, model, check_placement(placement, adapters, model.profile, problem.bound, hour_s=hour_s)


def _failing_server():
    """60 Zipf-rated adapters on 8 slots: unstarved (0.925 of offered), but cold adapters served under
    0.9 (23 of them, the worst 0.79)."""
    adapters = _zipf("a", 60, 25.0)
    return _checked(adapters, [([a.name for a in adapters], 8)])


def test_a_server_the_twin_fails_is_replaced_by_servers_the_twin_passes():
    problem, model, checked = _failing_server()
    assert not checked.twin_ok
    gated, log = twin_gate(checked, problem, model)
    # split in two (each half with its own slot count), then merged again where the twin passes
    assert gated.twin_ok and all(s.max_loras > 8 for s in gated.servers)
    assert log.splits >= 1
    assert sorted(n for s in gated.servers for n in s.adapters) == sorted(a.name for a in problem.adapters)


def test_a_placement_whose_twin_check_fails_is_reported_as_a_failure_naming_the_server_and_its_adapters():
    _, _, checked = _failing_server()
    failure = placement_failure(checked)
    under = checked.servers[0].twin.adapters_under_bound
    assert failure.startswith("server 0 (60 adapters, 25.00 req/s) fails the twin check")
    assert f"{len(under)} adapters under the service bound" in failure and under[0] in failure


def test_a_merge_the_twin_fails_is_not_kept():
    """Two servers of 22 req/s each pass; merged (44 req/s) the twin starves them, so both stay."""
    hot, warm = _zipf("h", 30, 22.0), _zipf("w", 30, 22.0)
    problem, model, checked = _checked(hot + warm, [([a.name for a in hot], 30), ([a.name for a in warm], 30)],
                                       SHORT_HOUR_S)
    assert checked.twin_ok
    gated, log = twin_gate(checked, problem, model, hour_s=SHORT_HOUR_S)
    assert log.moves_tried >= 1 and log.moves_kept == 0 and log.hours >= 1
    assert sorted(s.adapters for s in gated.servers) == sorted(s.adapters for s in checked.servers)


def test_the_merge_pass_keeps_one_server_the_twin_passes_where_the_predictors_wanted_two():
    problem = problem_of(Scenario(64, 28.0, "qwen", 0.3))
    report = plan_placement(problem, baselines=())
    gated = report.placement
    assert place(problem).servers_used == 2
    assert gated.servers_used == 1 and gated.twin_ok and not placement_failure(gated)
    assert not gated.servers[0].predicted_ok  # the predictors alone would not have merged it
    assert report.gate is not None and report.gate.moves_kept == 1
    assert report.gate.confirm_hours == 2 * (GATE_SEEDS - 1)  # both packed servers held to GATE_SEEDS hours
    assert report.gate.hours == report.gate.confirm_hours + GATE_SEEDS  # and the merge GATE_SEEDS more
    assert any("predictors' 2 servers to 1" in note for note in report.notes)


def test_the_gate_runs_no_more_simulated_hours_than_its_bound_and_keeps_no_move_it_could_not_check():
    problem = problem_of(Scenario(64, 28.0, "qwen", 0.3))
    model = ServerModel(problem)
    packed = plan_placement(problem, baselines=(), gate=False).placement
    gated, log = twin_gate(packed, problem, model, max_hours=GATE_SEEDS - 1, hour_s=SHORT_HOUR_S)
    assert log.hours - log.confirm_hours == GATE_SEEDS - 1 and log.hours_ran_out
    assert gated.servers_used == 2 and gated.twin_ok  # the merge needs GATE_SEEDS passing hours


def test_the_gate_decides_the_same_way_every_run():
    problem, model, checked = _failing_server()
    first, second = (twin_gate(checked, problem, model, hour_s=SHORT_HOUR_S) for _ in range(2))
    assert [(s.adapters, s.max_loras) for s in first[0].servers] == [(s.adapters, s.max_loras) for s in second[0].servers]
    assert first[1].hours == second[1].hours


def test_a_server_whose_first_hour_passes_and_second_fails_is_not_reported_as_passing():
    """A 256-adapter server at a 0.95 bound: the placement's hour passes it (worst adapter 0.950), the
    gate's second hour does not (0.938); with no hours left to split it, the placement is a failure."""
    problem = problem_of(Scenario(256, 18.0, "qwen", 1.0), bound=ServiceBound(min_served_fraction=0.95))
    packed = plan_placement(problem, baselines=(), gate=False).placement
    assert packed.twin_ok
    gated, log = twin_gate(packed, problem, ServerModel(problem), max_hours=0)
    assert log.confirm_hours == GATE_SEEDS - 1 and not gated.twin_ok
    assert placement_failure(gated).startswith("server 0 (256 adapters")
