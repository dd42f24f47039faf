"""Plain-data fixtures for the operator's pure parts: node objects as the API returns them, a small plan."""

from __future__ import annotations

import pytest

from tessera.operator.gpus.discovery import Pool, group_pools, node_facts
from tessera.operator.api.systems import SystemRef
from tessera.planner.model import SystemSpec
from tessera.planner.plan import ConfigPlan, GpuPlan, InstancePlan, Plan, SolverReport, SystemSummary, TaskPlan
from tessera.planner.profiles import ProfileSource, SegmentType

H100_LABEL = "NVIDIA-H100-80GB-HBM3"


def gpu_node(name: str, product: str = H100_LABEL, gpus: int = 8, ready: bool = True,
             extra_labels: dict | None = None, unschedulable: bool = False) -> dict:
    return {
        "metadata": {"name": name, "labels": {
            "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/mig.capable": "true", "kubernetes.io/hostname": name, **(extra_labels or {})}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pool_of(*nodes: dict) -> Pool:
    pools, _ = group_pools([node_facts(n, "tessera.ai/mig-config-requested") for n in nodes])
    (pool,) = pools
    return pool


@pytest.fixture
def system_ref() -> SystemRef:
    return SystemRef(namespace="shop", name="traffic", uid="uid-1", generation=3)


@pytest.fixture
def spec() -> SystemSpec:
    validated = SystemSpec.model_validate({
        "name": "traffic",
        "slo": {"latencyMilliseconds": 250, "accuracy": 0.8},
        "demandRequestsPerSecond": 50,
        "tasks": [
            {"name": "object-detection", "variants": [
                {"name": "yolov5m", "accuracy": 1.0, "gpuMemoryGigabytes": 2.5, "image": "example.org/yolo:1",
                 "args": ["--model", "yolov5m"]}]},
            {"name": "car-classification", "variants": [{"name": "effnet-b0", "accuracy": 1.0, "gpuMemoryGigabytes": 1.0}]},
        ],
        "edges": [{"source": "object-detection", "target": "car-classification", "factor": 2.0}],
    }, by_alias=True)
    return validated.model_copy(update={"name": "shop/traffic"})  # the operator keys systems namespace/name


def _config(profile: str, mps: int, batch: int, replicas: int) -> ConfigPlan:
    return ConfigPlan(segment=SegmentType(gpu="H100-80GB", mig_profile=profile, mps=mps), batch=batch,
                      replicas=replicas, batch_latency_ms=20.0, segment_throughput_rps=100.0, load_rps=50.0,
                      stage_latency_ms=60.0, source=ProfileSource.ESTIMATED)


@pytest.fixture
def plan() -> Plan:
    """Detection on two 3g.40gb instances of gpu-a's GPU 3, classification (MPS 2) on a 1g.10gb of gpu-b's GPU 0."""
    tasks = [
        TaskPlan(system="shop/traffic", task="object-detection", variant="yolov5m", normalised_accuracy=1.0,
                 demand_rps=50, budget_ms=125, stage_latency_ms=60, configs=[_config("3g.40gb", 1, 8, 2)]),
        TaskPlan(system="shop/traffic", task="car-classification", variant="effnet-b0", normalised_accuracy=1.0,
                 demand_rps=100, budget_ms=125, stage_latency_ms=60, configs=[_config("1g.10gb", 2, 4, 1)]),
    ]
    gpus = [
        GpuPlan(index=0, node="gpu-a", device=3, layout=[("3g.40gb", 2)], instances=[
            InstancePlan(mig_profile="3g.40gb", system="shop/traffic", task="object-detection", config=0),
            InstancePlan(mig_profile="3g.40gb", system="shop/traffic", task="object-detection", config=0)]),
        GpuPlan(index=1, node="gpu-b", device=0, layout=[("1g.10gb", 7)], instances=[
            InstancePlan(mig_profile="1g.10gb", system="shop/traffic", task="car-classification", config=0),
            *[InstancePlan(mig_profile="1g.10gb") for _ in range(6)]]),
    ]
    return Plan(gpu="H100-80GB", pool_gpus=2, features="A+S+T", headroom=0.1, tasks=tasks, gpus=gpus, paths=[],
                systems=[SystemSummary(system="shop/traffic", demand_rps=50, served_rps=50, latency_slo_ms=250,
                                       worst_path_latency_ms=120, accuracy_slo=0.8, worst_path_accuracy=1.0)],
                gpus_used=2, slices_used=13, profile_sources={"estimated": 3},
                solver=SolverReport(status="Optimal", stages=["cost"], objective={"cost": 13}, mip_gap=0.0,
                                    build_s=0.1, solve_s=0.2, variables=10, constraints=10))
