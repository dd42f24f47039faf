"""A re-plan on nodes that carry MIG instances prices each node it re-partitions (planner/change_cost.py).

The pools here are of one-GPU nodes whose GPUs carry a whole-GPU 7g
instance that an earlier plan, for high demand, runs replicas on (the
current plan); the demand then falls to what one 1g instance serves. With the cost stage's GPU weight W = 7 x GPUs
+ 1, a changed node costs (W + 7) x reconfigure_s / change_horizon_s, a
half with the options below.
"""

from rich.console import Console

from tessera.planner.model import SystemSpec
from tessera.planner.nodes import NodePool, NodeState
from tessera.planner.plan import Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions, plan
from tessera.render import summary_table

from .test_solve import GPU, ONE_TASK, OPTIONS, make_system

WHOLE = {"7g.80gb": 1}
HALF = OPTIONS.model_copy(update={"reconfigure_s": 60.0, "change_horizon_s": 120.0})
SMALL = make_system(ONE_TASK, demand=50)  # 55 req/s with headroom: one 1g instance (100 req/s per slice)


def whole_gpu_nodes(count: int) -> NodePool:
    return NodePool(gpu=GPU, nodes=[NodeState(name=f"n{i}", gpus=[WHOLE]) for i in range(1, count + 1)])


def serving(pool: NodePool, nodes: int) -> Plan:
    """The current plan: 630 req/s per node needs all 7 slices of each node (693 with headroom), kept as it is."""
    busy = make_system(ONE_TASK, demand=630 * nodes)
    current = plan([busy], pool, build_profile_store([busy], GPU), options=OPTIONS.model_copy(
        update={"reconfigure_s": 0.0}))
    assert {g.node: g.layout for g in current.gpus} == {f"n{i}": [("7g.80gb", 1)] for i in range(1, nodes + 1)}
    return current


def solve(pool: NodePool, options: PlannerOptions = HALF, system: SystemSpec = SMALL) -> Plan:
    carrying = [n.name for n in pool.nodes if any(n.gpus)]
    return plan([system], pool, build_profile_store([system], GPU), options=options,
                current=serving(pool, len(carrying)))


def test_a_change_that_saves_fewer_slices_than_its_price_keeps_the_layout_and_says_why():
    # One node: 1g instead of 7g saves 6 slices; the change costs (8 + 7) / 2 = 7.5.
    result = solve(whole_gpu_nodes(1))
    assert result.fully_served
    assert [g.layout for g in result.gpus] == [[("7g.80gb", 1)]]
    assert result.changes is not None
    assert (result.changes.nodes_changed, result.changes.nodes_kept) == ([], ["n1"])
    assert (result.changes.forgone_nodes, result.changes.forgone_slices) == (1, 6)
    assert "changes 0 nodes; keeps 1 more: changing them would save 6 slices" in result.changes.summary


def test_a_change_that_pays_for_itself_is_made_and_the_plan_says_what_it_saves():
    # Two nodes (W = 15, a change costs 11): emptying the idle one saves a GPU and its 7 slices (22);
    # changing the other too would save 6 more slices for 11.
    result = solve(whole_gpu_nodes(2))
    assert result.fully_served and (result.gpus_used, result.slices_used) == (1, 7)
    assert result.changes is not None and len(result.changes.nodes_changed) == 1
    assert (result.changes.slices_saved, result.changes.gpus_saved) == (7, 1)
    assert result.changes.summary.startswith("changes 1 node: saves 7 slices and 1 GPU")


def test_without_a_price_the_cheapest_plan_changes_every_node():
    free = OPTIONS.model_copy(update={"reconfigure_s": 0.0})
    result = solve(whole_gpu_nodes(3), free)
    assert (result.gpus_used, result.slices_used) == (1, 1)
    assert result.changes is None  # nothing priced, nothing bounded: no change summary


def test_the_bound_on_nodes_changed_holds_though_more_changes_would_be_cheaper():
    bounded = OPTIONS.model_copy(update={"reconfigure_s": 0.0, "max_nodes_changed": 1})
    result = solve(whole_gpu_nodes(3), bounded)
    assert result.fully_served and result.changes is not None
    assert len(result.changes.nodes_changed) == 1 and len(result.changes.nodes_kept) == 2
    assert (result.gpus_used, result.slices_used) == (2, 14)
    unbounded = solve(whole_gpu_nodes(3), bounded.model_copy(update={"max_nodes_changed": None}))
    assert (unbounded.gpus_used, unbounded.slices_used) == (1, 1)  # changing all three


def test_partitioning_a_node_that_serves_nothing_is_free_and_not_counted_as_a_change():
    # 1000 req/s needs 11 slices: n1's 7g and 4 more, which only the fresh node can give under a bound of 0.
    demand = make_system(ONE_TASK, demand=1000)
    pool = NodePool(gpu=GPU, nodes=[NodeState(name="n1", gpus=[WHOLE]), NodeState(name="fresh", gpus=[{}])])
    result = solve(pool, HALF.model_copy(update={"max_nodes_changed": 0}), demand)
    assert result.fully_served and result.changes is not None
    assert result.changes.nodes_changed == [] and result.changes.nodes_kept == ["n1"]
    assert {g.node: g.layout for g in result.gpus}["n1"] == [("7g.80gb", 1)]
    assert "fresh" in {g.node for g in result.gpus}


def test_the_plan_summary_prints_the_layout_changes():
    console = Console(width=200, record=True)
    console.print(summary_table(solve(whole_gpu_nodes(2))))
    text = console.export_text()
    assert "layout changes" in text and "changes 1 node: saves 7 slices and 1 GPU;" in text


def test_a_node_with_instances_the_current_plan_leaves_idle_is_not_priced():
    result = plan([SMALL], whole_gpu_nodes(1), build_profile_store([SMALL], GPU), options=HALF)  # no current plan
    assert [g.layout for g in result.gpus] == [[("1g.10gb", 1)]] and result.changes is None
