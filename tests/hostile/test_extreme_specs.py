"""Specs with extreme but valid numbers: every printed plan passes the independent checker and covers its demand.

Hypothesis (fixed seed, 50 examples) draws systems whose numbers sit at the
edges of the accepted ranges: demands from 1e-3 to 1e6 req/s, edge factors
from 1e-3 to 1e3 (the demand they lead to kept within the planner's limit),
latency SLOs from 1 ms to an hour, accuracies down to 1e-6, profiled
throughputs from 1e-3 to 1e7 req/s and latencies from 1e-3 ms to 10 s,
pools of 1 to 10,000 GPUs. `tessera plan --output json` plans it; the test
reads the printed plan back and

- runs `check_plan` (which recomputes every figure from the specs) on it;
- recomputes, apart from the checker, that each task's replicas carry the
  demand its system is said to serve (spec demand x edge factors x served
  fraction, at 1 / (1 + headroom) of profiled throughput);
- requires exit 0 exactly when all demand is served and 3 when part of it
  is; a refusal (exit 2) fails the test, since every number is in range. A
  solve that finds no plan (exit 1: SLO out of reach, or the time limit) is
  allowed: it claims nothing.
"""

from __future__ import annotations

import json
import math

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tessera.cli import main
from tessera.planner.catalog import gpu_product
from tessera.planner.checker import check_plan
from tessera.planner.features import Features
from tessera.planner.model import Pool
from tessera.planner.plan import Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

GPU = "A100-80GB"
LEVELS = 4
TIME_LIMIT_S = 4


def log_uniform(low: float, high: float):
    return st.floats(math.log10(low), math.log10(high)).map(lambda e: float(f"{10 ** e:.6g}"))


@st.composite
def systems(draw):
    tasks = draw(st.integers(1, 3))
    names = [f"task-{i}" for i in range(tasks)]
    variants = {t: [f"{t}-v{j}" for j in range(draw(st.integers(1, 2)))] for t in names}
    edges = [{"source": names[i], "target": names[i + 1], "factor": draw(log_uniform(1e-3, 1e3))}
             for i in range(tasks - 1)]
    demand = draw(st.one_of(st.just(0.0), log_uniform(1e-3, 1e6)))
    path_factor = math.prod(e["factor"] for e in edges)
    demand = min(demand, 1e7 / max(1.0, path_factor * (1.0 + 1e-6)))  # inside the planner's demand limit
    profiles = []
    for t in names:
        for v in variants[t]:
            throughput = draw(log_uniform(1e-3, 1e6))
            latency = draw(log_uniform(1e-3, 1e4))
            for mig in gpu_product(GPU).profiles:
                profiles.append({"task": t, "variant": v, "gpuProduct": GPU, "migProfile": mig.name, "batchSize": 1,
                                 "latencyMilliseconds": latency, "throughputRequestsPerSecond": float(f"{throughput * mig.compute_slices:.6g}")})
    return {
        "apiVersion": "tessera.ai/v1alpha1",
        "kind": "CompoundInferenceSystem",
        "metadata": {"name": "extreme"},
        "spec": {
            "slo": {"latencyMilliseconds": draw(log_uniform(1, 3.6e6)), "accuracy": draw(log_uniform(1e-3, 1))},
            "demandRequestsPerSecond": demand,
            "priority": draw(st.sampled_from(["cost", "accuracy"])),
            "tasks": [{"name": t, "variants": [{"name": v, "accuracy": draw(log_uniform(1e-6, 1)),
                                                  "gpuMemoryGigabytes": draw(log_uniform(1e-3, 10))}
                                                 for v in variants[t]]} for t in names],
            "edges": edges,
            "profiles": profiles,
        },
    }


def served_demand_is_covered(plan: Plan, system, headroom: float) -> list[str]:
    """Apart from the checker: the replicas of every task carry its share of the demand served."""
    summary = next(s for s in plan.systems if s.system == system.name)
    fraction = summary.served_rps / system.demand_rps if system.demand_rps > 0 else 0.0
    if fraction <= 0:
        return []
    chosen = {t.task: t.variant for t in plan.tasks if t.system == system.name}
    problems = []
    for task, demand in system.demand(chosen).items():
        task_plan = plan.task(system.name, task)
        capacity = sum(c.replicas * c.segment_throughput_rps for c in task_plan.configs) / (1 + headroom)
        needed = demand * fraction
        if capacity < needed * (1 - 1e-6) - 1e-9:
            problems.append(f"{task}: capacity {capacity} req/s for {needed} req/s served")
    return problems


@settings(max_examples=50, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(document=systems(), gpus=st.sampled_from([1, 2, 7, 100, 10_000]),
       headroom=st.sampled_from([0.0, 0.1, 10.0]))
def test_every_printed_plan_passes_the_checker_and_covers_the_demand_it_claims(tmp_path_factory, document, gpus,
                                                                                 headroom):
    event(f"exit {plan_and_check(tmp_path_factory.mktemp('extreme') / 'system.yaml', document, gpus, headroom)}")


def test_a_fast_segment_serving_little_demand_gets_a_replica(tmp_path):
    """Found by the property test: a 1e5 req/s segment serving 0.6 req/s got its load but no replica."""
    profiles = [{"task": task, "variant": f"{task}-v0", "gpuProduct": GPU, "migProfile": mig.name, "batchSize": 1,
                 "latencyMilliseconds": 1.0, "throughputRequestsPerSecond": per_slice * mig.compute_slices}
                for task, per_slice in (("task-0", 1e5), ("task-1", 1.0)) for mig in gpu_product(GPU).profiles]
    document = {
        "apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem", "metadata": {"name": "extreme"},
        "spec": {"slo": {"latencyMilliseconds": 10.0, "accuracy": 1.0}, "demandRequestsPerSecond": 1.0,
                 "tasks": [{"name": t, "variants": [{"name": f"{t}-v0", "accuracy": 1.0, "gpuMemoryGigabytes": 1.0}]}
                           for t in ("task-0", "task-1")],
                 "edges": [{"source": "task-0", "target": "task-1", "factor": 10.0}], "profiles": profiles},
    }
    assert plan_and_check(tmp_path / "system.yaml", document, gpus=1, headroom=0.0) == 3


def plan_and_check(path, document, gpus: int, headroom: float) -> int:
    """Plan the document with the command line; check the printed plan; the exit code."""
    path.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(main, ["plan", str(path), "--gpu", GPU, "--gpus", str(gpus), "--levels", str(LEVELS),
                                       "--headroom", str(headroom), "--time-limit", str(TIME_LIMIT_S),
                                       "--output", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 3, 4), result.output
    printed = json.loads(result.stdout)
    if "kind" in printed:  # the outcome itself, printed when there is no plan at all: nothing to check
        assert printed["kind"] in ("infeasible", "time-limit"), result.output
        return result.exit_code
    plan = Plan.model_validate(printed)
    specs = load_systems(path)
    options = PlannerOptions(budget_levels=LEVELS, headroom=headroom, time_limit_s=TIME_LIMIT_S)
    store = build_profile_store(specs, GPU)
    assert check_plan(plan, specs, Pool(gpu=GPU, gpus=gpus), store, Features(), options) == []
    for system in specs:
        assert served_demand_is_covered(plan, system, headroom) == []
    assert (result.exit_code == 0) == plan.fully_served
    return result.exit_code
