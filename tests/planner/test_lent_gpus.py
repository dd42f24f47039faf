"""GPUs lent only to systems above a priority (NodeState.usable_above; issue 29 item 1, issue 30 item 7).

An AdapterPool of poolPriority p lends its GPUs to the compound systems that outrank it: only systems of
priority > p may use them. One H100 per node (7 compute slices); a system of 500 requests/s at 100 per slice
takes 6 slices, so it needs one whole GPU.
"""

import random

import pytest
from pydantic import ValidationError

from tessera.planner.checker import check_plan
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import plan

from .test_solve import GPU, ONE_TASK, OPTIONS, make_system

LOW = make_system(ONE_TASK, demand=500, name="low", pool_priority=5)
HIGH = make_system(ONE_TASK, demand=500, name="high", pool_priority=10)


def pool(lent_above: int | None = 5) -> NodePool:
    """n1 free for all; n2's GPU lent only to systems above `lent_above` (None: free for all)."""
    n2 = NodeState(name="n2", gpus=[{}], usable_above={} if lent_above is None else {0: lent_above})
    return NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{}]), n2])


def solve(systems, nodes, current=None):
    return plan(systems, nodes, build_profile_store(systems, GPU), options=OPTIONS, current=current)


def nodes_of(result, system: str) -> set[str]:
    return {g.node for g in result.gpus for i in g.instances if i.system == system}


def served(result, system: str) -> float:
    return next(s.served_rps for s in result.systems if s.system == system)


def test_a_system_at_or_below_the_threshold_never_gets_a_lent_gpu():
    """Two GPUs' worth of demand: with n2 lent above its priority, it gets n1 only and serves what fits there."""
    big = LOW.model_copy(update={"demand_rps": 1000})
    assert nodes_of(solve([big], pool(lent_above=None)), "low") == {"n1", "n2"}, "else the check is vacuous"
    result = solve([big], pool(lent_above=5))
    assert nodes_of(result, "low") == {"n1"}
    assert served(result, "low") < 1000


def test_a_system_above_the_threshold_takes_a_lent_gpu_when_it_needs_it():
    result = solve([LOW, HIGH], pool(lent_above=5))
    assert "n2" in nodes_of(result, "high")
    assert nodes_of(result, "low") == {"n1"}
    assert served(result, "high") == pytest.approx(500) and served(result, "low") == pytest.approx(500)


def test_a_replica_running_on_a_gpu_lent_past_its_priority_moves_off_it():
    current = solve([LOW], NodePool(gpu=GPU, nodes=[NodeState(name="n2", gpus=[{}])]))
    applied = dict(current.gpus[0].layout)
    nodes = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{}]),
                                     NodeState(name="n2", gpus=[applied], usable_above={0: 5})])
    result = solve([LOW], nodes, current=current)
    assert nodes_of(result, "low") == {"n1"}


def test_the_checker_refuses_a_plan_that_puts_a_system_at_or_below_the_threshold_on_a_lent_gpu():
    result = solve([LOW], NodePool(gpu=GPU, nodes=[NodeState(name="n2", gpus=[{}])]))
    assert check_plan(result, [LOW], NodePool(gpu=GPU, nodes=[NodeState(name="n2", gpus=[{}])]),
                      build_profile_store([LOW], GPU), options=OPTIONS) == []
    lent = NodePool(gpu=GPU, nodes=[NodeState(name="n2", gpus=[{}], usable_above={0: 5})])
    errors = check_plan(result, [LOW], lent, build_profile_store([LOW], GPU), options=OPTIONS)
    assert any("only systems of poolPriority above 5" in e and "low (poolPriority 5)" in e for e in errors), errors


def test_a_lent_gpu_must_be_one_of_the_nodes_gpus():
    with pytest.raises(ValidationError, match="node n2 usable_above: it has no GPUs \\[1\\]"):
        NodePool(gpu=GPU, nodes=[NodeState(name="n2", gpus=[{}], usable_above={1: 5})])


def random_case(seed: int) -> tuple[list, NodePool]:
    """Three priorities, GPUs free or lent above 0 or 5, on nodes of one or two GPUs, some partitioned."""
    rng = random.Random(seed)
    systems = [make_system(ONE_TASK, demand=rng.choice([100, 300, 500, 800]), name=f"s{i}",
                           pool_priority=rng.choice([0, 5, 10])) for i in range(rng.randint(2, 4))]
    nodes = []
    for n in range(rng.randint(2, 3)):
        gpus = rng.randint(1, 2)
        lent = {d: above for d in range(gpus) if (above := rng.choice([None, 0, 5])) is not None}
        nodes.append(NodeState(name=f"n{n}", gpus=[rng.choice([{}, {"1g.10gb": 7}, {"3g.40gb": 2}])
                                                   for _ in range(gpus)], usable_above=lent))
    return systems, NodePool(gpu=GPU, nodes=nodes)


def test_with_several_priorities_and_thresholds_every_plan_places_what_the_milp_counted_and_passes_the_checker():
    """The MILP's counts per level are exact: the assignment finds a placement (else PlannerBug) that the checker
    inside plan() passes; and the thresholds changed what was served somewhere (else the check is vacuous)."""
    changed = 0
    for seed in range(8):
        systems, nodes = random_case(seed)
        lent = solve(systems, nodes)
        for gpu in lent.gpus:
            above = nodes.node(gpu.node).usable_above.get(gpu.device)
            assert all(s.pool_priority > above for s in systems for i in gpu.instances
                       if above is not None and i.system == s.name)
        free = solve(systems, nodes.model_copy(update={"nodes": [
            n.model_copy(update={"usable_above": {}}) for n in nodes.nodes]}))
        changed += any(served(lent, s.name) != pytest.approx(served(free, s.name)) for s in systems)
    assert changed
