"""Systems planned one at a time, packed together and checked as a whole (planner/decompose.py), else jointly."""

import math
import os
import threading
import time
from pathlib import Path

import pytest

import tessera.planner.decompose as decompose
from tessera.planner.catalog import gpu_product
from tessera.planner.checker import check_plan
from tessera.planner.contract import plan_outcome
from tessera.planner.features import Features
from tessera.planner.decompose import DECOMPOSED, INCREMENTAL, JOINT, JOINT_FALLBACK, plan_pool
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


def test_a_replan_that_may_keep_no_part_is_joint():
    # A plan in force that records nothing it was planned from (made before it did) keeps no system's part.
    systems = two_systems(3000)
    first, _ = solve(systems, nodes(2))
    store = build_profile_store(systems, GPU)
    replan = plan_pool(systems, nodes(2), store, current=first.model_copy(update={"planned_from": {}}))
    assert replan.solver.method == JOINT


def test_the_operator_path_plans_decomposed_by_default_and_jointly_when_switched_off():
    systems = two_systems(3000)
    assert plan_outcome(systems, nodes(2)).plan.solver.method == DECOMPOSED
    assert plan_outcome(systems, nodes(2), options=JOINT_ONLY).plan.solver.method == JOINT


# -- re-plans: the parts of systems whose inputs are unchanged are kept (incremental) -----------------------------

def running_pool(plan, pool: NodePool) -> NodePool:
    """The pool as the plan in force left it: each GPU with the layout the plan gave it (the others blank)."""
    layouts = {(g.node, g.device): dict(g.layout) for g in plan.gpus}
    return pool.model_copy(update={"nodes": [node.model_copy(update={"gpus": [
        layouts.get((node.name, device), {}) for device in range(len(node.gpus))]}) for node in pool.nodes]})


def replan(systems, current, pool, options=PlannerOptions(), quotas=()):
    store = build_profile_store(systems, GPU)
    return plan_pool(systems, running_pool(current, pool), store, options=options, current=current,
                     quotas=quotas), store


def part_of(plan, system: str):
    """A system's tasks and the GPUs carrying its instances (with only its instances), as plain data."""
    gpus = [g.model_copy(update={"instances": [i for i in g.instances if i.system == system]}) for g in plan.gpus]
    return ([t.model_dump() for t in plan.tasks if t.system == system],
            [(g.node, g.device, g.model_dump()) for g in gpus if g.instances])


def gpus_of(plan, system: str) -> set:
    return {(g.node, g.device) for g in plan.gpus if any(i.system == system for i in g.instances)}


def test_a_replan_keeps_the_part_of_a_system_whose_inputs_are_unchanged_byte_for_byte():
    one, two = two_systems(3000)
    pool = nodes(3, gpus=2)
    first, _ = solve([one], pool)
    second, store = replan([one, two], first, pool)
    assert second.solver.method == INCREMENTAL and second.solver.kept == [one.name]
    assert part_of(second, one.name) == part_of(first, one.name)
    assert check_plan(second, [one, two], running_pool(first, pool), store) == []


def test_a_new_system_is_placed_on_gpus_the_running_ones_leave_free_and_nothing_running_moves():
    one, two = two_systems(3000)
    pool = nodes(3, gpus=2)
    first, _ = solve([one], pool)
    second, _ = replan([one, two], first, pool)
    assert second.solver.method == INCREMENTAL and second.fully_served
    # The node carrying the running part keeps its layouts: its blank GPU is not re-partitioned for the new part.
    assert {node for node, _ in gpus_of(second, two.name)}.isdisjoint({node for node, _ in gpus_of(first, one.name)})
    assert [(g.node, g.device, g.layout) for g in second.gpus if (g.node, g.device) in gpus_of(first, one.name)] == \
        [(g.node, g.device, g.layout) for g in first.gpus]


