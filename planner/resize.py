"""Replicas-only re-solve: new demand, the same variants, configurations and MIG layouts.

A demand change that the running layouts can absorb should not pay for a
MILP nor move anything but replica counts: re-partitioning stops a GPU's
servers, adding a replica on an idle MIG instance does not. So, per task,
with its variant, its (segment type, batch) configurations, its latency
budget and the plan's headroom fixed, the new load is split over the
configurations as the old one was, each gets the fewest replicas whose
profiled throughput carries its load, and the replicas go onto the plan's
own MIG instances: kept where they are, new ones on idle instances of the
same profile. The result passes the planner's independent checker or is
refused (None): then only a full re-plan can serve the demand (more or
other instances, a smaller batch whose batches still fill in time, ...).

On a node pool, GPUs the plan leaves alone whose MIG layout is known (left
partitioned by an earlier plan) lend their idle instances too. The layouts
never change: a scale-down frees pods and instances, not re-partitioned
GPUs; the next full re-plan consolidates.
"""

from __future__ import annotations

import time
from collections import Counter

import highspy
import numpy as np

from tessera.planner.assignment import config_key, layout_of
from tessera.planner.catalog import COMPUTE_SLICES, gpu_product, layout_compute_slices
from tessera.planner.checker import check_plan
from tessera.planner.features import Features
from tessera.planner.highs_driver import quiet_highs
from tessera.planner.latency import (Routing, max_replica_load_rps, min_segment_load_rps, replica_dispersion,
                                     stage_latency_ms, usable_load_rps)
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.nodes import NodePool, pool_gpus
from tessera.planner.plan import ConfigPlan, GpuPlan, InstancePlan, Plan, SolverReport, SystemSummary, TaskPlan
from tessera.planner.profiles import ProfileStore
from tessera.planner.solve import PlannerOptions

STATUS = "ReplicasOnly"
RunKey = tuple[object, ...]
"""A running configuration: (system, task, variant, segment type, batch), as the assignment keys it."""


def resize_replicas(current: Plan, systems: list[SystemSpec], pool: Pool | NodePool, store: ProfileStore | None,
                    features: Features = Features(), options: PlannerOptions = PlannerOptions()) -> Plan | None:
    """`current` re-sized for the systems' demands, or None when only a full re-plan can serve them."""
    started = time.perf_counter()
    by_name = {s.name: s for s in systems}
    if {t.system for t in current.tasks} != set(by_name):
        return None  # systems came or went: not a demand-only change
    demands = {}
    for system in systems:
        variants = {t.task: t.variant for t in current.tasks if t.system == system.name}
        if set(variants) != {t.name for t in system.tasks}:
            return None
        demands.update({(system.name, task): rps for task, rps in system.demand(variants).items()})
    current = current.model_copy(update={"tasks": _rebased(current, systems)})
    spare = _spare_gpus(current, pool)
    counts = _replica_counts(current, spare, demands)
    if counts is None:
        return None
    tasks = []
    for task in current.tasks:
        # a task the running plan serves nothing of has no configuration to count (only a re-plan serves it)
        resized = _resize_task(task, counts.get((task.system, task.task), []), demands[(task.system, task.task)],
                               current.headroom, current.routing, current.connections)
        if resized is None:
            return None
        tasks.append(resized)
    gpus = _place(current.gpus, spare, current.tasks, tasks)
    if gpus is None:
        return None
    kept = {g.index for g in current.gpus}
    gpus = [g for g in gpus if g.index in kept or any(i.config is not None for i in g.instances)]
    plan = _finish(current, systems, tasks, gpus, time.perf_counter() - started)
    if check_plan(plan, systems, pool, store, features, options):
        return None
    return plan


