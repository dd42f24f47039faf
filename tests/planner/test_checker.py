"""The plan checker accepts a valid plan and names every kind of violation.

The valid plan is built by hand for a two-task chain on one H100: a detector
(det-l) on a 3g.40gb instance with batch 4, and a classifier on two 1g.10gb
instances (batch 1) plus one 2g.20gb instance with two MPS processes
(batch 2). Each test breaks one thing and looks for the message about it.
"""

from __future__ import annotations

import itertools
import math

import pytest

from tessera.planner.catalog import CATALOG, valid_layouts
from tessera.planner.checker import check_plan, layout_is_valid, layout_placement
from tessera.planner.features import Features
from tessera.planner.model import Edge, Pool, Slo, SystemSpec, Task, Variant
from tessera.planner.plan import (ConfigPlan, GpuPlan, InstancePlan, PathPlan, Plan, SolverReport, SystemSummary,
                                  TaskPlan)
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

GPU = "H100-80GB"


def segment(profile: str, mps: int = 1) -> SegmentType:
    return SegmentType(gpu=GPU, mig_profile=profile, mps=mps)


def system(**changes) -> SystemSpec:
    spec = dict(
        name="cars",
        tasks=[
            Task(name="det", variants=[Variant(name="det-s", accuracy=0.8, memory_gb=8),
                                       Variant(name="det-l", accuracy=0.9, memory_gb=20)]),
            Task(name="cls", variants=[Variant(name="cls-a", accuracy=0.95, memory_gb=5)]),
        ],
        edges=[Edge(source="det", target="cls", factor=2, factor_by_variant={"det-l": 3})],
        slo=Slo(latency_ms=200, accuracy=0.8),
        demand_rps=100,
    )
    spec.update(changes)
    return SystemSpec(**spec)


POOL = Pool(gpu=GPU, gpus=2)


def store() -> ProfileStore:
    s = ProfileStore()
    s.add("det-l", segment("3g.40gb"), 4, Profile(latency_ms=20, throughput_rps=400, source=ProfileSource.GIVEN))
    s.add("cls-a", segment("1g.10gb"), 1, Profile(latency_ms=10, throughput_rps=150, source=ProfileSource.GIVEN))
    s.add("cls-a", segment("2g.20gb", 2), 2, Profile(latency_ms=15, throughput_rps=200, source=ProfileSource.GIVEN))
    return s


def valid_plan() -> Plan:
    det_config = ConfigPlan(segment=segment("3g.40gb"), batch=4, replicas=1, batch_latency_ms=20,
                            segment_throughput_rps=400, load_rps=100, stage_latency_ms=50,
                            source=ProfileSource.GIVEN)
    cls_small = ConfigPlan(segment=segment("1g.10gb"), batch=1, replicas=2, batch_latency_ms=10,
                           segment_throughput_rps=150, load_rps=200, stage_latency_ms=20, source=ProfileSource.GIVEN)
    cls_mps = ConfigPlan(segment=segment("2g.20gb", 2), batch=2, replicas=1, batch_latency_ms=15,
                         segment_throughput_rps=200, load_rps=100, stage_latency_ms=35, source=ProfileSource.GIVEN)
    return Plan(
        gpu=GPU, pool_gpus=2, features="A+S+T", headroom=0.1,
        tasks=[
            TaskPlan(system="cars", task="det", variant="det-l", normalised_accuracy=1.0, demand_rps=100,
                     budget_ms=100, stage_latency_ms=50, configs=[det_config]),
            TaskPlan(system="cars", task="cls", variant="cls-a", normalised_accuracy=1.0, demand_rps=300,
                     budget_ms=100, stage_latency_ms=35, configs=[cls_small, cls_mps]),
        ],
        gpus=[GpuPlan(index=0, layout=[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)], instances=[
            InstancePlan(mig_profile="3g.40gb", system="cars", task="det", config=0),
            InstancePlan(mig_profile="1g.10gb", system="cars", task="cls", config=0),
            InstancePlan(mig_profile="1g.10gb", system="cars", task="cls", config=0),
            InstancePlan(mig_profile="2g.20gb", system="cars", task="cls", config=1),
        ])],
        paths=[PathPlan(system="cars", tasks=["det", "cls"], latency_ms=85, budget_ms=200, accuracy=1.0)],
        systems=[SystemSummary(system="cars", demand_rps=100, served_rps=100, latency_slo_ms=200,
                               worst_path_latency_ms=85, accuracy_slo=0.8, worst_path_accuracy=1.0)],
        gpus_used=1, slices_used=7, profile_sources={"given": 3},
        solver=SolverReport(status="hand-made", stages=[], objective={}, mip_gap=0, build_s=0, solve_s=0,
                            variables=0, constraints=0),
    )