def test_an_incremental_plan_says_it_changes_no_serving_node_and_keeps_the_running_ones():
    one, two = two_systems(3000)
    pool = nodes(3, gpus=2)
    first, _ = solve([one], pool)
    second, _ = replan([one, two], first, pool)
    assert second.solver.method == INCREMENTAL
    assert second.changes is not None and second.changes.nodes_changed == []
    assert second.changes.nodes_kept == sorted({node for node, _ in gpus_of(first, one.name)})
    assert second.changes.summary == "changes 0 nodes (price 0.0)"


def test_a_new_system_takes_the_free_instances_a_removed_system_left_on_a_kept_gpu():
    # Two systems share one GPU (a 3g instance each); the second is removed and a third, alike, added: it takes the
    # freed instance, the GPU's layout stays, and the plan still uses one GPU.
    one, two = two_systems(3000)
    three = two.model_copy(update={"name": "team-c/three"})
    pool = Pool(gpu=GPU, gpus=2)
    first, _ = solve([one, two], pool)
    assert first.gpus_used == 1
    store = build_profile_store([one, three], GPU)
    second = plan_pool([one, three], pool, store, current=first)
    assert second.solver.method == INCREMENTAL and second.solver.kept == [one.name]
    assert second.gpus_used == 1 and gpus_of(second, three.name) == gpus_of(first, two.name)
    assert part_of(second, one.name) == part_of(first, one.name)


def test_a_changed_system_is_planned_again_while_the_unchanged_one_stays():
    one, two = two_systems(3000)
    pool = nodes(3, gpus=2)
    first, _ = solve([one, two], pool)
    grown = two.model_copy(update={"demand_rps": 6000})
    second, store = replan([one, grown], first, pool)
    assert second.solver.method == INCREMENTAL and second.solver.kept == [one.name]
    assert part_of(second, one.name) == part_of(first, one.name)
    (summary,) = [s for s in second.systems if s.system == grown.name]
    assert summary.served_rps == pytest.approx(6000)
    assert check_plan(second, [one, grown], running_pool(first, pool), store) == []


def test_a_system_whose_gpus_are_cordoned_is_not_kept_but_planned_again():
    one, two = two_systems(6000)  # five slices each: a GPU each, on nodes of their own
    pool = nodes(3)
    first, _ = solve([one, two], pool)
    (node,) = {node for node, _ in gpus_of(first, two.name)}
    now = running_pool(first, pool)
    now = now.model_copy(update={"nodes": [n.model_copy(update={"cordoned_by": "others"}) if n.name == node else n
                                           for n in now.nodes]})
    store = build_profile_store([one, two], GPU)
    second = plan_pool([one, two], now, store, current=first)
    assert second.solver.method == INCREMENTAL and second.solver.kept == [one.name]
    assert node not in {n for n, _ in gpus_of(second, two.name)}


def test_a_node_kept_for_a_running_system_keeps_its_layout_while_that_system_is_planned_again():
    # The caller keeps the node of `two` for it (NodeState.kept_for), but `two` changed: its part is planned
    # again, onto the node's own instances, whose layout stays (re-partitioning it would stop its pods).
    one, two = two_systems(6000)
    pool = nodes(3)
    first, _ = solve([one, two], pool)
    (node,) = {node for node, _ in gpus_of(first, two.name)}
    now = running_pool(first, pool)
    now = now.model_copy(update={"nodes": [n.model_copy(update={"kept_for": [two.name]}) if n.name == node else n
                                           for n in now.nodes]})
    changed = two.model_copy(update={"demand_rps": 5500})
    store = build_profile_store([one, changed], GPU)
    second = plan_pool([one, changed], now, store, current=first)
    assert second.solver.method == INCREMENTAL and second.solver.kept == [one.name]
    assert [(g.node, g.layout) for g in second.gpus if g.node == node] == \
        [(g.node, g.layout) for g in first.gpus if g.node == node]
    assert gpus_of(first, two.name) <= gpus_of(second, changed.name)  # still served there, where it fits


