"""What a run measured, as plain data: violations, drops, use, latencies against the plan.

Definitions (per system, over its source requests):
- violation %: requests that finished later than the SLO, of all requests;
- drop %: requests dropped (early dropping only), of all requests;
- slice use: compute slices allocated to replicas over the pool's compute
  slices, averaged over time (a static plan's is constant);
- busy use: process-seconds spent running batches over the allocated
  process-seconds, weighted by the replicas' slices (how hard the allocated
  GPU was working);
- stage latency: arrival at a stage to its batch's completion, per request;
- path latency: source request's arrival to completion at the path's last
  task (the last task has one route in the examples, so this is the path's).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from tessera.planner.simulation.engine import RunOutput, SystemRun

SERIES_BIN_S = 10.0


class StageLatency(BaseModel):
    system: str
    task: str
    requests: int
    p50_ms: float
    p99_ms: float
    planned_ms: float


class PathLatency(BaseModel):
    system: str
    tasks: list[str]
    p50_ms: float
    p99_ms: float
    planned_ms: float


class SystemOutcome(BaseModel):
    system: str
    slo_ms: float
    requests: int
    sub_requests: int
    violation_pct: float
    drop_pct: float
    p50_ms: float
    p99_ms: float
    capacity_rps: float


class Report(BaseModel):
    trace: str
    duration_s: float
    balancing: str
    connections: int
    early_dropping: bool
    p99_over_p50: float
    systems: list[SystemOutcome]
    stages: list[StageLatency]
    paths: list[PathLatency]
    allocated_slices: int
    pool_slices: int
    busy_use_pct: float

    @property
    def slice_use_pct(self) -> float:
        return 100 * self.allocated_slices / self.pool_slices

    @property
    def source_requests(self) -> int:
        return sum(s.requests for s in self.systems)

    @property
    def violation_pct(self) -> float:
        return _weighted(self.systems, "violation_pct")

    @property
    def drop_pct(self) -> float:
        return _weighted(self.systems, "drop_pct")


class Series(BaseModel):
    """Per time bin, for the plot: demand and capacity (source req/s), latency percentiles, violations."""

    system: str
    bin_s: float
    start_s: list[float]
    demand_rps: list[float]
    capacity_rps: float
    p50_ms: list[float]
    p99_ms: list[float]
    violation_pct: list[float]
    drop_pct: list[float]


def report(output: RunOutput) -> Report:
    deployment = output.deployment
    stages, paths, systems = [], [], []
    for run in output.systems:
        systems.append(_outcome(output, run))
        stage_done = {record.stage: record for record in run.stages}
        for record in run.stages:
            stage = deployment.stages[record.stage]
            served = record.done - record.arrival
            stages.append(StageLatency(
                system=stage.system, task=stage.task, requests=int(record.arrival.size),
                p50_ms=_pct_ms(served, 50), p99_ms=_pct_ms(served, 99),
                planned_ms=1e3 * float(deployment.planned_stage_s[stage.replicas].max())))
        for members, planned_s in run.routes.paths:
            last = stage_done[members[-1]]
            latency = last.done - run.source_arrival[last.origin]
            paths.append(PathLatency(
                system=run.routes.name, tasks=[deployment.stages[m].task for m in members],
                p50_ms=_pct_ms(latency, 50), p99_ms=_pct_ms(latency, 99), planned_ms=1e3 * planned_s))
    weights = deployment.slices / deployment.processes
    allocated_s = deployment.slices.sum() * output.trace.duration_s
    # a plan that serves nothing allocates nothing: none of its (no) processes is busy
    busy_use = (output.busy_s * weights).sum() / allocated_s if allocated_s > 0 else 0.0
    policies = output.policies
    return Report(
        trace=output.trace.name, duration_s=output.trace.duration_s, balancing=policies.balancing.value,
        connections=policies.connections, early_dropping=policies.early_dropping,
        p99_over_p50=policies.p99_over_p50, systems=systems, stages=stages, paths=paths,
        allocated_slices=deployment.allocated_slices, pool_slices=deployment.pool_slices,
        busy_use_pct=100 * float(busy_use))


def series(output: RunOutput, bin_s: float = SERIES_BIN_S) -> list[Series]:
    result = []
    bins = max(1, int(np.ceil(output.trace.duration_s / bin_s)))
    for run in output.systems:
        which = np.minimum((run.source_arrival // bin_s).astype(np.int64), bins - 1)
        latency = run.latency
        dropped = np.isnan(latency)
        late = latency > run.routes.slo_s
        counts = np.bincount(which, minlength=bins)
        order = np.argsort(which, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        p50, p99 = [], []
        for b in range(bins):
            chunk = latency[order[bounds[b]:bounds[b + 1]]]
            p50.append(_pct_ms(chunk, 50))
            p99.append(_pct_ms(chunk, 99))
        share = np.maximum(counts, 1)
        result.append(Series(
            system=run.routes.name, bin_s=bin_s, start_s=list(np.arange(bins) * bin_s),
            demand_rps=list(counts / bin_s), capacity_rps=capacity_rps(output, run),
            p50_ms=p50, p99_ms=p99,
            violation_pct=list(100 * np.bincount(which, weights=late, minlength=bins) / share),
            drop_pct=list(100 * np.bincount(which, weights=dropped, minlength=bins) / share)))
    return result


def capacity_rps(output: RunOutput, run: SystemRun) -> float:
    """Source requests/s the deployment sustains: the tightest stage's throughput over its fan-out."""
    deployment = output.deployment
    multiplier = {}
    for position in run.routes.stages:
        stage = deployment.stages[position]
        if stage.is_source:
            multiplier[position] = 1.0
        for child, factor in stage.children:
            multiplier[child] = multiplier.get(child, 0.0) + multiplier[position] * factor
    return min(float(deployment.capacity_rps[deployment.stages[p].replicas].sum()) / multiplier[p]
               for p in run.routes.stages)


def _outcome(output: RunOutput, run: SystemRun) -> SystemOutcome:
    latency = run.latency
    requests = max(latency.size, 1)
    return SystemOutcome(
        system=run.routes.name, slo_ms=1e3 * run.routes.slo_s, requests=int(latency.size),
        sub_requests=int(sum(record.arrival.size for record in run.stages)),
        violation_pct=100 * float((latency > run.routes.slo_s).sum()) / requests,
        drop_pct=100 * float(np.isnan(latency).sum()) / requests,
        p50_ms=_pct_ms(latency, 50), p99_ms=_pct_ms(latency, 99), capacity_rps=capacity_rps(output, run))


def _pct_ms(values: np.ndarray, q: float) -> float:
    finite = values[~np.isnan(values)]
    return 1e3 * float(np.percentile(finite, q)) if finite.size else float("nan")


def _weighted(systems: list[SystemOutcome], field: str) -> float:
    total = sum(s.requests for s in systems)
    return sum(getattr(s, field) * s.requests for s in systems) / total if total else 0.0