def _replica_counts(current: Plan, spare: list[GpuPlan], demands: dict[tuple[str, str], float],
                    time_limit_s: float = 2.0) -> dict[tuple[str, str], list[int]] | None:
    """Per task, replicas per configuration: a small integer program on replica counts alone.

    A configuration may drop to no replica, none is added; a task's replicas carry
    its demand within their usable throughput, and fill their batches within
    its budget (at least their least load each); a MIG profile's replicas
    fit its instances in the layouts. Fewest compute slices first, then the
    fewest replicas changed (weighted so that no change outweighs a slice).
    """
    product = gpu_product(current.gpu)
    instances = Counter(i.mig_profile for g in current.gpus + spare for i in g.instances)
    columns = [(t, i, c) for t in current.tasks for i, c in enumerate(t.configs)]
    slices = [product.profile(c.segment.mig_profile).compute_slices for _, _, c in columns]
    weight = 2.0 * (len(columns) * max(instances.values(), default=1) + 1)
    h = quiet_highs()
    h.setOptionValue("time_limit", time_limit_s)
    count = len(columns)
    for (_, _, config), cost in zip(columns, slices):  # n: replicas (0 drops the configuration)
        h.addVar(0, instances[config.segment.mig_profile])
        h.changeColCost(h.getNumCol() - 1, weight * cost)
    for _ in range(2 * count):  # up and down: the change from the running replicas
        h.addVar(0, highspy.kHighsInf)
        h.changeColCost(h.getNumCol() - 1, 1.0)
    h.changeColsIntegrality(count, np.arange(count, dtype=np.int32),
                            np.full(count, highspy.HighsVarType.kInteger, dtype=np.uint8))
    for j, (_, _, config) in enumerate(columns):  # n - up + down = running replicas
        h.addRow(config.replicas, config.replicas, 3, np.array([j, count + j, 2 * count + j], dtype=np.int32),
                 np.array([1.0, -1.0, 1.0]))
    by_task: dict[tuple[str, str], list[int]] = {}
    for j, (task, _, _) in enumerate(columns):
        by_task.setdefault((task.system, task.task), []).append(j)
    for key, js in by_task.items():
        task = columns[js[0]][0]
        usable = [_most_load(task, columns[j][2], current.headroom, current.routing, current.connections) for j in js]
        least = [_least_load(task, columns[j][2]) for j in js]
        index = np.array(js, dtype=np.int32)
        h.addRow(demands[key], highspy.kHighsInf, len(js), index, np.array(usable))
        h.addRow(-highspy.kHighsInf, demands[key], len(js), index, np.array(least))
    own = Counter(i.mig_profile for g in current.gpus for i in g.instances)
    for profile in {c.segment.mig_profile for _, _, c in columns}:
        # Instances of spare GPUs cost as much as opening a whole GPU: taken only where the plan's own run out.
        h.addVar(0, instances[profile] - own[profile])
        h.changeColCost(h.getNumCol() - 1, weight * COMPUTE_SLICES)
        js = [j for j, (_, _, c) in enumerate(columns) if c.segment.mig_profile == profile]
        h.addRow(-highspy.kHighsInf, own[profile], len(js) + 1, np.array(js + [h.getNumCol() - 1], dtype=np.int32),
                 np.array([1.0] * len(js) + [-1.0]))
    h.run()
    if h.modelStatusToString(h.getModelStatus()) != "Optimal":
        return None
    values = h.getSolution().col_value
    counts: dict[tuple[str, str], list[int]] = {}
    for j, (task, _, _) in enumerate(columns):
        counts.setdefault((task.system, task.task), []).append(int(round(values[j])))
    return counts


def _rebased(current: Plan, systems: list[SystemSpec]) -> list[TaskPlan]:
    """The plan's tasks with their bulk shares taken of the new least demands: a least demand is the source
    demand times factors, so it moves with the system's demand (a re-size serves all of it)."""
    ratio = {}
    for system in systems:
        old = next(s for s in current.systems if s.system == system.name)
        ratio[system.name] = system.demand_rps / old.demand_rps if old.demand_rps > 0 else 0.0
    return [t.model_copy(update={"share_base_rps": t.share_base_rps * ratio[t.system]}) for t in current.tasks]


