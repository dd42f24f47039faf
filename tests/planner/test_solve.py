"""The planner end to end on tiny instances: what a plan promises.

Every system here is profiled in its spec (batch 1 on every MIG profile of
an H100-80GB with one process, throughput proportional to compute slices), so
the arithmetic of each expectation is plain: a segment of c slices serves
`per_slice x c` requests/s, and its stage latency is 2 x batch latency.
"""

import pytest

from tessera.planner.capacity import capacity
from tessera.planner.catalog import gpu_product
from tessera.planner.features import Features, all_feature_sets
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions, max_common_scale, plan

GPU = "H100-80GB"
# The hand-worked cases here count throughput and headroom: their made-up profiles' throughput is not
# batch / latency, so a queueing wait on them means nothing. The wait has its own tests (test_latency,
# test_exhaustive, test_milp_matches_exhaustive).
OPTIONS = PlannerOptions(time_limit_s=20, budget_levels=4, queueing=False)


def profiles(task, variant, latency_ms, per_slice_rps):
    return [
        {"task": task, "variant": variant, "gpu": GPU, "mig_profile": p.name, "batch": 1,
         "latency_ms": latency_ms, "throughput_rps": per_slice_rps * p.compute_slices}
        for p in gpu_product(GPU).profiles
    ]


def make_system(tasks, edges=(), demand=100, latency_slo=100, accuracy_slo=0.1, name="s", **extra) -> SystemSpec:
    """tasks: {task: [(variant, accuracy, batch latency ms, requests/s per slice), ...]}."""
    return SystemSpec.model_validate({
        "name": name,
        "tasks": [{"name": t, "variants": [{"name": v, "accuracy": a, "memory_gb": 2} for v, a, _, _ in vs]}
                  for t, vs in tasks.items()],
        "edges": list(edges),
        "slo": {"latency_ms": latency_slo, "accuracy": accuracy_slo},
        "demand_rps": demand,
        "profiles": [p for t, vs in tasks.items() for v, _, lat, rps in vs for p in profiles(t, v, lat, rps)],
        **extra,
    })


def solve(systems, gpus=2, features=Features(), options=OPTIONS, current=None) -> Plan:
    systems = systems if isinstance(systems, list) else [systems]
    return plan(systems, Pool(gpu=GPU, gpus=gpus), build_profile_store(systems, GPU), features, options, current)


ONE_TASK = {"t": [("v", 1.0, 10, 100)]}


def test_a_plan_that_fits_serves_all_demand_with_headroom():
    result = solve(make_system(ONE_TASK, demand=500))
    assert result.fully_served and not result.diagnosis
    [summary] = result.systems
    assert summary.served_rps == pytest.approx(500)
    task = result.task("s", "t")
    assert task.demand_rps == pytest.approx(500)
    assert task.capacity_rps >= 500 * (1 + OPTIONS.headroom) - 1e-6
    assert sum(c.load_rps for c in task.configs) == pytest.approx(500)


def _record_neighbourhood_search(monkeypatch) -> list[bool]:
    from tessera.planner.highs_driver import HighsModel

    searched: list[bool] = []
    highs_solve = HighsModel.solve

    def recording(self, time_limit_s, neighbourhood_search=True, **gaps):
        searched.append(neighbourhood_search)
        return highs_solve(self, time_limit_s, neighbourhood_search, **gaps)

    monkeypatch.setattr(HighsModel, "solve", recording)
    return searched


def test_each_full_solve_after_its_relax_and_fix_start_skips_neighbourhood_search(monkeypatch):
    from tessera.planner.solve import _StagedSolver

    searched = _record_neighbourhood_search(monkeypatch)
    # Relax-and-fix proves this start optimal; without that proof the cost stage solves the MIP.
    monkeypatch.setattr(_StagedSolver, "_proven_by_start", lambda *args: None)
    solve(make_system({"t": [("v", 1.0, 10, 100), ("w", 0.9, 10, 200)]}, demand=500))
    # relaxed, rounded, then the cost stage from their start; the same for the accuracy stage
    assert searched == [True, True, False, True, True, False]


