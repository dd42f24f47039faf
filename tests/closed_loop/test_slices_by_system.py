"""Slice use per system (issue 31): feature sets that serve different systems are compared on the systems both
serve, so the loop counts the slices each system's replicas hold."""

import numpy as np
import pytest

from tessera.closed_loop import ClosedLoop, LoopResult
from tessera.planner.catalog import gpu_product
from tessera.planner.simulation.workloads import RateTrace
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems
from tessera.shipped import example

FLAT = RateTrace("flat", np.ones(120))
GPU = "H100-80GB"


@pytest.fixture(scope="module")
def loop() -> ClosedLoop:
    systems = load_systems(example("single-model.yaml")) + load_systems(example("social-media.yaml"))
    return ClosedLoop(systems, GPU, 2, FLAT, PlannerOptions())


@pytest.fixture(scope="module")
def result(loop) -> LoopResult:
    return loop.run()


def test_the_systems_slices_add_up_to_the_allocated_slices(result):
    assert len(result.system_slice_s) == len(result.systems) == 2
    assert sum(result.system_slice_s) == pytest.approx(result.allocated_slice_s)


def test_each_systems_slices_are_its_planned_instances_for_the_whole_trace(loop, result):
    plan = loop.first_plan(loop.start_rates())
    product = gpu_product(GPU)
    for name, slice_s in zip((s.system for s in result.systems), result.system_slice_s):
        held = sum(product.profile(i.mig_profile).compute_slices
                   for g in plan.gpus for i in g.instances if i.system == name)
        assert held > 0
        assert slice_s == pytest.approx(held * FLAT.duration_s)


def test_slice_use_of_some_systems_counts_only_theirs(result):
    first = result.systems[0].system
    assert 0 < result.slice_use_pct_of([first]) < result.slice_use_pct
    assert result.slice_use_pct_of([s.system for s in result.systems]) == pytest.approx(result.slice_use_pct)