def check(plan: Plan, spec: SystemSpec | None = None, pool: Pool = POOL, with_store: bool = True,
          features: Features = Features()) -> list[str]:
    return check_plan(plan, [spec or system()], pool, store() if with_store else None, features)


def update_task(plan: Plan, index: int, **changes) -> Plan:
    tasks = list(plan.tasks)
    tasks[index] = tasks[index].model_copy(update=changes)
    return plan.model_copy(update={"tasks": tasks})


def update_config(plan: Plan, task: int, config: int, **changes) -> Plan:
    configs = list(plan.tasks[task].configs)
    configs[config] = configs[config].model_copy(update=changes)
    return update_task(plan, task, configs=configs)


def update_gpu(plan: Plan, index: int, **changes) -> Plan:
    gpus = list(plan.gpus)
    gpus[index] = gpus[index].model_copy(update=changes)
    return plan.model_copy(update={"gpus": gpus})


def assert_names(errors: list[str], *fragments: str) -> None:
    assert errors, "the checker found nothing wrong"
    for fragment in fragments:
        assert any(fragment in e for e in errors), f"no message mentions {fragment!r}: {errors}"


def test_hand_made_plan_is_valid():
    assert check(valid_plan()) == []
    assert check(valid_plan(), with_store=False) == []


def test_unknown_variant():
    assert_names(check(update_task(valid_plan(), 0, variant="det-xl")), "variant 'det-xl' is not one of")


def test_less_accurate_variant_without_accuracy_scaling():
    plan = update_task(valid_plan(), 0, variant="det-s", normalised_accuracy=0.8 / 0.9)
    plan = update_task(plan, 1, demand_rps=200)  # det-s doubles, det-l triples
    plan = plan.model_copy(update={"features": "S+T"})
    errors = check(plan, with_store=False, features=Features(accuracy_scaling=False))
    assert_names(errors, "accuracy scaling (A) is off")


def test_duplicate_task_and_unknown_task():
    plan = valid_plan()
    extra = plan.tasks[0].model_copy(update={"task": "ocr"})
    errors = check(plan.model_copy(update={"tasks": plan.tasks + [plan.tasks[0], extra]}))
    assert_names(errors, "appears more than once", "ocr, which no system spec has")


def test_missing_task_while_serving():
    plan = valid_plan()
    assert_names(check(plan.model_copy(update={"tasks": plan.tasks[:1]})), "have no plan")


def test_demand_not_recomputed_from_edges():
    # cls gets 2 x det's demand, but det-l's factor is 3
    plan = update_task(valid_plan(), 1, demand_rps=200)
    assert_names(check(plan), "demand 200", "should be 300")


def test_served_more_than_demand():
    plan = valid_plan()
    summary = plan.systems[0].model_copy(update={"served_rps": 150})
    assert_names(check(plan.model_copy(update={"systems": [summary]})), "outside [0, demand")


def test_partial_service_scales_demand():
    plan = valid_plan()
    summary = plan.systems[0].model_copy(update={"served_rps": 50})
    errors = check(plan.model_copy(update={"systems": [summary]}))
    assert_names(errors, "should be 50", "should be 150")


def test_loads_do_not_add_up_to_demand():
    assert_names(check(update_config(valid_plan(), 1, 1, load_rps=90)), "add up to", "routing")


def test_throughput_bound():
    # 2 x 150 / 1.1 = 272.7 rps at most on the 1g.10gb replicas
    plan = update_config(valid_plan(), 1, 0, load_rps=280)
    plan = update_config(plan, 1, 1, load_rps=20, stage_latency_ms=15 + 100)
    assert_names(check(plan), "throughput: load 280")


def test_batch_fill_lower_bound():
    # 2 processes need 2 x 1 x 1000 / (100 - 15) = 23.5 rps to fill batches of 2 within 100 ms
    plan = update_config(valid_plan(), 1, 1, load_rps=20, stage_latency_ms=115)
    plan = update_config(plan, 1, 0, load_rps=280)
    assert_names(check(plan), "batch fill", "exceeds the budget")


def test_twice_batch_latency_over_budget():
    plan = update_task(valid_plan(), 0, budget_ms=30)
    assert_names(check(plan), "2 x batch latency 20", "batch fill")


def test_claimed_stage_latency_wrong():
    plan = update_config(valid_plan(), 0, 0, stage_latency_ms=40)
    assert_names(check(plan), "stage latency 40", "should be 50")


def test_task_stage_latency_is_slowest_config():
    plan = update_task(valid_plan(), 1, stage_latency_ms=20)
    assert_names(check(plan), "its slowest configuration's")


def test_budget_not_a_level():
    assert_names(check(update_task(valid_plan(), 0, budget_ms=97)), "not one of the 20 budget levels")