def test_a_start_whose_relaxation_bound_proves_it_needs_no_cost_solve(monkeypatch):
    searched = _record_neighbourhood_search(monkeypatch)
    plan = solve(make_system({"t": [("v", 1.0, 10, 100), ("w", 0.9, 10, 200)]}, demand=500))
    # relaxed, rounded (proven by the relaxed bound: the cost stage is theirs), the same for the accuracy stage
    assert searched == [True, True, True, True]
    assert plan.solver.stages == ["cost", "accuracy"] and plan.solver.cost.proven


def test_the_plan_uses_the_fewest_gpus_and_compute_slices():
    # 1000 req/s x 1.1 headroom needs 11 slices of 100 req/s: two GPUs, though three are lent.
    result = solve(make_system(ONE_TASK, demand=1000), gpus=3)
    assert result.fully_served
    assert result.gpus_used == 2
    assert result.slices_used == 11
    assert len(result.gpus) == 2


def test_every_replica_sits_on_a_mig_instance_of_its_gpus_layout():
    result = solve(make_system(ONE_TASK, demand=1000), gpus=3)
    for gpu in result.gpus:
        assert sorted(i.mig_profile for i in gpu.instances) == sorted(
            name for name, count in gpu.layout for _ in range(count))
    placed = sum(1 for gpu in result.gpus for i in gpu.instances if i.task == "t")
    assert placed == sum(c.replicas for c in result.task("s", "t").configs)


def test_a_pool_too_small_serves_part_and_the_diagnosis_says_how_much():
    # One GPU serves at most 700 req/s at 1/1.1 utilisation: 636.4 of 2000.
    result = solve(make_system(ONE_TASK, demand=2000), gpus=1)
    assert not result.fully_served
    [summary] = result.systems
    assert summary.served_rps == pytest.approx(700 / 1.1, rel=1e-3)
    assert f"pool of 1 x H100-80GB serves at most {summary.served_rps:.1f} of 2000.0 requests/s (32%)" \
        in result.diagnosis[0]
    assert any("add GPUs or lower the demand" in line for line in result.diagnosis)


def test_an_unreachable_latency_slo_is_diagnosed_with_the_fastest_path_latency():
    # Each stage takes at least 2 x 10 ms: the path a -> b needs 40 ms, the SLO allows 30.
    system = make_system({"a": [("av", 1.0, 10, 100)], "b": [("bv", 1.0, 10, 100)]},
                         edges=[{"source": "a", "target": "b"}], latency_slo=30)
    result = solve(system)
    assert not result.fully_served
    assert result.systems[0].served_rps == pytest.approx(0)
    assert any("fastest choices take 40.0 ms on path a -> b (SLO 30 ms)" in line for line in result.diagnosis)


def test_systems_planned_together_share_the_pool():
    # 200 req/s each needs 3 slices of 100 req/s with headroom: both fit on one GPU.
    first = make_system(ONE_TASK, demand=200, name="first")
    second = make_system({"u": [("w", 1.0, 10, 100)]}, demand=200, name="second")
    result = solve([first, second], gpus=2)
    assert result.fully_served
    assert [s.system for s in result.systems] == ["first", "second"]
    assert result.gpus_used == 1 and result.slices_used == 6
    [gpu] = result.gpus
    assert {i.system for i in gpu.instances} == {"first", "second"}


def test_a_system_without_demand_needs_no_gpus():
    result = solve(make_system(ONE_TASK, demand=0))
    assert result.fully_served
    assert result.gpus_used == 0 and result.gpus == []


CHEAP_OR_GOOD = {"t": [("cheap", 0.5, 10, 100), ("good", 1.0, 10, 20)]}


def test_with_a_loose_accuracy_slo_the_cheaper_variant_runs():
    result = solve(make_system(CHEAP_OR_GOOD, accuracy_slo=0.4))
    assert result.task("s", "t").variant == "cheap"
    assert result.slices_used == 2


def test_the_accuracy_slo_keeps_cheap_inaccurate_variants_out():
    result = solve(make_system(CHEAP_OR_GOOD, accuracy_slo=0.9))
    assert result.fully_served
    assert result.task("s", "t").variant == "good"
    assert all(p.accuracy >= 0.9 for p in result.paths)


