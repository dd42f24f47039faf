"""Names, labels and pools: deterministic, within Kubernetes' limits, read from GPU feature discovery labels."""

from __future__ import annotations

import re

from tessera.operator import naming
from tessera.operator.reconcile import builders
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.gpus.node_plans import ServerKey
from tessera.operator.api.systems import SystemRef
from tessera.operator.gpus.discovery import catalog_product, group_pools, node_facts, node_profile_name
from tessera.planner.catalog import gpu_product

from .conftest import H100_LABEL, gpu_node, pool_of

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_service_names_are_the_apis_child_names_of_system_and_task(system_ref):
    name = builders.service_name(system_ref, "object-detection")
    assert name == child_name("traffic", "object-detection") and name.startswith("traffic-object-detection-")
    long = builders.service_name(SystemRef("shop", "a" * 63, "uid", 1), "object-detection")
    assert len(long) <= 63 and DNS_1035.match(long)
    assert long != builders.service_name(SystemRef("shop", "a" * 63, "uid", 1), "object-detectors")


def test_deployment_names_are_deterministic_within_63_characters_and_differ_by_node(plan, spec):
    ref = SystemRef("shop", "s" * 63, "uid", 1)
    task = plan.tasks[0]
    key = ServerKey("shop/" + ref.name, task.task, 0, "gpu-node-" + "n" * 50)
    name = builders.deployment_name(ref, key, task, task.configs[0])
    assert len(name) <= 63 and DNS_1035.match(name)
    assert name == builders.deployment_name(ref, key, task, task.configs[0].model_copy())
    other_node = ServerKey(key.system, key.task, 0, "gpu-node-" + "m" * 50)
    assert name != builders.deployment_name(ref, other_node, task, task.configs[0])
    other_batch = task.configs[0].model_copy(update={"batch": 16})
    assert name != builders.deployment_name(ref, key, task, other_batch)


def test_mig_config_names_are_content_addressed_and_versioned():
    entries = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    name = naming.mig_config_name(entries)
    assert name.startswith(f"tessera-{naming.SCHEMA_VERSION}-")
    assert name == naming.mig_config_name([dict(e) for e in entries])
    assert name != naming.mig_config_name([{**entries[0], "mig-devices": {"7g.80gb": 1}}])


def test_label_values_longer_than_63_characters_are_shortened():
    assert len(naming.label_value("n" * 70 + "/" + "s" * 70)) <= 63
    assert naming.label_value("shop/traffic") != "shop/traffic"  # '/' is not allowed in a label value


def test_gfd_product_labels_map_to_catalog_gpus():
    assert catalog_product("NVIDIA-H100-80GB-HBM3").name == "H100-80GB"
    assert catalog_product("NVIDIA-A100-SXM4-40GB").name == "A100-40GB"
    assert catalog_product("NVIDIA-A100-SXM4-80GB").name == "A100-80GB"
    assert catalog_product("NVIDIA-H200", gpu_memory_mib=143771).name == "H200-141GB"
    assert catalog_product("Tesla-T4") is None


def test_node_facts_read_mig_state_and_advertised_profiles():
    node = gpu_node("gpu-0", extra_labels={
        "nvidia.com/mig.config": "tessera-v1-abc", "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-3g.40gb.count": "4", "nvidia.com/mig-3g.40gb.memory": "40192",
        "nvidia.com/mig-3g.40gb.slices.gi": "3"})
    facts = node_facts(node, "tessera.ai/mig-config-requested")
    assert (facts.gpu_count, facts.mig_config, facts.mig_state) == (8, "tessera-v1-abc", "success")
    assert facts.advertised_counts() == {"3g.40gb": 4}
    assert node_facts({"metadata": {"name": "cpu", "labels": {}}}, "x") is None


def test_a_profile_advertised_under_another_name_keeps_the_nodes_name():
    node = gpu_node("gpu-0", extra_labels={"nvidia.com/mig-1g.12gb.count": "7", "nvidia.com/mig-1g.12gb.memory": "11264",
                                           "nvidia.com/mig-1g.12gb.slices.gi": "1"})
    facts = node_facts(node, "x")
    h100 = gpu_product("H100-80GB")
    assert node_profile_name(h100.profile("1g.10gb"), facts.advertised) == "1g.12gb"
    assert node_profile_name(h100.profile("3g.40gb"), facts.advertised) == "3g.40gb"


def test_pools_hold_schedulable_nodes_of_one_product_in_name_order():
    nodes = [gpu_node("b"), gpu_node("a"), gpu_node("c", unschedulable=True), gpu_node("d", ready=False),
             gpu_node("e", product="NVIDIA-A100-SXM4-40GB", gpus=4), gpu_node("f", product="Tesla-T4")]
    pools, unknown = group_pools([node_facts(n, "x") for n in nodes])
    assert [(p.key, [n.name for n in p.nodes]) for p in pools] == [
        ("NVIDIA-A100-SXM4-40GB", ["e"]), (H100_LABEL, ["a", "b"])]
    assert [u.product_label for u in unknown] == ["Tesla-T4"]


def test_pool_slots_walk_nodes_by_name_then_gpu_index():
    pool = pool_of(gpu_node("gpu-b", gpus=2), gpu_node("gpu-a", gpus=2))
    assert [(node.name, index) for node, index in pool.slots()] == [
        ("gpu-a", 0), ("gpu-a", 1), ("gpu-b", 0), ("gpu-b", 1)]
    assert pool.gpus == 4
