"""Replicas-only re-solve: new demand on the same variants, configurations and MIG layouts (planner/resize.py).

A result is returned only when the planner's independent checker passes it,
so every non-None result below is also a checked plan.
"""

from pathlib import Path

import pytest

from tessera.planner.assignment import layout_of
from tessera.planner.model import Pool
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.resize import STATUS, resize_replicas
from tessera.planner.solve import plan
from tessera.planner.spec_file import load_systems

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-model.yaml"
DEMAND = 20_000.0


def scaled(systems, factor):
    return [s.model_copy(update={"demand_rps": DEMAND * factor}) for s in systems]


@pytest.fixture(scope="module")
def systems():
    return scaled(load_systems(EXAMPLE), 1.0)


@pytest.fixture(scope="module")
def store(systems):
    return build_profile_store(systems, "H100-80GB")


@pytest.fixture(scope="module")
def pool():
    return Pool(gpu="H100-80GB", gpus=8)


@pytest.fixture(scope="module")
def base(systems, store, pool):
    return plan(systems, pool, store)


def replicas(result):
    return sum(c.replicas for t in result.tasks for c in t.configs)


def test_a_scale_down_lowers_replicas_and_keeps_variants_and_layouts_and_adds_no_configuration(base, systems, store, pool):
    result = resize_replicas(base, scaled(systems, 0.5), pool, store)
    assert result is not None and result.solver.status == STATUS
    assert replicas(result) < replicas(base)
    for before, after in zip(base.tasks, result.tasks):  # a configuration may go, none comes
        assert after.variant == before.variant
        assert {(c.segment, c.batch) for c in after.configs} <= {(c.segment, c.batch) for c in before.configs}
    assert [layout_of(g) for g in result.gpus] == [layout_of(g) for g in base.gpus]
    assert result.fully_served


def test_kept_replicas_stay_on_their_instances(base, systems, store, pool):
    result = resize_replicas(base, scaled(systems, 0.8), pool, store)
    before = {(g.index, i): inst for g in base.gpus for i, inst in enumerate(g.instances) if inst.config is not None}
    after = {(g.index, i): inst for g in result.gpus for i, inst in enumerate(g.instances) if inst.config is not None}
    assert set(after) <= set(before)


def test_more_than_the_layouts_hold_needs_a_full_replan(base, systems, store, pool):
    assert resize_replicas(base, scaled(systems, 3.0), pool, store) is None


def test_a_scale_up_past_the_headroom_of_a_plan_without_idle_instances_needs_a_full_replan(base, systems, store,
                                                                                          pool):
    # The MILP counts slices, so its layouts hold only the instances it runs: 2% more demand than the
    # replicas carry at the headroom needs one more instance, and no current layout has one idle.
    assert all(i.config is not None for g in base.gpus for i in g.instances)
    assert resize_replicas(base, scaled(systems, 1.02), pool, store) is None


def test_a_scale_up_uses_idle_instances_of_gpus_partitioned_earlier(systems, store):
    spare = {"2g.20gb": 3}
    nodes = NodePool(gpu="H100-80GB", nodes=[NodeState(name="n0", gpus=[spare] * 8)])
    base = plan(systems, nodes, store)
    result = resize_replicas(base, scaled(systems, 1.5), nodes, store)
    assert result is not None and replicas(result) > replicas(base)
    before = {g.device: layout_of(g) for g in base.gpus}
    assert len(result.gpus) > len(base.gpus)
    for gpu in result.gpus:  # nothing re-partitioned: the plan's layouts, and the spare GPUs' own
        assert layout_of(gpu) == before.get(gpu.device, tuple(spare.items()))


def test_systems_that_came_or_went_need_a_full_replan(base, systems, store, pool):
    renamed = [s.model_copy(update={"name": "other"}) for s in systems]
    assert resize_replicas(base, renamed, pool, store) is None


def test_a_running_plan_serving_nothing_of_a_system_re_plans_in_full_rather_than_failing(base, systems, store, pool):
    # The planner serves as much as it can: a system whose SLO no choice reaches keeps its tasks with no
    # configuration (found by the closed loop of issue 31: A+S leaves ar-assistant so, and a resize raised KeyError).
    other = systems[0].model_copy(update={"name": "unserved"})
    empty = [t.model_copy(update={"system": other.name, "configs": []}) for t in base.tasks]
    summary = base.systems[0].model_copy(update={"system": other.name, "served_rps": 0.0})
    current = base.model_copy(update={"tasks": base.tasks + empty, "systems": base.systems + [summary]})
    assert resize_replicas(current, scaled([systems[0], other], 0.5), pool, store) is None


def two_namespaces(systems, a_rps: float, b_rps: float):
    """The example as two systems of two namespaces, as the operator keys them (namespace/name)."""
    (system,) = systems
    return [system.model_copy(update={"name": "x/a", "demand_rps": a_rps}),
            system.model_copy(update={"name": "y/b", "demand_rps": b_rps})]


def test_a_resize_never_serves_a_system_less_than_the_plan_in_force_it_serves_all_in_full_or_returns_none(
        systems, store):
    """The operator's replicas-only path (Reconciler.plan_without_solve) passes no floors for the running
    systems of other namespaces (running_decide.py): it needs none, because a resized plan serves every system's
    whole demand (the replica counts must carry each task's demand, or there is no resized plan and the pool
    re-plans in full, with the floors). So `y/b`'s served demand never falls when `x/a`'s moves, whether the plan
    in force served it in full (8 GPUs) or in part (1 GPU: a rise of `x/a` could only take from it)."""
    resized = 0
    for gpus in (8, 1):
        pool = NodePool(gpu="H100-80GB", nodes=[NodeState(name="n0", gpus=[{}] * gpus)])
        base = plan(two_namespaces(systems, 5_000, 5_000), pool, store)
        served = {s.system: s.served_rps for s in base.systems}
        assert gpus == 8 or served["y/b"] < 5_000, "the 1-GPU case needs a plan in force serving y/b in part"
        for a_rps in (2_500, 5_500, 50_000):
            result = resize_replicas(base, two_namespaces(systems, a_rps, 5_000), pool, store)
            if result is None:
                continue  # the full re-plan, with the floors
            resized += 1
            assert all(s.served_rps == s.demand_rps for s in result.systems), (gpus, a_rps, result.systems)
            assert {s.system: s.served_rps for s in result.systems}["y/b"] >= served["y/b"], (gpus, a_rps)
    assert resized >= 2, "the check needs resized plans"