def _resize_task(task: TaskPlan, replicas: list[int], demand_rps: float, headroom: float, routing: Routing,
                 connections: int) -> TaskPlan | None:
    """The task with these replicas and its demand split so that every configuration's batches fill within
    the budget (at least its least load per replica) and none runs past its usable throughput."""
    kept = [(n, c) for n, c in zip(replicas, task.configs) if n > 0]
    if not kept:
        return None
    replicas, configs_kept = [n for n, _ in kept], [c for _, c in kept]
    least = [n * _least_load(task, c) for n, c in kept]
    most = [n * _most_load(task, c, headroom, routing, connections) for n, c in kept]
    spare = demand_rps - sum(least)
    room = sum(m - low for m, low in zip(most, least))
    if spare < 0 or spare > room * (1 + 1e-9):
        return None  # too many replicas to fill their batches, or too few: only a re-plan changes that
    share = spare / room if room > 0 else 0.0
    configs = []
    for n, low, high, config in zip(replicas, least, most, configs_kept):
        load = low + (high - low) * share
        configs.append(config.model_copy(update={
            "replicas": n, "load_rps": load,
            "stage_latency_ms": stage_latency_ms(config.batch_latency_ms, config.batch, config.segment.mps, load / n,
                                                 config.segment_throughput_rps,
                                                 _replica_dispersion(task, load / n, routing, connections))}))
    if any(c.stage_latency_ms > task.budget_ms * (1 + 1e-9) for c in configs if c.load_rps > 0):
        return None
    return task.model_copy(update={"demand_rps": demand_rps, "configs": configs,
                                   "stage_latency_ms": max(c.stage_latency_ms for c in configs)})


def _most_load(task: TaskPlan, config: ConfigPlan, headroom: float, routing: Routing, connections: int) -> float:
    """Per replica: the usable throughput, or less where the p99 queueing wait must fit the task's budget
    (with the replica's share of the bulk where the plan splits bulks)."""
    round_requests = config.segment.mps * config.batch
    usable = usable_load_rps(config.batch_latency_ms, config.segment_throughput_rps, 1 / (1 + headroom),
                             task.arrival_dispersion, task.budget_ms, round_requests)
    if task.share_base_rps <= 0 or task.arrival_dispersion <= 1:
        return usable
    return min(config.segment_throughput_rps / (1 + headroom),
               max_replica_load_rps(config.batch_latency_ms, config.segment_throughput_rps, task.budget_ms,
                                    task.arrival_dispersion - 1, task.share_base_rps, routing, connections,
                                    round_requests=round_requests))


def _replica_dispersion(task: TaskPlan, load_per_replica_rps: float, routing: Routing, connections: int) -> float:
    if task.arrival_dispersion <= 1:
        return task.arrival_dispersion
    return replica_dispersion(task.arrival_dispersion - 1, load_per_replica_rps, task.share_base_rps, routing,
                              connections)


def _least_load(task: TaskPlan, config: ConfigPlan) -> float:
    """Per replica: the least load that fills a batch within the task's budget."""
    return min_segment_load_rps(config.batch_latency_ms, config.batch, config.segment.mps, task.budget_ms) * (1 + 1e-9)


def _spare_gpus(current: Plan, pool: Pool | NodePool) -> list[GpuPlan]:
    """GPUs of a node pool that the plan leaves alone but whose MIG layout is known: idle instances to use."""
    if not isinstance(pool, NodePool):
        return []
    used = {(g.node, g.device) for g in current.gpus}
    return [GpuPlan(index=g.index, node=g.node, device=g.device, layout=list(g.current),
                    instances=[InstancePlan(mig_profile=name) for name, count in g.current for _ in range(count)])
            for g in pool_gpus(pool).free if g.current and (g.node, g.device) not in used]


