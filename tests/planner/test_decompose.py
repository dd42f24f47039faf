"""Systems planned one at a time, packed together and checked as a whole (planner/decompose.py), else jointly."""

from pathlib import Path

from tessera.planner.checker import check_plan
from tessera.planner.contract import plan_outcome
from tessera.planner.decompose import DECOMPOSED, JOINT, JOINT_FALLBACK, plan_pool
from tessera.planner.model import Pool
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.quota import InstanceQuota, instances_under
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU = "H100-80GB"
JOINT_ONLY = PlannerOptions(decompose=False)


def two_systems(demand_rps: float, priorities: tuple[int, int] = (0, 0)):
    """Two single-model systems in two namespaces: at 3,000 requests/s each runs on one 3g instance alone, at
    6,000 on one 1g.10gb and two 2g.20gb (five slices: a GPU each alone, two together)."""
    (system,) = load_systems(EXAMPLES / "single-model.yaml")
    return [system.model_copy(update={"name": name, "demand_rps": demand_rps, "pool_priority": priority})
            for name, priority in zip(("team-a/one", "team-b/two"), priorities)]


def nodes(count: int, gpus: int = 1) -> NodePool:
    return NodePool(gpu=GPU, nodes=[NodeState(name=f"n{i}", gpus=[{}] * gpus) for i in range(count)])


def solve(systems, pool, options=PlannerOptions(), quotas=()):
    store = build_profile_store(systems, GPU)
    return plan_pool(systems, pool, store, options=options, quotas=quotas), store


def test_several_systems_on_a_fresh_pool_are_planned_apart_and_the_whole_passes_the_checker():
    systems = two_systems(3000)
    pool = nodes(2)
    plan, store = solve(systems, pool)
    assert plan.solver.method == DECOMPOSED
    assert plan.fully_served
    assert check_plan(plan, systems, pool, store) == []


def test_the_parts_share_a_gpu_and_cost_what_the_exact_joint_plan_costs():
    # On two GPUs the model is exact: the joint plan's cost is the optimum. Each part alone takes a GPU of its
    # own; packed, both 3g instances share one, as in the joint plan.
    systems = two_systems(3000)
    decomposed, _ = solve(systems, Pool(gpu=GPU, gpus=2))
    joint, _ = solve(systems, Pool(gpu=GPU, gpus=2), JOINT_ONLY)
    assert joint.solver.method == JOINT
    assert (decomposed.gpus_used, decomposed.slices_used) == (joint.gpus_used, joint.slices_used) == (1, 6)
    assert [s.served_rps for s in decomposed.systems] == [s.served_rps for s in joint.systems]


def test_parts_that_together_overcommit_the_pool_fall_back_to_the_joint_solve_and_priority_decides():
    systems = two_systems(6000, priorities=(0, 5))  # each fits the one GPU alone, both do not
    pool = nodes(1)
    plan, store = solve(systems, pool)
    assert plan.solver.method == JOINT_FALLBACK
    assert "do not fit the pool's 1 GPUs together" in plan.solver.fallback
    assert check_plan(plan, systems, pool, store) == []
    low, high = plan.systems
    assert high.served_rps >= high.demand_rps * (1 - 1e-6) and low.served_rps < low.demand_rps * 0.9


def test_a_quota_over_two_namespaces_parts_that_each_keep_it_but_not_together_falls_back_and_holds():
    systems = two_systems(6000)
    shared = InstanceQuota(systems=frozenset(s.name for s in systems), mig_profile="2g.20gb", limit=3,
                           source="shared quota")
    pool = nodes(2)
    plan, store = solve(systems, pool, quotas=[shared])
    assert plan.solver.method == JOINT_FALLBACK
    assert "over the quota of 3 (shared quota)" in plan.solver.fallback
    assert instances_under(shared, plan) <= 3
    assert check_plan(plan, systems, pool, store, quotas=[shared]) == []


def test_a_pool_with_a_plan_in_force_is_planned_jointly():
    systems = two_systems(3000)
    first, _ = solve(systems, nodes(2))
    store = build_profile_store(systems, GPU)
    replan = plan_pool(systems, nodes(2), store, current=first)
    assert replan.solver.method == JOINT


def test_the_operator_path_plans_decomposed_by_default_and_jointly_when_switched_off():
    systems = two_systems(3000)
    assert plan_outcome(systems, nodes(2)).plan.solver.method == DECOMPOSED
    assert plan_outcome(systems, nodes(2), options=JOINT_ONLY).plan.solver.method == JOINT