def test_a_new_system_that_does_not_fit_what_the_kept_parts_leave_falls_back_to_the_joint_solve():
    # One node of one GPU: the running system's node stays, so nothing is left for the new one; the joint solve
    # may re-partition and says why it was asked.
    one, two = two_systems(3000)
    pool = nodes(1)
    first, _ = solve([one], pool)
    second, store = replan([one, two], first, pool)
    assert second.solver.method == JOINT_FALLBACK
    assert "do not fit the 0 GPUs and 0 instances the kept parts leave free" in second.solver.fallback
    assert check_plan(second, [one, two], running_pool(first, pool), store) == []


def test_a_quota_the_kept_part_already_uses_leaves_the_new_part_short_and_the_joint_solve_plans():
    # The namespaces share quotas of exactly what the running system uses of each profile: the new part gets
    # what is left of them (nothing), is not served in full, and the joint solve says what the quotas allow.
    one, two = two_systems(3000)
    pool = nodes(3, gpus=2)
    first, _ = solve([one], pool)
    quotas = [InstanceQuota(systems=frozenset({one.name, two.name}), mig_profile=profile.name,
                            limit=sum(c.replicas for t in first.tasks for c in t.configs
                                      if c.segment.mig_profile == profile.name), source="shared quota")
              for profile in gpu_product(GPU).profiles]
    second, store = replan([one, two], first, pool, quotas=quotas)
    assert second.solver.method == JOINT_FALLBACK
    assert f"{two.name} alone is not served in full" in second.solver.fallback
    assert check_plan(second, [one, two], running_pool(first, pool), store, quotas=quotas) == []


def test_a_replan_with_decompose_off_is_joint():
    one, two = two_systems(3000)
    pool = nodes(3, gpus=2)
    first, _ = solve([one], pool)
    second, _ = replan([one, two], first, pool, JOINT_ONLY)
    assert second.solver.method == JOINT and second.solver.kept == []


# -- parts of systems identical but for the name are solved once ---------------------------------------------------

def counted_solves(monkeypatch) -> list[str]:
    """The names of the systems each solve the decomposition runs plans (the real solve, counted)."""
    solves: list[str] = []
    real = decompose.plan

    def counting(systems, *args, **kwargs):
        solves.append(",".join(s.name for s in systems))
        return real(systems, *args, **kwargs)
    monkeypatch.setattr(decompose, "plan", counting)
    return solves


def three_systems():
    """Two copies of one system in one namespace and a third of another demand."""
    one, two = two_systems(3000)
    return [one, two.model_copy(update={"name": "team-a/copy"}), two.model_copy(update={"demand_rps": 2000})]


def test_a_system_identical_to_another_but_for_the_name_is_not_solved_again(monkeypatch):
    systems = three_systems()
    solves = counted_solves(monkeypatch)
    plan, store = solve(systems, nodes(3))
    assert plan.solver.method == DECOMPOSED and plan.solver.reused == ["team-a/copy"]
    assert sorted(solves) == ["team-a/one", "team-b/two"]  # solved at once: in either order
    assert check_plan(plan, systems, nodes(3), store) == []


def test_a_reused_part_is_the_plan_the_systems_own_solve_gives():
    one, copy, _ = three_systems()
    store = build_profile_store([one, copy], GPU)
    parts = decompose._parts([one, copy], GPU, 3, store, Features(), PlannerOptions(), (), math.inf)
    own = decompose._part(copy, GPU, 3, store, Features(), PlannerOptions(), (), math.inf)
    timing = {"solver": {"build_s", "solve_s", "reused"}}
    assert parts[1].solver.reused == [copy.name]
    assert parts[1].model_dump(exclude=timing) == own.model_dump(exclude=timing)


def test_copies_under_different_quotas_are_each_solved(monkeypatch):
    systems = three_systems()
    capped = InstanceQuota(systems=frozenset({"team-a/copy"}), mig_profile="7g.80gb", limit=0, source="copy's quota")
    solves = counted_solves(monkeypatch)
    plan, _ = solve(systems, nodes(3), quotas=[capped])
    assert plan.solver.reused == []
    assert sorted(solves) == ["team-a/copy", "team-a/one", "team-b/two"]


