"""`tessera capacity` reports a capacity, not a function of how the demand was written down.

Capacity is the largest common factor on every system's demand that the pool
serves, times that demand. Scaling every system's demand in the file by one
positive factor changes the factor, never the capacity: the property test
draws small pools (1 or 2 GPUs) and one or two systems with their own demand
ratio, SLO and profiles, runs `tessera capacity --output json` on the file
and on the scaled file, and requires every system's capacity to agree within
the MIP gap the two runs state (and the same systems unservable). A few
examples in the test command; `-m slow` runs many more.

A system whose demand is zero has no share of a common scale: it is refused,
naming the field, rather than printed as a capacity of 0.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.cli import main
from tessera.exit_codes import BAD_INPUT
from tessera.planner.catalog import gpu_product

GPU = "H100-80GB"
OPTIONS = ["--gpu", GPU, "--features", "A+S+T", "--levels", "4", "--time-limit", "5", "--output", "json"]
# HiGHS's feasibility tolerance on a scaled model: capacities equal to this relative error are equal.
TOLERANCE = 1e-6


def log_uniform(low: float, high: float):
    return st.floats(math.log10(low), math.log10(high)).map(lambda e: float(f"{10 ** e:.6g}"))


TASKS = ("detect", "classify")


def two_task_system(name: str, demand: float, slo_ms: float = 200, factor: float = 1.0,
                    per_slice: tuple[float, float] = (100, 100), latency_ms: tuple[float, float] = (10, 10)) -> dict:
    """detect -> classify, each with one variant profiled on every MIG profile of the GPU."""
    profiles = [{"task": task, "variant": f"{task}-v", "gpuProduct": GPU, "migProfile": mig.name, "batchSize": 1,
                 "latencyMilliseconds": latency, "throughputRequestsPerSecond": float(f"{rate * mig.compute_slices:.6g}")}
                for task, rate, latency in zip(TASKS, per_slice, latency_ms) for mig in gpu_product(GPU).profiles]
    return {
        "apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem", "metadata": {"name": name},
        "spec": {
            "slo": {"latencyMilliseconds": slo_ms, "accuracy": 0.9},
            "demandRequestsPerSecond": demand,
            "tasks": [{"name": t, "variants": [{"name": f"{t}-v", "accuracy": 0.95, "gpuMemoryGigabytes": 2}]}
                      for t in TASKS],
            "edges": [{"source": "detect", "target": "classify", "factor": factor}],
            "profiles": profiles,
        },
    }


@st.composite
def system(draw, name: str) -> dict:
    return two_task_system(name, demand=draw(log_uniform(0.1, 1e4)), slo_ms=draw(log_uniform(100, 1000)),
                           factor=draw(log_uniform(0.1, 10)),
                           per_slice=(draw(log_uniform(10, 1000)), draw(log_uniform(10, 1000))),
                           latency_ms=(draw(log_uniform(1, 40)), draw(log_uniform(1, 40))))


@st.composite
def pools(draw) -> tuple[list[dict], int, float]:
    documents = [draw(system(f"system-{i}")) for i in range(draw(st.integers(1, 2)))]
    return documents, draw(st.sampled_from([1, 2])), draw(log_uniform(1e-2, 1e2))


def capacity_of(path, documents: list[dict], gpus: int) -> dict:
    path.write_text(yaml.safe_dump_all(documents))
    result = CliRunner().invoke(main, ["capacity", str(path), "--gpus", str(gpus), *OPTIONS])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    return row


def scaled(documents: list[dict], factor: float) -> list[dict]:
    out = list(yaml.safe_load_all(yaml.safe_dump_all(documents)))
    for document in out:
        document["spec"]["demandRequestsPerSecond"] *= factor
    return out


def check_scaling_leaves_capacity_unchanged(tmp_path, documents: list[dict], gpus: int, factor: float) -> None:
    before = capacity_of(tmp_path / "systems.yaml", documents, gpus)
    after = capacity_of(tmp_path / "scaled.yaml", scaled(documents, factor), gpus)
    assert before["unservable"] == after["unservable"]
    gap = max(before["solver"]["mip_gap"], after["solver"]["mip_gap"]) + TOLERANCE
    for name, served in before["max_demand_rps"].items():
        assert math.isclose(served, after["max_demand_rps"][name], rel_tol=gap, abs_tol=1e-9), (
            f"{name}: {served} req/s, {after['max_demand_rps'][name]} req/s with every demand x{factor} "
            f"(gap {gap:.2g})")


_settings = dict(derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings(max_examples=3, **_settings)
@given(pool=pools())
def test_scaling_every_demand_by_one_factor_leaves_the_capacity_unchanged(tmp_path, pool):
    check_scaling_leaves_capacity_unchanged(tmp_path, *pool)


@pytest.mark.slow
@settings(max_examples=60, **_settings)
@given(pool=pools())
def test_scaling_every_demand_by_one_factor_leaves_the_capacity_unchanged_many_pools(tmp_path, pool):
    check_scaling_leaves_capacity_unchanged(tmp_path, *pool)


def test_a_system_whose_demand_is_zero_is_refused_naming_the_field(tmp_path):
    documents = [two_task_system("idle", demand=0), two_task_system("busy", demand=50)]
    path = tmp_path / "systems.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    result = CliRunner().invoke(main, ["capacity", str(path), "--gpus", "1", *OPTIONS])
    assert result.exit_code == BAD_INPUT
    assert f"{path}: system 'idle': spec.demandRequestsPerSecond: 0 req/s" in result.output