def _place(old_gpus: list[GpuPlan], spare: list[GpuPlan], old_tasks: list[TaskPlan],
           new_tasks: list[TaskPlan]) -> list[GpuPlan] | None:
    """Replicas on the plan's own instances: kept ones in place, new ones on idle instances of their profile."""
    old = {(t.system, t.task): t for t in old_tasks}
    wanted: Counter[RunKey] = Counter()
    index_of: dict[RunKey, tuple[str, str, int, str]] = {}
    for task in new_tasks:
        for i, config in enumerate(task.configs):
            wanted[config_key(task, config)] += config.replicas
            index_of[config_key(task, config)] = (task.system, task.task, i, config.segment.mig_profile)
    placed: list[GpuPlan] = []
    idle: list[tuple[int, int]] = []  # (gpu position, instance position)
    own_gpus = len(old_gpus)
    for g, gpu in enumerate(old_gpus + spare):
        instances = []
        for j, instance in enumerate(gpu.instances):
            key = _running_config(old, instance)
            if key is not None and wanted[key] > 0:
                wanted[key] -= 1
                system, name, index, _ = index_of[key]
                instances.append(InstancePlan(mig_profile=instance.mig_profile, system=system, task=name,
                                              config=index))
            else:
                instances.append(InstancePlan(mig_profile=instance.mig_profile))
                idle.append((g, j))
        placed.append(gpu.model_copy(update={"instances": instances}))
    for key, count in wanted.items():
        system, name, index, profile = index_of[key]
        for _ in range(count):
            # The plan's own GPUs first, then spare GPUs already opened: the fewest GPUs in use.
            candidates = [(g, j) for g, j in idle if placed[g].instances[j].mig_profile == profile]
            slot = min(candidates, key=lambda c: (c[0] >= own_gpus, not _in_use(placed[c[0]]), c), default=None)
            if slot is None:
                return None  # more instances of this profile than the layouts hold
            idle.remove(slot)
            placed[slot[0]].instances[slot[1]] = InstancePlan(mig_profile=profile, system=system, task=name,
                                                              config=index)
    assert all(layout_of(a) == layout_of(b) for a, b in zip(placed, old_gpus + spare))
    return placed


def _in_use(gpu: GpuPlan) -> bool:
    return any(i.config is not None for i in gpu.instances)


def _running_config(old: dict[tuple[str, str], TaskPlan], instance: InstancePlan) -> RunKey | None:
    if instance.config is None or instance.system is None or instance.task is None:
        return None
    task = old.get((instance.system, instance.task))
    return config_key(task, task.configs[instance.config]) if task is not None else None


def _finish(current: Plan, systems: list[SystemSpec], tasks: list[TaskPlan], gpus: list[GpuPlan],
            seconds: float) -> Plan:
    by_key = {(t.system, t.task): t for t in tasks}
    paths = [p.model_copy(update={"latency_ms": sum(by_key[(p.system, t)].stage_latency_ms for t in p.tasks)})
             for p in current.paths]
    summaries = []
    for system in systems:
        own = [p for p in paths if p.system == system.name]
        old = next(s for s in current.systems if s.system == system.name)
        summaries.append(SystemSummary(
            system=system.name, demand_rps=system.demand_rps, served_rps=system.demand_rps,
            latency_slo_ms=old.latency_slo_ms, worst_path_latency_ms=max(p.latency_ms for p in own),
            accuracy_slo=old.accuracy_slo, worst_path_accuracy=old.worst_path_accuracy))
    report = SolverReport(status=STATUS, stages=[], objective={}, mip_gap=0.0, build_s=0.0, solve_s=seconds,
                          variables=0, constraints=0)
    product = gpu_product(current.gpu)
    return current.model_copy(update={
        "tasks": tasks, "gpus": gpus, "paths": paths, "systems": summaries, "solver": report, "diagnosis": [],
        "gpus_used": len(gpus), "slices_used": sum(layout_compute_slices(product, layout_of(g)) for g in gpus),
        "profile_sources": dict(Counter(c.source.value for t in tasks for c in t.configs))})
