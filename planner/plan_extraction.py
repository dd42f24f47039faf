"""Turn a solved MILP into the plain-data plan, recomputing latencies from the loads."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyomo.environ as pyo

from tessera.planner.catalog import layout_compute_slices
from tessera.planner.features import Features
from tessera.planner.latency import arrival_dispersion, replica_dispersion, stage_latency_ms
from tessera.planner.milp import CompoundMilp, largest_factor
from tessera.planner.model import SystemSpec
from tessera.planner.plan import ConfigPlan, GpuPlan, PathPlan, Plan, SolverReport, SystemSummary, TaskPlan


@dataclass
class ExtractedPlan:
    milp: CompoundMilp
    features: Features
    headroom: float
    latency_spread: float
    tasks: list[TaskPlan]
    paths: list[PathPlan]
    systems: list[SystemSummary]

    def finish(self, gpus: list[GpuPlan], solver: SolverReport) -> Plan:
        data = self.milp.data
        counts = self.milp.layout_counts() + [(layout, count) for layout, _, count in self.milp.fixed_counts()]
        sources = Counter(c.source.value for t in self.tasks for c in t.configs)
        return Plan(
            gpu=data.gpu.name, pool_gpus=data.pool_gpus, features=self.features.label, headroom=self.headroom,
            queueing=data.queueing, latency_spread=self.latency_spread, routing=data.routing,
            connections=data.connections,
            tasks=self.tasks, gpus=gpus, paths=self.paths, systems=self.systems,
            gpus_used=sum(count for _, count in counts),
            slices_used=sum(layout_compute_slices(data.gpu, layout) * count for layout, count in counts),
            profile_sources=dict(sources), solver=solver,
        )


def _value(var: Any) -> float:
    """A variable's solution value; one that HiGHS never saw (in no constraint) is 0."""
    return pyo.value(var, exception=False) or 0.0


def extract_plan(milp: CompoundMilp, features: Features, headroom: float, latency_spread: float) -> ExtractedPlan:
    by_key: dict[tuple[str, str], TaskPlan] = {}
    # Bulk shares of a least demand hold only where all of it is served (otherwise the whole-bulk rows held).
    split = milp.data.splits_bulks and all(_value(milp.m.phi[s.name]) >= 1 - 1e-6 for s in milp.data.systems)
    for system in milp.data.systems:
        for task in system.topological_order:
            by_key[(system.name, task)] = _task_plan(milp, system, task, by_key, split)
    tasks = [by_key[(system.name, task.name)] for system in milp.data.systems for task in system.tasks]
    paths = [
        PathPlan(
            system=system.name, tasks=list(path),
            latency_ms=sum(by_key[(system.name, t)].stage_latency_ms for t in path),
            budget_ms=sum(by_key[(system.name, t)].budget_ms for t in path),
            accuracy=system.path_accuracy(path, {t: by_key[(system.name, t)].variant for t in path}),
        )
        for system in milp.data.systems for path in system.paths
    ]
    systems = [_summary(milp, system, paths) for system in milp.data.systems]
    return ExtractedPlan(milp, features, headroom, latency_spread, tasks, paths, systems)


def task_dispersion(milp: CompoundMilp, system: SystemSpec, task: str,
                    parents: dict[tuple[str, str], TaskPlan]) -> float:
    """1 + the largest bulk a parent's configurations may hand the task at once, as the MILP bounded it:
    the edge's largest factor x the parent's largest batch; 1 at a source."""
    bulks = [largest_factor(milp.data, system, edge) * max((c.batch for c in parent.configs), default=0)
             for edge in system.parents(task) for parent in [parents[(system.name, edge.source)]]]
    return arrival_dispersion(max(bulks, default=0.0))


def _task_plan(milp: CompoundMilp, system: SystemSpec, task: str, parents: dict[tuple[str, str], TaskPlan],
               split: bool) -> TaskPlan:
    m, data = milp.m, milp.data
    key = (system.name, task)
    variant = max(data.variants[key], key=lambda v: _value(m.y[system.name, task, v]))
    dispersion = task_dispersion(milp, system, task, parents) if data.queueing else 0.0
    base = milp.share_base.get(key, 0.0) if split else 0.0
    levels = data.levels[system.name]
    level = max(range(len(levels)), key=lambda k: _value(m.z[system.name, task, k]))
    configs = []
    for o in milp.by_task[key]:
        replicas = round(_value(m.n[o]))
        if replicas == 0:
            continue
        c = milp.candidate(o)
        load = max(_value(m.x[o]), 0.0)
        configs.append(ConfigPlan(
            segment=c.segment, batch=c.batch, replicas=replicas, batch_latency_ms=c.latency_ms,
            segment_throughput_rps=c.throughput_rps, load_rps=load,
            stage_latency_ms=stage_latency_ms(c.latency_ms, c.batch, c.segment.mps, load / replicas,
                                              c.throughput_rps,
                                              _replica_dispersion(dispersion, load / replicas, base, data)),
            source=c.source, latency_spread=c.latency_spread,
        ))
    return TaskPlan(
        system=system.name, task=task, variant=variant,
        normalised_accuracy=system.task(task).normalised_accuracy(variant),
        demand_rps=_value(m.D[system.name, task]), budget_ms=levels[level],
        stage_latency_ms=max((c.stage_latency_ms for c in configs), default=0.0),
        configs=configs, arrival_dispersion=dispersion, share_base_rps=base,
    )


def _replica_dispersion(dispersion: float, load_per_replica_rps: float, base_rps: float, data: Any) -> float:
    """One replica's index of dispersion: its share of the bulk (1 + bulk = the task's; 0 stays no wait)."""
    if dispersion <= 1:
        return dispersion
    return replica_dispersion(dispersion - 1, load_per_replica_rps, base_rps, data.routing, data.connections)


def _summary(milp: CompoundMilp, system: SystemSpec, paths: list[PathPlan]) -> SystemSummary:
    own = [p for p in paths if p.system == system.name]
    return SystemSummary(
        system=system.name, demand_rps=system.demand_rps,
        served_rps=system.demand_rps * _value(milp.m.phi[system.name]),
        latency_slo_ms=system.slo.latency_ms,
        worst_path_latency_ms=max(p.latency_ms for p in own),
        accuracy_slo=system.slo.accuracy,
        worst_path_accuracy=min(p.accuracy for p in own),
    )
