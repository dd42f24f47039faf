"""Re-planning a pool of named nodes: current layouts kept where they can be, nodes that leave left.

Each test plans once on empty GPUs, writes the plan's layouts back into the
nodes' state as the operator would observe them once applied, changes one
input and plans again from the first plan.
"""

import pytest

from tessera.planner.model import SystemSpec
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.plan import Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import plan

from .test_solve import GPU, ONE_TASK, OPTIONS, make_system


def nodes(*sizes: int, **state) -> NodePool:
    return NodePool(gpu=GPU, nodes=[NodeState(name=f"n{i}", gpus=[{}] * size, **state.get(f"n{i}", {}))
                                    for i, size in enumerate(sizes, start=1)])


def applied(pool: NodePool, result: Plan, **changes) -> NodePool:
    """The pool after the operator applied `result`, with some nodes' state changed."""
    layouts = {(g.node, g.device): dict(g.layout) for g in result.gpus}
    return NodePool(gpu=pool.gpu, nodes=[
        node.model_copy(update={"gpus": [layouts.get((node.name, d), layout) for d, layout in enumerate(node.gpus)],
                                **changes.get(node.name, {})})
        for node in pool.nodes])


def solve(system: SystemSpec, pool: NodePool, current: Plan | None = None) -> Plan:
    return plan([system], pool, build_profile_store([system], GPU), options=OPTIONS, current=current)


def layouts(result: Plan) -> dict:
    return {(g.node, g.device): g.layout for g in result.gpus}


def occupants(result: Plan) -> dict:
    return {(g.node, g.device): [(i.mig_profile, i.task) for i in g.instances] for g in result.gpus}


def test_every_instance_sits_on_a_named_gpu_of_a_node():
    result = solve(make_system(ONE_TASK, demand=1900), nodes(2, 2, 2))
    assert result.fully_served and result.gpus_used == 3
    assert all(g.node in {"n1", "n2", "n3"} and g.device in (0, 1) for g in result.gpus)
    assert len(set(layouts(result))) == 3


def test_a_demand_change_alone_keeps_every_layout_and_replica():
    # 1900 and 1880 req/s both need 21 slices (x 1.1 headroom) of 100 req/s: three GPUs, many equally cheap layout sets.
    pool = nodes(2, 2, 2)
    before = solve(make_system(ONE_TASK, demand=1900), pool)
    after = solve(make_system(ONE_TASK, demand=1880), applied(pool, before), current=before)
    assert after.fully_served and (after.gpus_used, after.slices_used) == (before.gpus_used, before.slices_used)
    assert layouts(after) == layouts(before)
    assert occupants(after) == occupants(before)


def test_a_node_that_leaves_is_not_used_and_the_other_nodes_keep_their_layouts():
    pool = nodes(2, 2, 2)
    system = make_system(ONE_TASK, demand=1900)
    before = solve(system, pool)
    leaving = before.gpus[-1].node
    after = solve(system, applied(pool, before, **{leaving: {"cordoned_by": "others"}}), current=before)
    assert after.fully_served and after.gpus_used == before.gpus_used
    assert leaving not in {g.node for g in after.gpus}
    stayed = {key: layout for key, layout in layouts(before).items() if key[0] != leaving}
    assert stayed and all(layouts(after)[key] == layout for key, layout in stayed.items())
    assert all(occupants(after)[key] == occupants(before)[key] for key in stayed)


def test_a_node_tessera_cordoned_to_repartition_stays_in_the_pool():
    result = solve(make_system(ONE_TASK, demand=1900), nodes(2, 1, n1={"cordoned_by": "tessera"}))
    assert result.fully_served and {g.node for g in result.gpus} == {"n1", "n2"}


def test_gpus_whose_layout_is_unknown_are_not_planned_on():
    pool = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[None, {}]), NodeState(name="n2", gpus=[None])])
    result = solve(make_system(ONE_TASK, demand=1900), pool)
    assert result.pool_gpus == 1 and not result.fully_served
    assert [(g.node, g.device) for g in result.gpus] == [("n1", 1)]


def test_instances_held_by_others_stay_and_tessera_uses_only_the_rest():
    # n1's GPU has two 3g.40gb instances, one held by a pod tessera does not own: tessera may use the other
    # (3 slices, 300 req/s) but may not re-partition the GPU; 900 req/s x 1.1 need 10 slices: n2's 7 and that one.
    pool = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{"3g.40gb": 2}], held={"3g.40gb": 1}),
                                    NodeState(name="n2", gpus=[{}])])
    result = solve(make_system(ONE_TASK, demand=900), pool)
    assert result.fully_served and result.gpus_used == 2
    n1 = [g for g in result.gpus if g.node == "n1"]
    assert [g.layout for g in n1] == [[("3g.40gb", 2)]]
    assert sum(1 for i in n1[0].instances if i.task) == 1


def test_a_fully_held_node_offers_nothing():
    pool = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[{"7g.80gb": 1}], held={"7g.80gb": 1}),
                                    NodeState(name="n2", gpus=[{}])])
    result = solve(make_system(ONE_TASK, demand=300), pool)
    assert result.fully_served and [g.node for g in result.gpus] == ["n2"]


@pytest.mark.parametrize("demand", [100, 1900])
def test_a_plain_pool_and_the_same_gpus_on_nodes_cost_the_same(demand):
    from tessera.planner.model import Pool

    system = make_system(ONE_TASK, demand=demand)
    plain = plan([system], Pool(gpu=GPU, gpus=4), build_profile_store([system], GPU), options=OPTIONS)
    named = solve(system, nodes(2, 2))
    assert (named.gpus_used, named.slices_used) == (plain.gpus_used, plain.slices_used)
