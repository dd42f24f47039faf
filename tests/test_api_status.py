"""The typed status models: wire names, bounds, and children's names."""

import re
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from tessera.operator.api.v1alpha1 import (
    AdapterPoolStatus,
    ConditionType,
    Phase,
    SystemStatus,
    child_name,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NOW = datetime(2026, 12, 1, 5, 0, tzinfo=timezone.utc)


def system_status() -> SystemStatus:
    return SystemStatus.model_validate({
        "observedGeneration": 3, "phase": Phase.READY,
        "conditions": [{"type": ConditionType.READY, "status": "True", "reason": "PlanApplied",
                        "message": "every server is ready", "lastTransitionTime": NOW, "observedGeneration": 3}],
        "plan": {"gpuProduct": "H100-80GB", "gpus": 2, "slices": 8, "predictedLatencyMilliseconds": 69.4,
                 "predictedAccuracy": 0.95, "demandRequestsPerSecond": 50, "servedRequestsPerSecond": 50,
                 "profileSources": {"estimated": 3},
                 "tasks": [{"name": "object-detection", "variant": "yolov5x", "configurations": [
                     {"migProfile": "1g.20gb", "mpsDegree": 2, "batchSize": 1, "replicas": 1}]}]},
    })


def test_a_system_status_serialises_to_camel_case_json():
    dumped = system_status().model_dump(mode="json", exclude_none=True)
    assert dumped["conditions"][0]["lastTransitionTime"] == "2026-12-01T05:00:00Z"
    assert dumped["plan"]["tasks"][0]["configurations"][0] == {
        "migProfile": "1g.20gb", "mpsDegree": 2, "batchSize": 1, "replicas": 1}
    assert SystemStatus.model_validate(dumped) == system_status()


def test_an_unknown_phase_is_rejected():
    with pytest.raises(ValidationError, match="phase"):
        SystemStatus.model_validate({"phase": "Running"})


def test_an_adapter_pool_status_holds_counts_not_one_entry_per_adapter():
    status = AdapterPoolStatus.model_validate({"plan": {
        "gpuProduct": "H100-80GB", "gpus": 1, "adaptersPlaced": 1999, "adaptersUnplaced": 1,
        "unplacedAdapterExamples": ["cold-one"], "predictedMinServedFraction": 0.97,
        "placedRequestsPerSecond": 99.5, "requestsPerSecond": 100.0, "serversReady": 1,
        "servers": [{"name": "pool-0-0123456789", "adapters": 1999, "loraSlots": 32, "maxLoraRank": 16,
                     "node": "gpu-a", "gpu": 0, "ready": True}],
        "placementConfigMapName": "pool-placement"}})
    assert status.plan.adapters_placed == 1999
    with pytest.raises(ValidationError, match="unplacedAdapterExamples"):
        AdapterPoolStatus.model_validate({"plan": {
            **status.plan.model_dump(), "unplacedAdapterExamples": [f"a{i}" for i in range(17)]}})


@pytest.mark.parametrize("parts", [
    ("traffic-analysis", "object-detection", "1g.20gb", "2", "1"),
    ("a" * 63, "b" * 63, "node-" + "x" * 240),
    ("9lives", "t"),
])
def test_child_names_are_dns_labels_of_at_most_63_characters(parts):
    name = child_name(*parts)
    assert len(name) <= 63 and DNS_1035.match(name), name


def test_child_names_differ_when_only_the_cut_off_part_differs():
    long = "s" * 63
    assert child_name(long, "task-a") != child_name(long, "task-b")
    assert child_name("sys", "task") == child_name("sys", "task")


def test_the_largest_statuses_stay_far_under_the_object_size_limit():
    """64 tasks x 8 configurations, or 256 servers and 2000 adapters (each server's loaded and failed counts too):
    both well under 1.5 MiB (under 12% of it)."""
    condition = {"type": "Ready", "status": "False", "reason": "R" * 128, "message": "m" * 4096,
                 "lastTransitionTime": NOW, "observedGeneration": 1}
    conditions = [{**condition, "type": t} for t in ("Ready", "Planned", "Progressing", "Degraded", "Invalid",
                                                     "MigLayoutApplied", "ProfilesEstimated", "ProfilingComplete",
                                                     "MetricsAvailable", "AdaptersPlaced")]
    configuration = {"migProfile": "7g.141gb", "mpsDegree": 48, "batchSize": 1024, "replicas": 100_000}
    system = system_status().model_dump()
    system["conditions"] = conditions
    system["plan"]["tasks"] = [{"name": f"t{i:02d}" + "x" * 59, "variant": "v" * 63,
                                "configurations": [configuration] * 8} for i in range(64)]
    pool = AdapterPoolStatus.model_validate({"conditions": conditions, "plan": {
        "gpuProduct": "H200-141GB", "gpus": 256, "adaptersPlaced": 2000, "adaptersUnplaced": 0,
        "unplacedAdapterExamples": ["a" * 63] * 16, "predictedMinServedFraction": 0.9,
        "placedRequestsPerSecond": 1e7, "requestsPerSecond": 1e7, "serversReady": 256, "adaptersFailed": 2000,
        "servers": [{"name": "s" + f"{i:03d}" * 20 + "xy", "adapters": 2000, "loraSlots": 256, "maxLoraRank": 512,
                     "node": "n" * 253, "gpu": 7, "ready": True, "adaptersLoaded": 2000, "adaptersFailed": 2000}
                    for i in range(256)],
        "placementConfigMapName": "c" * 253}})
    for status in (SystemStatus.model_validate(system), pool):
        assert len(status.model_dump_json()) < 180_000