def test_budget_without_task_budgeting_is_equal_split():
    plan = valid_plan().model_copy(update={"features": "A+S"})
    plan = update_task(plan, 0, budget_ms=110)
    plan = update_task(plan, 1, budget_ms=90)
    errors = check(plan, features=Features(task_budgeting=False))
    assert_names(errors, "equal split 100")


def test_path_budgets_over_slo():
    plan = update_task(valid_plan(), 0, budget_ms=150)
    plan = plan.model_copy(update={"paths": [plan.paths[0].model_copy(update={"budget_ms": 250})]})
    assert_names(check(plan), "budgets add up to 250", "over the latency SLO")


def test_path_latency_over_slo():
    spec = system(slo=Slo(latency_ms=80, accuracy=0.8))
    plan = update_task(valid_plan(), 0, budget_ms=40)
    plan = update_task(plan, 1, budget_ms=40)
    assert_names(check(plan, spec), "exceeds the latency SLO 80")


def test_path_accuracy_below_slo():
    spec = system(
        tasks=[system().tasks[0], Task(name="cls", variants=[Variant(name="cls-a", accuracy=0.95, memory_gb=5),
                                                             Variant(name="cls-b", accuracy=1.0, memory_gb=5)])],
        slo=Slo(latency_ms=200, accuracy=0.97),
    )
    errors = check(valid_plan(), spec)
    assert_names(errors, "below the accuracy SLO 0.97", "normalised accuracy 1.0 should be 0.95")


def test_claimed_path_figures_wrong():
    plan = valid_plan()
    path = plan.paths[0].model_copy(update={"latency_ms": 70, "accuracy": 0.9})
    summary = plan.systems[0].model_copy(update={"worst_path_latency_ms": 70})
    errors = check(plan.model_copy(update={"paths": [path], "systems": [summary]}))
    assert_names(errors, "its latency is 70", "its accuracy is 0.9", "worst path latency 70")


def test_missing_path():
    assert_names(check(valid_plan().model_copy(update={"paths": []})), "missing from the plan's paths")


def test_memory_does_not_fit():
    spec = system(tasks=[system().tasks[0], Task(name="cls", variants=[Variant(name="cls-a", accuracy=0.95,
                                                                                memory_gb=12)])])
    # 1g.10gb has 9.75 GB; 2 MPS processes x 12 GB > 19.62 GB
    assert_names(check(valid_plan(), spec), "memory: 1 processes x 12", "memory: 2 processes x 12")


def test_layout_cannot_be_placed():
    plan = valid_plan()
    gpu = plan.gpus[0]
    instances = gpu.instances + [InstancePlan(mig_profile="1g.10gb")]  # 8 compute slices
    plan = update_gpu(plan, 0, layout=[("1g.10gb", 3), ("2g.20gb", 1), ("3g.40gb", 1)], instances=instances)
    assert_names(check(plan), "cannot be placed", "compute slices")


def test_layout_overlapping_memory():
    # two 3g.40gb fill all eight memory slices; no room for a 1g.10gb though compute is 7
    plan = valid_plan()
    instances = [InstancePlan(mig_profile="3g.40gb", system="cars", task="det", config=0),
                 InstancePlan(mig_profile="3g.40gb"), InstancePlan(mig_profile="1g.10gb")]
    plan = update_gpu(plan, 0, layout=[("3g.40gb", 2), ("1g.10gb", 1)], instances=instances)
    assert_names(check(plan), "cannot be placed")


def test_layout_does_not_match_instances():
    plan = update_gpu(valid_plan(), 0, layout=[("1g.10gb", 1), ("2g.20gb", 1), ("3g.40gb", 1)])
    assert_names(check(plan), "does not match its instances")


def test_replicas_do_not_match_instances():
    plan = update_config(valid_plan(), 1, 0, replicas=3)
    assert_names(check(plan), "3 replicas but 2 MIG instances")


def test_instance_of_wrong_profile():
    plan = valid_plan()
    instances = list(plan.gpus[0].instances)
    instances[0] = instances[0].model_copy(update={"mig_profile": "4g.40gb"})
    plan = update_gpu(plan, 0, layout=[("1g.10gb", 2), ("2g.20gb", 1), ("4g.40gb", 1)], instances=instances)
    assert_names(check(plan), "a 4g.40gb instance runs cars/det config 0, which needs 3g.40gb")


def test_instance_of_unknown_config():
    plan = valid_plan()
    instances = list(plan.gpus[0].instances)
    instances[0] = instances[0].model_copy(update={"config": 5})
    assert_names(check(update_gpu(plan, 0, instances=instances)), "which the plan does not have")


