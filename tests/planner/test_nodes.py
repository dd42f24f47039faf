"""A pool of named nodes: which GPUs the planner may use, and the label rule the operator relies on."""

import pytest
from pydantic import ValidationError

from tessera.planner.nodes import NodePool, NodeState, node_from_labels, pool_gpus

GPU = "H100-80GB"
CONFIGS = {"tessera-abc": [{"3g.40gb": 2}, {"1g.10gb": 7}], "all-7g": [{"7g.80gb": 1}, {"7g.80gb": 1}]}
APPLIED = {"nvidia.com/mig.config": "tessera-abc", "nvidia.com/mig.config.state": "success",
           "nvidia.com/mig-3g.40gb.count": "2", "nvidia.com/mig-1g.10gb.count": "7"}


def test_a_successful_config_whose_advertised_counts_match_is_trusted_per_gpu():
    node = node_from_labels("n1", APPLIED, gpus=2, configs=CONFIGS)
    assert node.gpus == [{"3g.40gb": 2}, {"1g.10gb": 7}]


@pytest.mark.parametrize("change", [
    {"nvidia.com/mig.config.state": "pending"},
    {"nvidia.com/mig.config.state": "failed"},
    {"nvidia.com/mig.config": "someone-elses"},
    {"nvidia.com/mig-1g.10gb.count": "6"},
    {"nvidia.com/mig-2g.20gb.count": "1"},
    {"nvidia.com/mig-1g.10gb.count": "seven"},
], ids=["pending", "failed", "unknown-config", "count-short", "extra-profile", "unreadable-count"])
def test_a_config_not_confirmed_by_state_and_counts_leaves_every_gpu_unknown(change):
    node = node_from_labels("n1", {**APPLIED, **change}, gpus=2, configs=CONFIGS)
    assert node.gpus == [None, None]


def test_unknown_gpus_and_nodes_cordoned_by_others_are_not_planned_on():
    pool = NodePool(gpu=GPU, nodes=[
        NodeState(name="a", gpus=[{"7g.80gb": 1}, None]),
        NodeState(name="b", gpus=[{}], cordoned_by="others"),
        NodeState(name="c", gpus=[{}], cordoned_by="tessera"),
    ])
    assert pool.plannable() == [("a", 0), ("c", 0)]
    assert [(g.index, g.node, g.device) for g in pool_gpus(pool).gpus] == [(0, "a", 0), (1, "c", 0)]


def test_instances_held_by_others_fix_the_node_and_are_subtracted():
    node = NodeState(name="a", gpus=[{"3g.40gb": 2}, {"3g.40gb": 2}], held={"3g.40gb": 3})
    gpus = pool_gpus(NodePool(gpu=GPU, nodes=[node])).gpus
    assert all(g.fixed for g in gpus)
    assert [g.usable for g in gpus] == [(), (("3g.40gb", 1),)]
    assert pool_gpus(NodePool(gpu=GPU, nodes=[node])).fixed_groups() == [
        ((("3g.40gb", 2),), (("3g.40gb", 1),), 1)]


@pytest.mark.parametrize("nodes, message", [
    ([NodeState(name="a", gpus=[{"5g.50gb": 1}])], "no MIG profiles"),
    ([NodeState(name="a", gpus=[{"4g.40gb": 1, "3g.40gb": 2}])], "not a valid MIG layout"),
    ([NodeState(name="a", gpus=[{}]), NodeState(name="a", gpus=[{}])], "repeated node names"),
    ([NodeState(name="a", gpus=[{}], held={"1g.10gb": -1})], "negative count"),
])
def test_an_impossible_node_state_is_rejected_naming_node_and_gpu(nodes, message):
    with pytest.raises(ValidationError, match=message):
        NodePool(gpu=GPU, nodes=nodes)