def test_solved_once_copies_that_together_break_their_namespaces_quota_fall_back_to_the_joint_solve(monkeypatch):
    # The combined plan of reused parts goes through the independent checker like any: each copy alone keeps the
    # namespace's quota of three 2g.20gb instances (it takes two), the two together do not.
    one, two = two_systems(6000)
    systems = [one, two.model_copy(update={"name": "team-a/copy"})]
    shared = InstanceQuota(systems=frozenset(s.name for s in systems), mig_profile="2g.20gb", limit=3,
                           source="team-a's quota")
    solves = counted_solves(monkeypatch)
    plan, store = solve(systems, nodes(2), quotas=[shared])
    assert solves == ["team-a/one", "team-a/one,team-a/copy"]  # one part, then the joint solve
    assert plan.solver.method == JOINT_FALLBACK
    assert "over the quota of 3 (team-a's quota)" in plan.solver.fallback
    assert check_plan(plan, systems, nodes(2), store, quotas=[shared]) == []


# -- parts solved at once -------------------------------------------------------------------------------------------

def distinct_systems():
    """The three examples at distinct demands, under their own names: no two parts alike (each solved)."""
    examples = [s for name in ("traffic-analysis", "social-media", "ar-assistant")
                for s in load_systems(EXAMPLES / f"{name}.yaml")]
    return [example.model_copy(update={"name": f"team-{i}/{example.name}", "demand_rps": example.demand_rps * scale})
            for i, (example, scale) in enumerate(zip(examples * 2, (1.0, 1.0, 1.0, 0.5, 0.6, 0.7)))]


def test_parts_solved_at_once_give_each_system_the_plan_solved_one_after_another():
    systems = distinct_systems()
    pool = nodes(4, gpus=8)
    timing = {"solver": {"build_s", "solve_s"}}
    apart, _ = solve(systems, pool, PlannerOptions(parallel_parts=1))
    at_once, _ = solve(systems, pool, PlannerOptions(parallel_parts=2))
    assert apart.solver.method == at_once.solver.method == DECOMPOSED
    assert at_once.model_dump(exclude=timing) == apart.model_dump(exclude=timing)
    # not vacuous: every system's part differs from the others' (a part handed to the wrong system changes the plan)
    configs = [sorted((t.task, c.segment.mig_profile, c.batch, c.replicas, round(c.load_rps, 3)) for t in at_once.tasks
                       if t.system == s.name for c in t.configs) for s in systems]
    assert all(configs.count(c) == 1 for c in configs)


def test_parts_are_solved_by_as_many_threads_as_allowed_and_the_cores_give(monkeypatch):
    threads: set[str] = set()
    real = decompose.plan

    def in_thread(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)
    monkeypatch.setattr(decompose, "plan", in_thread)
    solve(distinct_systems()[:4], nodes(4, gpus=8), PlannerOptions(parallel_parts=2))
    assert len(threads) == min(2, len(os.sched_getaffinity(0)))


def test_answers_solved_at_once_keep_the_order_of_their_items_whichever_finishes_first():
    def slow_first(seconds: float) -> float:
        time.sleep(seconds)
        return seconds
    assert decompose._solved_at_once([0.3, 0.0, 0.1], slow_first, 2) == [0.3, 0.0, 0.1]


def test_the_first_items_error_in_order_is_raised_and_items_not_started_are_not_solved():
    started: list[int] = []

    def failing(item: int) -> int:
        started.append(item)
        time.sleep(0.3 if item == 0 else 0.0)
        if item in (0, 1):
            raise ValueError(f"item {item}")
        return item
    with pytest.raises(ValueError, match="item 0"):  # item 1 failed first, while item 0 still ran
        decompose._solved_at_once(list(range(8)), failing, 2)
    assert 7 not in started