def test_more_gpus_than_pool():
    plan = valid_plan()
    second = GpuPlan(index=1, layout=[("7g.80gb", 1)], instances=[InstancePlan(mig_profile="7g.80gb")])
    plan = plan.model_copy(update={"gpus": plan.gpus + [second], "gpus_used": 2, "slices_used": 14})
    assert check(plan) == []  # an idle instance is wasteful, not invalid
    errors = check(plan, pool=Pool(gpu=GPU, gpus=1))
    assert_names(errors, "lists 2 GPUs, the pool has 1", "outside the pool")


def test_gpus_and_slices_used_consistent():
    errors = check(valid_plan().model_copy(update={"gpus_used": 2, "slices_used": 6}))
    assert_names(errors, "says 2 GPUs are used", "says 6 compute slices")


def test_profile_figures_match_store():
    plan = update_config(valid_plan(), 0, 0, batch_latency_ms=18, stage_latency_ms=48)
    plan = update_task(plan, 0, stage_latency_ms=48)
    plan = plan.model_copy(update={"paths": [plan.paths[0].model_copy(update={"latency_ms": 83})],
                                   "systems": [plan.systems[0].model_copy(update={"worst_path_latency_ms": 83})]})
    assert check(plan, with_store=False) == []
    assert_names(check(plan), "batch latency 18", "differs from the store's 20")
    plan = update_config(valid_plan(), 0, 0, source=ProfileSource.MEASURED)
    assert_names(check(plan), "profile source measured")
    plan = update_config(valid_plan(), 0, 0, batch=8)
    assert_names(check(plan), "no profile")


def test_a_configuration_states_the_spread_its_batch_latency_was_scaled_by():
    assert_names(check(update_config(valid_plan(), 0, 0, latency_spread=1.2)), "latency spread 1.2 differs from 1.0")


def test_whole_gpus_only_without_spatial_partitioning():
    plan = valid_plan().model_copy(update={"features": "A+T"})
    errors = check(plan, features=Features(spatial_partitioning=False))
    assert_names(errors, "spatial partitioning (S) is off")


def test_profile_sources_count_configurations():
    assert_names(check(valid_plan().model_copy(update={"profile_sources": {"given": 4}})), "profile sources")


def test_unknown_system_in_summaries_and_paths():
    plan = valid_plan()
    summary = plan.systems[0].model_copy(update={"system": "ghost"})
    path = plan.paths[0].model_copy(update={"system": "ghost"})
    errors = check(plan.model_copy(update={"systems": plan.systems + [summary], "paths": plan.paths + [path]}))
    assert_names(errors, "summarises system 'ghost'", "a path of system 'ghost'")


def test_wrong_pool():
    errors = check_plan(valid_plan(), [system()], Pool(gpu="A100-80GB", gpus=2), None)
    assert_names(errors, "pool has 'A100-80GB'")


def test_system_serving_nothing_need_not_list_tasks():
    plan = valid_plan()
    summary = plan.systems[0].model_copy(update={"served_rps": 0.0, "worst_path_latency_ms": 0.0})
    plan = plan.model_copy(update={"systems": [summary], "tasks": [], "paths": [], "gpus": [], "gpus_used": 0,
                                   "profile_sources": {},
                                   "slices_used": 0})
    assert check(plan) == []


# ---------------------------------------------------------------------------
# The checker's own MIG placement against the catalog's layouts
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("gpu_name", sorted(CATALOG))
def test_placement_agrees_with_catalog_layouts(gpu_name):
    gpu = CATALOG[gpu_name]
    catalog = {tuple(sorted(layout)) for layout in valid_layouts(gpu_name)}
    ours = set()
    for counts in itertools.product(*(range(p.max_count + 1) for p in gpu.profiles)):
        layout = {p.name: n for p, n in zip(gpu.profiles, counts) if n}
        if layout and layout_is_valid(gpu, layout):
            ours.add(tuple(sorted(layout.items())))
    assert ours == catalog


def test_placement_examples():
    gpu = CATALOG["H100-80GB"]
    assert layout_placement(gpu, {"7g.80gb": 1}) == [("7g.80gb", 0)]
    assert layout_is_valid(gpu, {"1g.10gb": 7})
    assert not layout_is_valid(gpu, {"1g.10gb": 8})
    assert layout_is_valid(gpu, {"4g.40gb": 1, "3g.40gb": 1})
    assert not layout_is_valid(gpu, {"4g.40gb": 1, "2g.20gb": 2})  # 4g takes 0-3; 2g only starts at 0, 2, 4
    assert layout_is_valid(gpu, {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1})
    assert not layout_is_valid(gpu, {"3g.40gb": 2, "1g.10gb": 1})
    assert layout_is_valid(gpu, {"1g.20gb": 4}) and not layout_is_valid(gpu, {"1g.20gb": 4, "1g.10gb": 1})
    assert math.isclose(gpu.profile("1g.10gb").memory_gb, 9.75)