def test_priority_accuracy_picks_the_best_variant_even_when_dearer():
    result = solve(make_system(CHEAP_OR_GOOD, accuracy_slo=0.4, priority="accuracy"))
    assert result.fully_served
    assert result.task("s", "t").variant == "good"
    assert result.slices_used == 6  # 110 req/s at 20 per slice


CHAIN = {"a": [("av", 1.0, 5, 100)], "b": [("bv", 1.0, 5, 100)], "c": [("cv", 1.0, 5, 100)],
         "d": [("dv", 1.0, 5, 100)]}
CHAIN_EDGES = [{"source": "a", "target": "b"}, {"source": "b", "target": "c"}, {"source": "a", "target": "d"}]


def test_without_spatial_partitioning_only_whole_gpu_segments_are_used():
    result = solve(make_system(ONE_TASK, demand=500), features=Features.parse("A+T"))
    assert result.fully_served
    assert {c.segment.mig_profile for t in result.tasks for c in t.configs} == {"7g.80gb"}
    assert {c.segment.mps for t in result.tasks for c in t.configs} == {1}
    assert all(g.layout == [("7g.80gb", 1)] for g in result.gpus)


def test_without_task_budgeting_every_task_gets_the_slo_over_the_longest_path():
    result = solve(make_system(CHAIN, CHAIN_EDGES, latency_slo=90), gpus=2, features=Features.parse("A+S"))
    assert result.fully_served
    assert {t.task: t.budget_ms for t in result.tasks} == pytest.approx({t: 30 for t in "abcd"})


def test_every_path_meets_its_latency_slo_and_budget():
    result = solve(make_system(CHAIN, CHAIN_EDGES, latency_slo=90))
    assert result.fully_served
    for path in result.paths:
        assert path.latency_ms <= path.budget_ms + 1e-6 <= 90 + 1e-6


def test_a_variant_dependent_edge_factor_sets_the_downstream_demand():
    tasks = {"a": [("small", 0.5, 10, 100), ("big", 1.0, 10, 100)], "b": [("bv", 1.0, 10, 100)]}
    edge = {"source": "a", "target": "b", "factor": 1.0, "factor_by_variant": {"big": 3.0}}
    small = solve(make_system(tasks, [edge], demand=50, accuracy_slo=0.4))
    big = solve(make_system(tasks, [edge], demand=50, accuracy_slo=0.9))
    assert small.task("s", "a").variant == "small" and big.task("s", "a").variant == "big"
    assert small.task("s", "b").demand_rps == pytest.approx(50)
    assert big.task("s", "b").demand_rps == pytest.approx(150)
    assert big.task("s", "b").capacity_rps >= 150 * (1 + OPTIONS.headroom) - 1e-6


def test_replanning_from_a_current_plan_keeps_the_gpus_layouts_when_demand_barely_changes():
    # 950 and 960 req/s both need 11 slices; many 11-slice layout pairs are equally cheap.
    system = make_system(ONE_TASK, demand=950)
    before = solve(system, gpus=3)
    after = solve(system.model_copy(update={"demand_rps": 960}), gpus=3, current=before)
    assert after.fully_served and after.slices_used == before.slices_used == 11
    assert {g.index: g.layout for g in after.gpus} == {g.index: g.layout for g in before.gpus}


def test_replanning_keeps_replicas_on_the_instances_they_run_on():
    system = make_system(ONE_TASK, demand=950)
    before = solve(system, gpus=3)
    after = solve(system.model_copy(update={"demand_rps": 960}), gpus=3, current=before)

    def occupants(result):
        return {g.index: [(i.mig_profile, i.task) for i in g.instances] for g in result.gpus}

    assert occupants(after) == occupants(before)


def test_a_task_whose_variants_fit_no_segment_is_diagnosed_by_name():
    system = make_system(ONE_TASK)
    too_big = SystemSpec.model_validate({
        **system.model_dump(), "tasks": [{"name": "t", "variants": [{"name": "v", "accuracy": 1, "memory_gb": 100}]}]})
    result = solve(too_big)
    assert result.systems[0].served_rps == pytest.approx(0)
    assert any("task t has no variant that fits in memory" in line for line in result.diagnosis)


