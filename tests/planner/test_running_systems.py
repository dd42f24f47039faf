"""What already runs, in a re-plan others caused (issue 28 item 6): plan()'s `running` and NodeState.kept_for.

One H100 (7 compute slices) and the hand-profiled systems of test_solve: 500 requests/s at 100 per slice
take 6 slices, so two such systems cannot both be served. Precedence (issue 29 item 2): quota, then
priority, then what already runs.
"""

import pytest

from tessera.planner.catalog import gpu_product
from tessera.planner.checker import check_plan
from tessera.planner.model import Pool
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.quota import InstanceQuota
from tessera.planner.solve import plan

from .test_solve import GPU, ONE_TASK, OPTIONS, make_system

OLD = make_system(ONE_TASK, demand=500, name="old")
NEW = make_system(ONE_TASK, demand=500, name="new")


def served(result, name: str) -> float:
    return next(s.served_rps for s in result.systems if s.system == name)


def solve(systems, running, pool=None, quotas=()):
    return plan(systems, pool or Pool(gpu=GPU, gpus=1), build_profile_store(systems, GPU), options=OPTIONS,
                quotas=quotas, running=running)


@pytest.mark.parametrize("runs", ["old", "new"])
def test_a_running_system_keeps_its_served_fraction_and_the_other_gets_what_is_left(runs):
    """Either way round, so it is the running system that decides, not the order or the names."""
    other = "new" if runs == "old" else "old"
    result = solve([OLD, NEW], {runs: 1.0})
    assert served(result, runs) == pytest.approx(500)
    assert served(result, other) < 500 * 0.5
    assert "running" in result.solver.stages


def test_a_running_system_is_held_at_the_fraction_it_had_not_more():
    result = solve([OLD, NEW], {"old": 0.6})
    assert served(result, "old") >= 500 * 0.6 - 1e-3
    assert served(result, "new") > 500 - served(solve([OLD, NEW], {"old": 1.0}), "old") - 1e-3


def test_a_higher_priority_system_comes_before_what_runs():
    high = NEW.model_copy(update={"pool_priority": 10})
    result = solve([OLD, high], {"old": 1.0})
    assert served(result, "new") == pytest.approx(500)
    assert served(result, "old") < 500 * 0.5


def test_a_quota_comes_before_what_runs_and_the_plan_still_serves_the_rest():
    """Old may run two 1g.10gb instances and nothing else: its floor cannot be held, and the solve goes on."""
    quotas = [InstanceQuota(systems=frozenset({"old"}), mig_profile=p.name, limit=2 if p.name == "1g.10gb" else 0)
              for p in gpu_product(GPU).profiles]
    result = solve([OLD, NEW], {"old": 1.0}, quotas=quotas)
    assert served(result, "old") == pytest.approx(200 / 1.1, rel=1e-3)
    assert served(result, "new") > 500 * 0.5


def test_a_node_kept_for_running_systems_keeps_its_layout_and_its_free_instances_serve_others():
    # n1 runs `old` on one of its 1g.10gb instances; a new plan would rather use 3g.40gb: kept, it may not
    kept = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{"1g.10gb": 7}], kept_for=["old"])])
    small = make_system(ONE_TASK, demand=100, name="old")
    result = plan([small, NEW], kept, build_profile_store([small, NEW], GPU), options=OPTIONS,
                  running={"old": 1.0})
    assert [g.layout for g in result.gpus] == [[("1g.10gb", 7)]]
    assert served(result, "old") == pytest.approx(100)
    assert served(result, "new") > 0
    free = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{}])])
    assert plan([small, NEW], free, build_profile_store([small, NEW], GPU), options=OPTIONS).gpus[0].layout != \
        [("1g.10gb", 7)], "the free node would be partitioned otherwise: the check would be vacuous"


def test_the_checker_refuses_a_plan_that_changes_a_node_kept_for_running_systems():
    free = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{}])])
    result = plan([NEW], free, build_profile_store([NEW], GPU), options=OPTIONS)
    kept = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{"1g.10gb": 7}], kept_for=["old"])])
    errors = check_plan(result, [NEW], kept, build_profile_store([NEW], GPU), options=OPTIONS)
    assert any("kept for running systems" in e for e in errors), errors


def test_a_system_a_node_is_kept_for_keeps_its_replicas_there_though_a_free_node_would_be_cheaper():
    """`old` runs on n1 (its layout applied, kept for it); `new` takes n2: a plan putting both on n2 would use one
    GPU fewer, but moving `old` there is a needless move of what runs."""
    small = make_system(ONE_TASK, demand=100, name="old")
    current = plan([small], NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{}])]),
                   build_profile_store([small], GPU), options=OPTIONS)
    n1 = NodeState(name="n1", gpus=[dict(current.gpus[0].layout)])  # as applied
    tiny = make_system(ONE_TASK, demand=100, name="new")
    pool = NodePool(gpu=GPU, nodes=[n1.model_copy(update={"kept_for": ["old"]}), NodeState(name="n2", gpus=[{}])])
    result = plan([small, tiny], pool, build_profile_store([small, tiny], GPU), options=OPTIONS, current=current,
                  running={"old": 1.0})
    where = {(g.node, g.device, i.config) for g in result.gpus for i in g.instances if i.system == "old"}
    assert where == {(g.node, g.device, i.config) for g in current.gpus for i in g.instances if i.system == "old"}
    assert served(result, "new") == pytest.approx(100)
