"""The pool as the planner gets it: node GPUs' layouts from their labels and the mig-parted configs."""

from __future__ import annotations

import yaml

from tessera.operator.reconcile import builders
from tessera.operator.gpus.planner_input import mig_configs, planner_pool

from .conftest import gpu_node, pool_of

DISABLED = {"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success"}
DEFAULTS = yaml.safe_dump({"version": "v1", "mig-configs": builders.NVIDIA_DEFAULT_CONFIGS})


def _with_config(name: str, entries: list[dict]) -> dict:
    return mig_configs(builders.mig_parted_text(DEFAULTS, {name: entries}, keep=set()))


def test_a_node_with_mig_disabled_offers_every_gpu_empty():
    pool = planner_pool(pool_of(gpu_node("gpu-a", gpus=2, extra_labels=DISABLED)), mig_configs(DEFAULTS))
    assert pool.plannable() == [("gpu-a", 0), ("gpu-a", 1)]
    assert pool.node("gpu-a").gpus == [{}, {}]


def test_a_node_with_a_pending_or_unknown_config_is_not_planned_on():
    pending = {"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "pending"}
    unknown = {"nvidia.com/mig.config": "someone-elses", "nvidia.com/mig.config.state": "success"}
    pool = planner_pool(pool_of(gpu_node("gpu-a", gpus=2, extra_labels=pending),
                                gpu_node("gpu-b", gpus=2, extra_labels=unknown)), mig_configs(DEFAULTS))
    assert pool.plannable() == []


def test_tessera_configs_are_read_back_per_gpu_when_the_advertised_counts_agree():
    configs = _with_config("tessera-v1-abc", [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
                                              {"devices": [1], "mig-enabled": False}])
    labels = {"nvidia.com/mig.config": "tessera-v1-abc", "nvidia.com/mig.config.state": "success",
              "nvidia.com/mig-3g.40gb.count": "2"}
    pool = planner_pool(pool_of(gpu_node("gpu-a", gpus=2, extra_labels=labels)), configs)
    assert pool.node("gpu-a").gpus == [{"3g.40gb": 2}, {}]
    wrong_counts = {**labels, "nvidia.com/mig-3g.40gb.count": "1"}
    assert planner_pool(pool_of(gpu_node("gpu-a", gpus=2, extra_labels=wrong_counts)), configs).plannable() == []


def test_profiles_a_node_names_differently_are_read_in_the_catalogs_names():
    configs = _with_config("tessera-v1-abc", [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.12gb": 7}}])
    labels = {"nvidia.com/mig.config": "tessera-v1-abc", "nvidia.com/mig.config.state": "success",
              "nvidia.com/mig-1g.12gb.count": "7", "nvidia.com/mig-1g.12gb.memory": "11008",
              "nvidia.com/mig-1g.12gb.slices.gi": "1"}
    pool = planner_pool(pool_of(gpu_node("gpu-a", gpus=1, extra_labels=labels)), configs)
    assert pool.node("gpu-a").gpus == [{"1g.10gb": 7}]


def test_a_config_the_catalog_cannot_read_makes_the_node_unknown_not_an_error():
    configs = _with_config("tessera-v1-bad", [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 9}}])
    labels = {"nvidia.com/mig.config": "tessera-v1-bad", "nvidia.com/mig.config.state": "success",
              "nvidia.com/mig-3g.40gb.count": "9"}
    assert planner_pool(pool_of(gpu_node("gpu-a", gpus=1, extra_labels=labels)), configs).plannable() == []


def test_gpus_an_invalid_systems_last_good_plan_holds_are_left_out():
    pool = planner_pool(pool_of(gpu_node("gpu-a", gpus=3, extra_labels=DISABLED)), mig_configs(DEFAULTS),
                        reserved={("gpu-a", 1)})
    assert pool.plannable() == [("gpu-a", 0), ("gpu-a", 2)]


def test_adapter_pools_gpus_are_left_out_where_reserved_and_lent_above_their_priority_where_outranked():
    pool = planner_pool(pool_of(gpu_node("gpu-a", gpus=3, extra_labels=DISABLED)), mig_configs(DEFAULTS),
                        reserved={("gpu-a", 2)}, adapters={("gpu-a", 0): None, ("gpu-a", 1): 5, ("gpu-a", 2): 7})
    assert pool.plannable() == [("gpu-a", 1)]  # a reserved GPU stays reserved, whatever lends it
    assert pool.node("gpu-a").usable_above == {1: 5}