def test_without_task_budgeting_a_stage_slower_than_its_equal_share_is_not_blamed_on_the_pool():
    tasks = {**CHAIN, "d": [("dv", 1.0, 20, 100)]}  # a -> b -> c takes 30 ms, a -> d 50 ms
    result = solve(make_system(tasks, CHAIN_EDGES, latency_slo=60), features=Features.parse("A+S"))
    assert result.systems[0].served_rps == pytest.approx(0) and result.gpus_used == 0
    assert not any("add GPUs" in line for line in result.diagnosis), result.diagnosis


TWO_STAGE = make_system(
    {"a": [("a1", 1.0, 8, 60), ("a2", 0.6, 4, 150)], "b": [("b1", 1.0, 6, 80), ("b2", 0.7, 3, 200)]},
    [{"source": "a", "target": "b"}], demand=100, latency_slo=40, accuracy_slo=0.5)


def test_max_common_scale_is_the_largest_demand_multiple_the_pool_serves():
    # One GPU serves 700 req/s at 1/1.1 utilisation: 6.36 times a demand of 100.
    system = make_system(ONE_TASK, demand=100)
    scale, report = max_common_scale([system], Pool(gpu=GPU, gpus=1), build_profile_store([system], GPU),
                                     Features(), OPTIONS)
    assert scale == pytest.approx(7 / 1.1, rel=1e-3)
    assert report.stages[-1] == "max-demand"


def test_capacity_with_every_feature_is_at_least_that_of_every_other_subset():
    table = capacity([TWO_STAGE], Pool(gpu=GPU, gpus=2), build_profile_store([TWO_STAGE], GPU), options=OPTIONS)
    scales = {row.features: row.scale for row in table.rows}
    assert list(scales) == [f.label for f in all_feature_sets()]
    assert all(row.error is None for row in table.rows)
    tolerance = 1 - 2 * OPTIONS.mip_gap  # each scale is optimal within the MIP gap
    assert all(scales["A+S+T"] >= scale * tolerance for scale in scales.values()), scales
    assert scales["A+S+T"] > scales["Unopt"] > 0
    assert table.ratio("A+S+T", "Unopt") == pytest.approx(scales["A+S+T"] / scales["Unopt"])
    assert table.rows[-1].max_demand_rps == {"s": pytest.approx(100 * scales["A+S+T"])}


def test_on_a_large_pool_the_cost_is_proven_to_one_slice_where_a_relative_gap_would_not_be():
    # 40 GPUs: the weighted cost (281 per GPU + slices) of about 30 GPUs is ~8,500, so the relative gap of
    # 1e-3 that used to end the cost stage accepted a plan up to 8 slices above its bound. The cost is now
    # proven in its own units: GPUs exactly, slices to less than one.
    tasks = {"a": [("a1", 1.0, 8, 60), ("a2", 0.6, 4, 150)], "b": [("b1", 1.0, 6, 80), ("b2", 0.7, 3, 200)]}
    system = make_system(tasks, [{"source": "a", "target": "b", "factor": 1.7}], demand=8000, latency_slo=40,
                         accuracy_slo=0.5)
    result = solve(system, gpus=40)
    cost = result.solver.cost
    weighted = (7 * 40 + 1) * cost.gpus + cost.slices
    assert OPTIONS.mip_gap * weighted >= 5  # what the relative gap left unproven
    assert cost.proven and (cost.gpus, cost.slices) == (cost.gpus_lower_bound, cost.slices_lower_bound)
    assert (cost.gpus, cost.slices) == (result.gpus_used, result.slices_used)
    assert result.solver.time_limited == []


def _solves(monkeypatch) -> list[str]:
    """The names of the solves HiGHS runs, in order."""
    from tessera.planner.solve import _StagedSolver

    solved: list[str] = []
    stage_solve = _StagedSolver._solve

    def recording(self, name, *args, **kwargs):
        solved.append(name)
        return stage_solve(self, name, *args, **kwargs)

    monkeypatch.setattr(_StagedSolver, "_solve", recording)
    return solved


