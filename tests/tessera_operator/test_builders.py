"""The objects tessera writes, built from a plan without a cluster."""

from __future__ import annotations

import pytest
import yaml

from tessera.operator import naming
from tessera.operator.reconcile import builders
from tessera.operator.gpus.node_plans import NodePlan, place, placed_gpus, share_of
from tessera.operator.settings import OperatorSettings

SETTINGS = OperatorSettings(default_image="example.org/default:1")


def _placement(plan):
    return place(placed_gpus(plan), plan.tasks, {"gpu-a": 8, "gpu-b": 8})


def test_a_plan_made_without_nodes_is_refused_not_guessed(plan):
    nameless = plan.model_copy(update={"gpus": [g.model_copy(update={"node": None}) for g in plan.gpus]})
    with pytest.raises(ValueError, match="name no node"):
        placed_gpus(nameless)


def _env(body) -> dict[str, str]:
    return {e["name"]: e["value"] for e in body["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_the_plans_node_gpus_become_node_layouts_and_replicas_per_node(plan):
    placement = _placement(plan)
    assert placement.nodes["gpu-a"].layouts == {3: (("3g.40gb", 2),)}
    assert placement.nodes["gpu-b"].layouts == {0: (("1g.10gb", 7),)}
    assert {(k.task, k.node): n for k, n in placement.servers.items()} == {
        ("object-detection", "gpu-a"): 2, ("car-classification", "gpu-b"): 1}


def test_a_share_holds_the_whole_gpus_of_one_system(plan):
    share = share_of("shop/traffic", plan.tasks, placed_gpus(plan))
    assert [(g.node, g.gpu) for g in share.gpus] == [("gpu-a", 3), ("gpu-b", 0)]
    assert share_of("other/system", plan.tasks, []).tasks == []


def test_mig_parted_entries_group_gpus_of_one_layout_and_turn_mig_off_on_idle_gpus():
    node = NodePlan("gpu-a", 4, {0: (("3g.40gb", 2),), 2: (("3g.40gb", 2),), 1: (("1g.10gb", 7),)})
    entries = builders.mig_parted_entries(node, {"1g.10gb": "1g.12gb"})
    assert entries == [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.12gb": 7}},
        {"devices": [3], "mig-enabled": False},
    ]
    assert builders.advertised_counts_expected(node, {}) == {"3g.40gb": 4, "1g.10gb": 7}


def test_mig_parted_text_keeps_foreign_configs_and_drops_tessera_configs_no_node_uses():
    current = yaml.safe_dump({"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "custom-admin": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}],
        "tessera-v1-old": [{"devices": "all", "mig-enabled": False}],
        "tessera-v1-inuse": [{"devices": "all", "mig-enabled": False}]}})
    wanted = {"tessera-v1-new": [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}
    configs = yaml.safe_load(builders.mig_parted_text(current, wanted, keep={"tessera-v1-inuse"}))["mig-configs"]
    assert set(configs) == {"all-disabled", "custom-admin", "tessera-v1-inuse", "tessera-v1-new"}


def test_a_new_mig_parted_file_carries_nvidias_default_configs():
    document = yaml.safe_load(builders.mig_parted_text(None, {}, keep=set()))
    assert document["version"] == "v1"
    assert {"all-disabled", "all-enabled"} <= set(document["mig-configs"])


def test_one_patch_sets_the_mig_config_and_removes_the_state_label():
    labels = builders.node_relabel_patch("tessera-v1-abc")["metadata"]["labels"]
    assert labels == {"nvidia.com/mig.config": "tessera-v1-abc", "nvidia.com/mig.config.state": None}


def test_a_deployment_is_pinned_to_its_node_and_requests_one_mig_instance(plan, spec, system_ref):
    placement = _placement(plan)
    key = next(k for k in placement.servers if k.task == "object-detection")
    body = builders.deployment(system_ref, spec, key, placement.tasks[(key.system, key.task)], 2, "gpu-a",
                               "3g.40gb", SETTINGS)
    pod = body["spec"]["template"]["spec"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-a"]}]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert pod["containers"][0]["image"] == "example.org/yolo:1"
    assert pod["containers"][0]["args"] == ["--model", "yolov5m"]
    assert body["spec"]["replicas"] == 2


def test_the_environment_carries_batch_delay_processes_and_downstream_service_urls(plan, spec, system_ref):
    placement = _placement(plan)
    detection = next(k for k in placement.servers if k.task == "object-detection")
    env = _env(builders.deployment(system_ref, spec, detection, placement.tasks[("shop/traffic", "object-detection")],
                                   2, "gpu-a", "3g.40gb", SETTINGS))
    assert env["TESSERA_BATCH_SIZE"] == "8"
    assert env["TESSERA_PROCESSES"] == "1"
    assert env["TESSERA_MAX_BATCH_DELAY_MS"] == "20"  # one batch latency of the configuration
    url = f"http://{builders.service_name(system_ref, 'car-classification')}.shop.svc:8000"
    assert env["TESSERA_DOWNSTREAM_CAR_CLASSIFICATION_URL"] == url
    assert env["TESSERA_DOWNSTREAM_URLS"] == f"car-classification={url}"


def _template(plan, spec, system_ref, task_name: str) -> dict:
    placement = _placement(plan)
    key = next(k for k in placement.servers if k.task == task_name)
    return builders.deployment(system_ref, spec, key, placement.tasks[(key.system, key.task)], 2, key.node,
                               "3g.40gb", SETTINGS)["spec"]["template"]


def test_a_pod_template_depends_on_no_plan_wide_value(plan, spec, system_ref):
    """A joint re-plan (another system edited, a node added) may pick another budget level, demand, load split,
    stage latency or GPU for the same configuration: none of them rolls the server."""
    task = plan.tasks[0]
    config = task.configs[0].model_copy(update={"load_rps": 31.0, "stage_latency_ms": 44.0, "replicas": 5})
    moved_task = task.model_copy(update={"budget_ms": 62.5, "demand_rps": 400.0, "stage_latency_ms": 44.0,
                                         "arrival_dispersion": 3.0, "share_base_rps": 9.0, "configs": [config]})
    moved_gpus = [g.model_copy(update={"index": 7 - g.index}) for g in plan.gpus]
    replanned = plan.model_copy(update={"tasks": [moved_task, *plan.tasks[1:]], "gpus": moved_gpus, "pool_gpus": 9})
    assert _template(replanned, spec, system_ref, task.task) == _template(plan, spec, system_ref, task.task)


def test_a_pod_template_changes_with_its_own_configurations_batch_latency(plan, spec, system_ref):
    task = plan.tasks[0]
    measured = task.configs[0].model_copy(update={"batch_latency_ms": 12.0})
    remeasured = plan.model_copy(update={"tasks": [task.model_copy(update={"configs": [measured]}), *plan.tasks[1:]]})
    template = _template(remeasured, spec, system_ref, task.task)
    assert {e["name"]: e["value"] for e in template["spec"]["containers"][0]["env"]}[
        "TESSERA_MAX_BATCH_DELAY_MS"] == "12"


def test_a_server_of_batch_one_holds_no_partial_batch(plan):
    config = plan.tasks[0].configs[0].model_copy(update={"batch": 1})
    assert builders.batch_delay_ms(config) == 0.0


def test_an_mps_configuration_runs_its_processes_in_one_pod_with_an_mps_pipe_directory(plan, spec, system_ref):
    placement = _placement(plan)
    key = next(k for k in placement.servers if k.task == "car-classification")
    body = builders.deployment(system_ref, spec, key, placement.tasks[(key.system, key.task)], 1, "gpu-b",
                               "1g.10gb", SETTINGS)
    env = _env(body)
    assert env["TESSERA_PROCESSES"] == "2"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == builders.MPS_PIPE_DIRECTORY
    assert {v["name"] for v in body["spec"]["template"]["spec"]["volumes"]} == {"mps-pipe", "mps-log"}
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == "example.org/default:1"


def test_a_service_selects_every_replica_of_its_task(plan, spec, system_ref):
    placement = _placement(plan)
    service = builders.service(system_ref, "object-detection", 8000)
    key = next(k for k in placement.servers if k.task == "object-detection")
    deployment = builders.deployment(system_ref, spec, key, placement.tasks[(key.system, key.task)], 2, "gpu-a",
                                     "3g.40gb", SETTINGS)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["metadata"]["name"] == builders.service_name(system_ref, "object-detection")
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_every_child_has_the_owner_reference_and_tessera_labels(plan, spec, system_ref):
    placement = _placement(plan)
    key = next(iter(placement.servers))
    children = [builders.service(system_ref, "object-detection", 8000),
                builders.deployment(system_ref, spec, key, placement.tasks[(key.system, key.task)], 1, key.node,
                                    "3g.40gb", SETTINGS)]
    for child in children:
        metadata = child["metadata"]
        assert metadata["ownerReferences"] == [system_ref.owner_reference()]
        assert metadata["labels"][naming.MANAGED_BY] == "tessera"
        assert metadata["labels"][naming.SCHEMA_LABEL] == naming.SCHEMA_VERSION
        assert metadata["labels"][naming.SYSTEM_LABEL] == "traffic"
        assert builders.applied_hash(child)


def test_the_applied_hash_follows_the_content(plan, spec, system_ref):
    first = builders.service(system_ref, "object-detection", 8000)
    assert builders.applied_hash(first) == builders.applied_hash(builders.service(system_ref, "object-detection", 8000))
    assert builders.applied_hash(first) != builders.applied_hash(builders.service(system_ref, "object-detection", 9000))