def test_a_pool_shown_too_small_by_the_relaxation_needs_no_full_solve_to_prove_it(monkeypatch):
    solved = _solves(monkeypatch)
    result = solve(make_system(ONE_TASK, demand=2000), gpus=1)
    assert not result.fully_served
    # all demand: only the relaxation (infeasible, so is the full model, with no "cost" solve after it);
    # then the most served and the cost, each proven by its relax-and-fix start
    assert solved == ["relaxed", "relaxed", "rounded", "relaxed", "rounded"]


def _gpu_and_slice_bounds_per_stage(monkeypatch) -> dict[str, list[tuple[float, ...]]]:
    """Solve name -> (GPUs' lower, upper, slices' lower, upper bound) in HiGHS as each of its solves starts."""
    from tessera.planner.solve import _StagedSolver

    bounds: dict[str, list[tuple[float, ...]]] = {}
    stage_solve = _StagedSolver._solve

    def recording(self, name, *args, **kwargs):
        lp, m = self.highs.h.getLp(), self.milp.m
        gpus, slices = self.highs.columns([m.gpus_used, m.slices_used])
        bounds.setdefault(name, []).append(
            (lp.col_lower_[gpus], lp.col_upper_[gpus], lp.col_lower_[slices], lp.col_upper_[slices]))
        return stage_solve(self, name, *args, **kwargs)

    monkeypatch.setattr(_StagedSolver, "_solve", recording)
    return bounds


TWO_VARIANTS = {"t": [("v", 1.0, 10, 100), ("w", 0.9, 10, 200)]}


def test_after_a_proven_cost_the_later_stages_search_only_plans_of_its_gpus_and_slices(monkeypatch):
    bounds = _gpu_and_slice_bounds_per_stage(monkeypatch)
    result = solve(make_system(TWO_VARIANTS, demand=500))
    assert result.solver.cost.proven
    gpus, slices = result.gpus_used, result.slices_used
    # the accuracy stage's own relax-and-fix start (which proves it here)
    assert bounds["relaxed"][-1] == bounds["rounded"][-1] == (gpus, gpus, slices, slices)


def test_the_cost_stage_searches_gpu_counts_between_relax_and_fix_bound_and_start(monkeypatch):
    from tessera.planner.solve import _StagedSolver

    # Without the start's proof the cost stage solves the MIP, from the start's GPUs down to its bound's.
    monkeypatch.setattr(_StagedSolver, "_proven_by_start", lambda *args: None)
    bounds = _gpu_and_slice_bounds_per_stage(monkeypatch)
    result = solve(make_system(TWO_VARIANTS, demand=500), gpus=3)
    assert bounds["relaxed"][0][:2] == (0, 3)
    assert bounds["cost"][0][:2] == (result.gpus_used, result.gpus_used)


def test_the_accuracy_tie_break_after_a_proven_cost_is_proven_by_its_own_relax_and_fix_start(monkeypatch):
    solved = _solves(monkeypatch)
    # w serves twice v's load per slice: only w is that cheap, and the tie-break has to prove it
    result = solve(make_system(TWO_VARIANTS, demand=500))
    assert result.solver.cost.proven
    # the cost's relaxation and start, then the accuracy's, whose bound proves its start: no full MIP
    assert solved == ["relaxed", "rounded", "relaxed", "rounded"]
    assert result.solver.stages == ["cost", "accuracy"]


def test_the_accuracy_stage_gets_its_own_start_only_where_the_cost_start_came_within_a_gpu_of_its_bound():
    from types import SimpleNamespace

    from tessera.planner.solve import StageResult, _start_within_a_gpu

    cost, milp = object(), SimpleNamespace(gpu_weight=29)  # 4 GPUs: 7 x 4 + 1

    def within(start: float, bound: float) -> bool:
        solver = SimpleNamespace(relaxed=(cost, bound), rounded=StageResult("rounded", start, start, 0.0, "Optimal"))
        return _start_within_a_gpu(solver, milp, cost)

    # 4 H100s at 80% fill: start 143, bound 142 (the accuracy's own start proves it); 120 H100s: start
    # 84,800, bound 83,874, more than a GPU's 841 apart (its accuracy's relaxed variants do not fit)
    assert within(143, 142) and within(170, 141.5)
    assert not within(171, 142)
