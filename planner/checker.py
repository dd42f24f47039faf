"""An independent plan checker: re-verifies a Plan against the specs and the pool.

The checker trusts nothing the planner computed. From the plan it reads only
the decisions (variant per task, configurations with replicas and loads,
budgets, GPU layouts and which instance serves which configuration) and the
figures it claims (demands, latencies, accuracies, counts); it recomputes
every figure from the specs, the pool and the GPU catalog's profile
definitions and reports every constraint the plan breaks, in words.

It shares no code with the MILP: valid MIG layouts are decided here by
placing the layout's instances on the GPU's memory slices by backtracking
(the catalog's `valid_layouts` is not used), demand is recomputed from the
spec's edges, and stage latency is recomputed from the model stated in
`latency.py` (written out again below, not imported).

`check_plan` returns a list of violations; an empty list means the plan is
valid. Numbers are compared with a relative tolerance of about 1e-6.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import Any

from tessera.planner.catalog import COMPUTE_SLICES, MEMORY_SLICES, GpuProduct, MigProfile, gpu_product
from tessera.planner.features import Features
from tessera.planner.latency import Routing
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.nodes import NodePool
from tessera.planner.quota import InstanceQuota, quota_violations
from tessera.planner.plan import ConfigPlan, GpuPlan, PathPlan, Plan, SystemSummary, TaskPlan
from tessera.planner.profiles import ProfileSource, ProfileStore

REL_TOL = 1e-6
ABS_TOL = 1e-6
DEFAULT_BUDGET_LEVELS = 20


def close(a: float, b: float, rel: float = REL_TOL, abs_: float = ABS_TOL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def at_most(a: float, b: float, rel: float = REL_TOL, abs_: float = ABS_TOL) -> bool:
    """a <= b up to the tolerance."""
    return a <= b + max(abs_, rel * max(abs(a), abs(b)))


def at_least(a: float, b: float, rel: float = REL_TOL, abs_: float = ABS_TOL) -> bool:
    return at_most(b, a, rel, abs_)


# ---------------------------------------------------------------------------
# MIG placement, derived here from the placement rules
# ---------------------------------------------------------------------------

def layout_placement(gpu: GpuProduct, counts: dict[str, int]) -> list[tuple[str, int]] | None:
    """Start slices for every instance of the layout, or None when it cannot be placed.

    Rules: memory slices 0..7; an instance of a profile occupies
    `memory_slices` consecutive slices from one of the profile's `starts`;
    instances do not overlap; compute slices add up to at most 7; at most
    `max_count` instances of a profile.
    """
    profiles: list[MigProfile] = []
    for name, count in counts.items():
        profile = gpu.profile(name)
        if count < 0 or count > profile.max_count:
            return None
        profiles += [profile] * count
    if sum(p.compute_slices for p in profiles) > COMPUTE_SLICES:
        return None
    # Place the biggest instances first (fewer choices, earlier failure); the
    # search is complete whatever the order.
    profiles.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    return _place(tuple(profiles), frozenset())


@cache
def _place(profiles: tuple[MigProfile, ...], used: frozenset[int]) -> list[tuple[str, int]] | None:
    if not profiles:
        return []
    first, rest = profiles[0], profiles[1:]
    for start in first.starts:
        cells = set(range(start, start + first.memory_slices))
        if max(cells) >= MEMORY_SLICES or min(cells) < 0 or cells & used:
            continue
        placed = _place(rest, used | frozenset(cells))
        if placed is not None:
            return [(first.name, start)] + placed
    return None


def layout_is_valid(gpu: GpuProduct, counts: dict[str, int]) -> bool:
    return layout_placement(gpu, counts) is not None


# ---------------------------------------------------------------------------
# Stage latency, as stated in latency.py
# ---------------------------------------------------------------------------

def recomputed_stage_latency_ms(config: ConfigPlan, dispersion: float) -> float:
    """batch latency + max(batch latency, batch formation time, batch latency x (1 + the rounds the queue
    ahead takes)); the wait is ln(100) / 2 x lam D / (mu (mu - lam)) per replica, none at dispersion D = 0,
    and its mu x wait requests ahead go mps x batch per round."""
    lat, b, k = config.batch_latency_ms, config.batch, config.segment.mps
    if config.replicas <= 0 or (b > 1 and config.load_rps <= 0):
        return math.inf
    per_replica_rps, mu = config.load_rps / config.replicas, config.segment_throughput_rps
    waiting_ms = lat if b == 1 else max(lat, (b - 1) / (per_replica_rps / k) * 1000.0)
    if dispersion > 0 and per_replica_rps > 0:
        ahead = (math.inf if per_replica_rps >= mu else
                 math.log(100) / 2 * per_replica_rps * dispersion / (mu - per_replica_rps))
        rounds = max(0, math.floor(ahead / (k * b) - 1e-4)) if ahead < math.inf else math.inf
        waiting_ms = max(waiting_ms, lat * (1 + rounds))
    return lat + waiting_ms


def replica_bulk_share(share: float, routing: Routing, connections: int) -> float:
    """The part of a bulk one replica with this share of the task's load sees: all of it without a split,
    its share under per-request routing, and behind a Service the p99 of how many of the `connections`
    land on it (Binomial(connections, share), at least one) over `connections`."""
    if routing is Routing.ONE_REPLICA:
        return 1.0
    share = min(1.0, max(0.0, share))
    if routing is Routing.PER_REQUEST:
        return share
    held, below = 0, (1 - share) ** connections
    while below < 0.99 and held < connections:
        held += 1
        below += math.comb(connections, held) * share ** held * (1 - share) ** (connections - held)
    return min(1.0, max(held, 1) / connections)


def config_dispersion(task_plan: TaskPlan, config: ConfigPlan, routing: Routing, connections: int) -> float:
    """One replica's arrivals' index of dispersion: 1 + its part of the task's largest bulk (the task's
    dispersion less 1), taken of the plan's share base; the task's own without a base."""
    dispersion, base = task_plan.arrival_dispersion, task_plan.share_base_rps
    if dispersion <= 1 or base <= 0 or config.replicas <= 0:
        return dispersion
    return 1 + (dispersion - 1) * replica_bulk_share(config.load_rps / config.replicas / base, routing, connections)


def least_task_demand(system: SystemSpec, task: str, features: Features) -> float:
    """The source demand times, edge by edge, the smallest factor over the parent's allowed variants,
    summed over parents: the least demand any variant choice puts on the task."""
    def allowed(name: str) -> list[str]:
        t = system.task(name)
        return [v.name for v in t.variants if features.accuracy_scaling or v.accuracy == t.best_accuracy]
    parents = system.parents(task)
    if not parents:
        return system.demand_rps
    return sum(least_task_demand(system, e.source, features) * min(e.factor_for(v) for v in allowed(e.source))
               for e in parents)


def least_dispersion(system: SystemSpec, task: str, task_plans: dict[tuple[str, str], TaskPlan],
                     queueing: bool) -> float:
    """0 without queueing; else 1 + the largest factor x batch a parent's configurations hand over at once."""
    if not queueing:
        return 0.0
    bulks = [0.0]
    for edge in system.parents(task):
        parent = task_plans.get((system.name, edge.source))
        if parent is not None and parent.configs:
            bulks.append(edge.factor_for(parent.variant) * max(c.batch for c in parent.configs))
    return 1.0 + max(bulks)


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------

def check_plan(
    plan: Plan,
    systems: list[SystemSpec],
    pool: Pool | NodePool,
    store: ProfileStore | None = None,
    features: Features = Features(),
    options: Any = None,
    quotas: Sequence[InstanceQuota] = (),
) -> list[str]:
    """Every constraint the plan breaks, in words; an empty list when it is valid.

    On a NodePool every GPU of the plan must be a named GPU of a node that is
    not left out, with a known layout; nodes where others hold instances
    keep their layouts and leave the held instances free, and so do nodes
    kept for running systems (`kept_for`, nothing held); a GPU lent only to
    systems above a poolPriority (`usable_above`) carries none of the others.

    `options` is a `PlannerOptions` (or anything with `headroom`,
    `budget_levels` and `batches`); without it the plan's own headroom and 20
    budget levels are assumed and batch sizes are not restricted.
    """
    return _Checker(plan, systems, pool, store, features, options).run() + quota_violations(plan, quotas)


class _Checker:
    def __init__(self, plan: Plan, systems: list[SystemSpec], pool: Pool | NodePool, store: ProfileStore | None,
                 features: Features, options: Any) -> None:
        self.plan: Plan = plan
        self.systems: list[SystemSpec] = systems
        self.pool = pool
        self.nodes: NodePool | None = pool if isinstance(pool, NodePool) else None
        # On nodes: GPUs of nodes not cordoned by others whose layout is known.
        self.pool_gpus: int = pool.gpus if not isinstance(pool, NodePool) else len(
            [layout for node in pool.nodes if node.cordoned_by != "others" for layout in node.gpus if layout is not None])
        self.store: ProfileStore | None = store
        self.features: Features = features
        self.headroom: float = getattr(options, "headroom", plan.headroom)
        self.queueing: bool = getattr(options, "queueing", plan.queueing)
        self.latency_spread: float = getattr(options, "latency_spread", plan.latency_spread)
        self.routing: Routing = getattr(options, "routing", plan.routing)
        self.connections: int = getattr(options, "connections", plan.connections)
        self.levels: int = getattr(options, "budget_levels", DEFAULT_BUDGET_LEVELS)
        self.batches = getattr(options, "batches", None)
        self.max_batch = getattr(options, "max_batch", None)
        self.max_mps = getattr(options, "max_mps", None)
        self.errors: list[str] = []
        self.gpu: GpuProduct | None = None

    def fail(self, message: str) -> None:
        self.errors.append(message)

    @property
    def product(self) -> GpuProduct:
        """The pool's GPU product: `run` checks nothing past the pool without one."""
        if self.gpu is None:
            raise RuntimeError("the pool's GPU product is unknown")
        return self.gpu

    def run(self) -> list[str]:
        self.check_pool()
        if self.gpu is None:
            return self.errors
        task_plans = self.check_task_set()
        names = {s.name for s in self.systems}
        for summary in self.plan.systems:
            if summary.system not in names:
                self.fail(f"plan summarises system {summary.system!r}, which is not among the specs")
        for path in self.plan.paths:
            if path.system not in names:
                self.fail(f"plan lists a path of system {path.system!r}, which is not among the specs")
        for system in self.systems:
            self.check_system(system, task_plans)
        self.check_gpus(task_plans)
        sources = Counter(c.source.value for t in self.plan.tasks for c in t.configs)
        if dict(sources) != {k: v for k, v in self.plan.profile_sources.items() if v}:
            self.fail(f"profile sources {self.plan.profile_sources} do not count its configurations' sources "
                      f"{dict(sources)}")
        return self.errors

    # -- pool ------------------------------------------------------------
    def check_pool(self) -> None:
        plan, pool = self.plan, self.pool
        if plan.gpu != pool.gpu:
            self.fail(f"plan is for GPU product {plan.gpu!r} but the pool has {pool.gpu!r}")
        if plan.pool_gpus != self.pool_gpus:
            self.fail(f"plan says the pool has {plan.pool_gpus} GPUs but it has {self.pool_gpus}")
        if not close(plan.headroom, self.headroom):
            self.fail(f"plan headroom {plan.headroom} differs from the options' headroom {self.headroom}")
        if plan.queueing != self.queueing:
            self.fail(f"plan queueing {plan.queueing} differs from the options' queueing {self.queueing}")
        if plan.routing != self.routing or plan.connections != self.connections:
            self.fail(f"plan routing {plan.routing.value} over {plan.connections} connections differs from the "
                      f"options' {self.routing.value} over {self.connections}")
        if not close(plan.latency_spread, self.latency_spread):
            self.fail(f"plan latency spread {plan.latency_spread} differs from the options' {self.latency_spread}")
        if plan.features != self.features.label:
            self.fail(f"plan features {plan.features!r} differ from the features checked {self.features.label!r}")
        try:
            self.gpu = gpu_product(pool.gpu)
        except KeyError as error:
            self.fail(str(error))

    # -- tasks -----------------------------------------------------------
    def check_task_set(self) -> dict[tuple[str, str], TaskPlan]:
        known = {(s.name, t.name) for s in self.systems for t in s.tasks}
        by_key: dict[tuple[str, str], TaskPlan] = {}
        for task_plan in self.plan.tasks:
            key = (task_plan.system, task_plan.task)
            if key not in known:
                self.fail(f"plan has task {key[0]}/{key[1]}, which no system spec has")
            elif key in by_key:
                self.fail(f"task {key[0]}/{key[1]} appears more than once in the plan (one variant per task)")
            else:
                by_key[key] = task_plan
        return by_key

    def check_system(self, system: SystemSpec, task_plans: dict[tuple[str, str], TaskPlan]) -> None:
        name = system.name
        summaries = [s for s in self.plan.systems if s.system == name]
        if len(summaries) != 1:
            self.fail(f"system {name}: plan has {len(summaries)} summaries, expected 1")
            return
        summary = summaries[0]
        if not close(summary.demand_rps, system.demand_rps):
            self.fail(f"system {name}: summary demand {summary.demand_rps} differs from the spec's {system.demand_rps}")
        served = summary.served_rps
        if not (at_least(served, 0) and at_most(served, system.demand_rps)):
            self.fail(f"system {name}: served {served} rps is outside [0, demand {system.demand_rps}]")
        fraction = served / system.demand_rps if system.demand_rps > 0 else 1.0
        fraction = min(max(fraction, 0.0), 1.0)
        if not close(summary.latency_slo_ms, system.slo.latency_ms):
            self.fail(f"system {name}: summary latency SLO {summary.latency_slo_ms} differs from the spec's "
                      f"{system.slo.latency_ms}")
        if not close(summary.accuracy_slo, system.slo.accuracy):
            self.fail(f"system {name}: summary accuracy SLO {summary.accuracy_slo} differs from the spec's "
                      f"{system.slo.accuracy}")

        missing = [t.name for t in system.tasks if (name, t.name) not in task_plans]
        if missing:
            if fraction * system.demand_rps > ABS_TOL:
                self.fail(f"system {name}: tasks {', '.join(missing)} have no plan but the system serves "
                          f"{served} rps")
            # A system that serves nothing need not list its tasks.
            present = [t for t in system.tasks if (name, t.name) in task_plans]
            for task in present:
                self.check_task(system, task_plans[(name, task.name)], None, task_plans)
            return

        variants: dict[str, str] = {}
        for task in system.tasks:
            variants[task.name] = task_plans[(name, task.name)].variant
        variants_known = True
        for task in system.tasks:
            if variants[task.name] not in {v.name for v in task.variants}:
                variants_known = False
        demand = system.demand(variants) if variants_known else {}
        for task in system.tasks:
            expected = demand[task.name] * fraction if variants_known else None
            self.check_task(system, task_plans[(name, task.name)], expected, task_plans)
        if not variants_known:
            return
        for source in system.sources:
            if not close(task_plans[(name, source)].demand_rps, served):
                self.fail(f"system {name}: source task {source} gets {task_plans[(name, source)].demand_rps} "
                          f"rps but the system serves {served} rps")
        self.check_paths(system, task_plans, variants, summary)

    def check_task(self, system: SystemSpec, tp: TaskPlan, expected_demand: float | None,
                   task_plans: dict[tuple[str, str], TaskPlan]) -> None:
        where = f"task {system.name}/{tp.task}"
        task = system.task(tp.task)
        names = {v.name for v in task.variants}
        if tp.variant not in names:
            self.fail(f"{where}: variant {tp.variant!r} is not one of the task's variants ({', '.join(sorted(names))})")
            return
        variant = task.variant(tp.variant)
        if not self.features.accuracy_scaling and variant.accuracy != task.best_accuracy:
            self.fail(f"{where}: variant {tp.variant!r} is not the most accurate, but accuracy scaling (A) is off")
        if not close(tp.normalised_accuracy, task.normalised_accuracy(tp.variant)):
            self.fail(f"{where}: normalised accuracy {tp.normalised_accuracy} should be "
                      f"{task.normalised_accuracy(tp.variant)}")
        if expected_demand is not None and not close(tp.demand_rps, expected_demand):
            self.fail(f"{where}: demand {tp.demand_rps} rps should be {expected_demand} rps "
                      "(source demand x served fraction x edge factors)")
        demand = tp.demand_rps if expected_demand is None else expected_demand

        # Budget
        budget = tp.budget_ms
        slo = system.slo.latency_ms
        if self.features.task_budgeting:
            allowed = [slo * i / self.levels for i in range(1, self.levels + 1)]
            if not any(close(budget, level) for level in allowed):
                self.fail(f"{where}: budget {budget} ms is not one of the {self.levels} budget levels of the "
                          f"SLO {slo} ms")
        else:
            equal = slo / system.longest_path_tasks
            if not close(budget, equal):
                self.fail(f"{where}: budget {budget} ms should be the equal split {equal} ms (task budgeting T off)")

        # Arrivals
        least = least_dispersion(system, tp.task, task_plans, self.queueing)
        dispersion = tp.arrival_dispersion
        if not self.queueing and dispersion != 0:
            self.fail(f"{where}: arrival dispersion {dispersion} should be 0 (queueing off)")
        elif not at_least(dispersion, least):
            self.fail(f"{where}: arrival dispersion {dispersion} is below {least}, 1 + the largest bulk (factor x "
                      "batch) its parents hand over at once")
        splits = self.queueing and self.routing is not Routing.ONE_REPLICA and self.plan.fully_served
        most_base = least_task_demand(system, tp.task, self.features) if splits else 0.0
        if not at_least(tp.share_base_rps, 0) or not at_most(tp.share_base_rps, most_base):
            self.fail(f"{where}: bulk shares are taken of {tp.share_base_rps} rps, outside [0, {most_base}] rps "
                      "(its least demand while the plan serves all demand under a routing that splits bulks, "
                      "else 0)")

        # Configurations
        total_load = 0.0
        stage = 0.0
        for index, config in enumerate(tp.configs):
            total_load += config.load_rps
            stage = max(stage, self.check_config(system, tp, index, config, variant.memory_gb,
                                                 config_dispersion(tp, config, self.routing, self.connections)))
        if not close(total_load, demand):
            self.fail(f"{where}: loads of its configurations add up to {total_load} rps, not its demand "
                      f"{demand} rps (routing)")
        if tp.configs:
            if not close(tp.stage_latency_ms, stage):
                self.fail(f"{where}: stage latency {tp.stage_latency_ms} ms should be {stage} ms "
                          "(its slowest configuration's)")
            if not at_most(stage, budget):
                self.fail(f"{where}: stage latency {stage} ms exceeds its budget {budget} ms")

    def check_config(self, system: SystemSpec, tp: TaskPlan, index: int, config: ConfigPlan,
                     memory_gb: float, dispersion: float) -> float:
        where = f"task {system.name}/{tp.task} config {index} ({config.segment}, batch {config.batch})"
        gpu = self.product
        segment = config.segment
        if segment.gpu != gpu.name:
            self.fail(f"{where}: segment is on GPU product {segment.gpu!r}, the pool has {gpu.name!r}")
        try:
            mig = gpu.profile(segment.mig_profile)
        except KeyError:
            self.fail(f"{where}: {gpu.name} has no MIG profile {segment.mig_profile!r}")
            mig = None
        degrees = range(1, (self.max_mps or max(gpu.mps_degrees)) + 1)
        if segment.mps not in degrees:
            self.fail(f"{where}: MPS degree {segment.mps} is not one of {degrees.start}..{degrees.stop - 1}")
        if not self.features.spatial_partitioning and (
                segment.mig_profile != gpu.whole_gpu_profile.name or segment.mps != 1):
            self.fail(f"{where}: spatial partitioning (S) is off, so only whole GPUs "
                      f"({gpu.whole_gpu_profile.name}, MPS 1) may be used")
        if config.batch < 1:
            self.fail(f"{where}: batch {config.batch} < 1")
        if self.max_batch is not None and config.batch > self.max_batch:
            self.fail(f"{where}: batch {config.batch} is above the largest batch {self.max_batch}")
        if self.batches is not None and config.batch not in self.batches:
            self.fail(f"{where}: batch {config.batch} is not one of the allowed batches {tuple(self.batches)}")
        if config.replicas < 1:
            self.fail(f"{where}: {config.replicas} replicas (a configuration needs at least one)")
        if mig is not None and not at_most(segment.mps * memory_gb, mig.memory_gb, abs_=0):
            self.fail(f"{where}: memory: {segment.mps} processes x {memory_gb} GB = {segment.mps * memory_gb} GB "
                      f"exceeds the {mig.memory_gb} GB of {mig.name}")
        if self.store is not None:
            profile = self.store.get(tp.variant, segment, config.batch)
            if profile is None:
                self.fail(f"{where}: the profile store has no profile for variant {tp.variant!r}")
            else:
                # An estimate is a median: the plan holds its p99, the spread times it (its variant's
                # measured spread where the store says one, else the options').
                spread = 1.0
                if profile.source is ProfileSource.ESTIMATED:
                    spread = self.latency_spread if profile.spread is None else profile.spread
                if not close(spread, config.latency_spread):
                    self.fail(f"{where}: latency spread {config.latency_spread} differs from {spread}, the "
                              "p99/p50 its profile's batch latency stands for")
                if not close(profile.latency_ms * spread, config.batch_latency_ms):
                    self.fail(f"{where}: batch latency {config.batch_latency_ms} ms differs from the store's "
                              f"{profile.latency_ms} ms x {spread} (p99/p50 of an estimate)")
                if not close(profile.throughput_rps, config.segment_throughput_rps):
                    self.fail(f"{where}: segment throughput {config.segment_throughput_rps} rps differs from the "
                              f"store's {profile.throughput_rps} rps")
                if profile.source != config.source:
                    self.fail(f"{where}: profile source {config.source.value} differs from the store's "
                              f"{profile.source.value}")

        lat, thr, b, k = config.batch_latency_ms, config.segment_throughput_rps, config.batch, segment.mps
        budget = tp.budget_ms
        load, replicas = config.load_rps, config.replicas
        if not at_least(load, 0):
            self.fail(f"{where}: negative load {load} rps")
        upper = replicas * thr / (1 + self.headroom)
        if not at_most(load, upper):
            self.fail(f"{where}: throughput: load {load} rps exceeds {replicas} x {thr} rps / (1 + headroom "
                      f"{self.headroom}) = {upper} rps")
        if not at_most(2 * lat, budget):
            self.fail(f"{where}: latency: 2 x batch latency {lat} ms exceeds the budget {budget} ms")
        if b > 1:
            slack = budget - lat
            lower = replicas * k * (b - 1) * 1000.0 / slack if slack > 0 else math.inf
            if not at_least(load, lower):
                self.fail(f"{where}: batch fill: load {load} rps is below {lower} rps, the least that fills "
                          f"batches of {b} on {replicas} x {k} processes within the budget {budget} ms")
        stage = recomputed_stage_latency_ms(config, dispersion)
        if not close(config.stage_latency_ms, stage):
            self.fail(f"{where}: stage latency {config.stage_latency_ms} ms should be {stage} ms")
        if not at_most(stage, budget):
            self.fail(f"{where}: stage latency {stage} ms exceeds the budget {budget} ms")
        return stage

    # -- paths -----------------------------------------------------------
    def check_paths(self, system: SystemSpec, task_plans: dict[tuple[str, str], TaskPlan], variants: dict[str, str],
                    summary: SystemSummary) -> None:
        name = system.name
        plan_paths: dict[tuple[str, ...], list[PathPlan]] = {}
        for path_plan in self.plan.paths:
            if path_plan.system == name:
                plan_paths.setdefault(tuple(path_plan.tasks), []).append(path_plan)
        for key, listed in plan_paths.items():
            if key not in system.paths:
                self.fail(f"system {name}: plan lists path {' -> '.join(key)}, which the task graph does not have")
            elif len(listed) > 1:
                self.fail(f"system {name}: path {' -> '.join(key)} is listed {len(listed)} times")
        worst_latency, worst_accuracy = 0.0, math.inf
        slo = system.slo
        for path in system.paths:
            label = f"system {name} path {' -> '.join(path)}"
            budget = sum(task_plans[(name, t)].budget_ms for t in path)
            latency = sum(_task_stage(task_plans[(name, t)], self.routing, self.connections) for t in path)
            accuracy = system.path_accuracy(path, variants)
            worst_latency = max(worst_latency, latency)
            worst_accuracy = min(worst_accuracy, accuracy)
            if not at_most(budget, slo.latency_ms):
                self.fail(f"{label}: budgets add up to {budget} ms, over the latency SLO {slo.latency_ms} ms")
            if not at_most(latency, slo.latency_ms):
                self.fail(f"{label}: predicted latency {latency} ms exceeds the latency SLO {slo.latency_ms} ms")
            if not at_least(accuracy, slo.accuracy):
                self.fail(f"{label}: accuracy {accuracy} is below the accuracy SLO {slo.accuracy}")
            found = plan_paths.get(path)
            if not found:
                self.fail(f"{label}: missing from the plan's paths")
                continue
            path_plan = found[0]
            if not close(path_plan.budget_ms, budget):
                self.fail(f"{label}: plan says its budget is {path_plan.budget_ms} ms, the tasks' budgets add up "
                          f"to {budget} ms")
            if not close(path_plan.latency_ms, latency):
                self.fail(f"{label}: plan says its latency is {path_plan.latency_ms} ms, the stage latencies add "
                          f"up to {latency} ms")
            if not close(path_plan.accuracy, accuracy):
                self.fail(f"{label}: plan says its accuracy is {path_plan.accuracy}, it is {accuracy}")
        if not close(summary.worst_path_latency_ms, worst_latency):
            self.fail(f"system {name}: worst path latency {summary.worst_path_latency_ms} ms should be "
                      f"{worst_latency} ms")
        if not close(summary.worst_path_accuracy, worst_accuracy):
            self.fail(f"system {name}: worst path accuracy {summary.worst_path_accuracy} should be {worst_accuracy}")

    # -- GPUs ------------------------------------------------------------
    def check_gpus(self, task_plans: dict[tuple[str, str], TaskPlan]) -> None:
        gpu = self.product
        plan = self.plan
        if len(plan.gpus) > self.pool_gpus:
            self.fail(f"plan lists {len(plan.gpus)} GPUs, the pool has {self.pool_gpus}")
        if self.nodes is not None:
            self.check_nodes(self.nodes)
        indices = [g.index for g in plan.gpus]
        for index, count in Counter(indices).items():
            if count > 1:
                self.fail(f"GPU index {index} appears {count} times")
            if not 0 <= index < self.pool_gpus:
                self.fail(f"GPU index {index} is outside the pool's 0..{self.pool_gpus - 1}")
        assigned: Counter[tuple[str | None, str | None, int | None]] = Counter()
        used, slices = 0, 0
        for gpu_plan in plan.gpus:
            where = f"GPU {gpu_plan.index}"
            layout: Counter[str] = Counter()
            for profile_name, count in gpu_plan.layout:
                if count < 0:
                    self.fail(f"{where}: layout has a negative count {count} of {profile_name}")
                layout[profile_name] += count
            unknown = [p for p in layout if p not in {q.name for q in gpu.profiles}]
            if unknown:
                self.fail(f"{where}: layout names unknown MIG profiles {', '.join(unknown)}")
                continue
            instances = Counter(i.mig_profile for i in gpu_plan.instances)
            if +layout != +instances:
                self.fail(f"{where}: layout {dict(+layout)} does not match its instances {dict(+instances)}")
            if sum(instances.values()) > 0 and not layout_is_valid(gpu, dict(+instances)):
                self.fail(f"{where}: instances {dict(+instances)} cannot be placed on one {gpu.name} "
                          "(no valid MIG placement)")
            elif +layout != +instances and sum(layout.values()) > 0 and not layout_is_valid(gpu, dict(+layout)):
                self.fail(f"{where}: layout {dict(+layout)} cannot be placed on one {gpu.name}")
            if sum(instances.values()) > 0:
                used += 1
                slices += sum(gpu.profile(p).compute_slices * n for p, n in instances.items())
            for slot, instance in enumerate(gpu_plan.instances):
                if instance.task is None and instance.config is None and instance.system is None:
                    continue  # idle instance
                key = (instance.system, instance.task)
                task_plan = task_plans.get(key)  # type: ignore[arg-type]
                if task_plan is None or instance.config is None or not (
                        0 <= instance.config < len(task_plan.configs)):
                    self.fail(f"{where} instance {slot}: serves {instance.system}/{instance.task} config "
                              f"{instance.config}, which the plan does not have")
                    continue
                config = task_plan.configs[instance.config]
                if config.segment.mig_profile != instance.mig_profile:
                    self.fail(f"{where} instance {slot}: a {instance.mig_profile} instance runs "
                              f"{instance.system}/{instance.task} config {instance.config}, which needs "
                              f"{config.segment.mig_profile}")
                assigned[(instance.system, instance.task, instance.config)] += 1
        for (system, task), task_plan in task_plans.items():
            for index, config in enumerate(task_plan.configs):
                placed = assigned[(system, task, index)]
                if placed != config.replicas:
                    self.fail(f"task {system}/{task} config {index}: {config.replicas} replicas but {placed} MIG "
                              "instances are assigned to it")
        if used > self.pool_gpus:
            self.fail(f"{used} GPUs used, the pool has {self.pool_gpus}")
        if plan.gpus_used != used:
            self.fail(f"plan says {plan.gpus_used} GPUs are used, its GPUs with instances number {used}")
        if plan.slices_used != slices:
            self.fail(f"plan says {plan.slices_used} compute slices are used, its instances have {slices}")


    # -- nodes -----------------------------------------------------------
    def check_nodes(self, pool: NodePool) -> None:
        nodes = {node.name: node for node in pool.nodes}
        seen: Counter[tuple[str, int | None]] = Counter()
        occupied: dict[str, Counter[str]] = {}
        for gpu_plan in self.plan.gpus:
            where = f"GPU {gpu_plan.index} ({gpu_plan.node}/{gpu_plan.device})"
            node = nodes.get(gpu_plan.node) if gpu_plan.node is not None else None
            if node is None:
                self.fail(f"{where}: is on no node of the pool")
                continue
            seen[(node.name, gpu_plan.device)] += 1
            if node.cordoned_by == "others":
                self.fail(f"{where}: node {node.name} is cordoned by others and left out")
            if gpu_plan.device is None or not 0 <= gpu_plan.device < len(node.gpus):
                self.fail(f"{where}: node {node.name} has no GPU {gpu_plan.device}")
                continue
            current = node.gpus[gpu_plan.device]
            if current is None:
                self.fail(f"{where}: its current layout is Unknown, so it may not be planned on")
                continue
            if node.fixed and +Counter(dict(gpu_plan.layout)) != +Counter(current):
                why = "is kept for running systems" if node.kept_for else "has instances held by others"
                self.fail(f"{where}: node {node.name} {why}, so its layout {current} "
                          f"must stay, not become {dict(gpu_plan.layout)}")
            self.check_lent(where, gpu_plan, node.usable_above.get(gpu_plan.device))
            occupied.setdefault(node.name, Counter()).update(
                i.mig_profile for i in gpu_plan.instances if i.task is not None)
        for (name, device), count in seen.items():
            if count > 1:
                self.fail(f"GPU {device} of node {name} appears {count} times")
        for name, used in occupied.items():
            node = nodes[name]
            total: Counter[str] = Counter()
            for layout in node.gpus:
                total.update(layout or {})
            for profile, held in node.held.items():
                if used[profile] + held > total[profile]:
                    self.fail(f"node {name}: tessera uses {used[profile]} {profile} instances and others hold "
                              f"{held}, but its GPUs have {total[profile]}")


    def check_lent(self, where: str, gpu_plan: GpuPlan, above: int | None) -> None:
        """A GPU lent only to systems above a poolPriority carries no instance of a system at or below it."""
        if above is None:
            return
        priorities = {s.name: s.pool_priority for s in self.systems}
        for system in sorted({i.system for i in gpu_plan.instances if i.system in priorities}):
            if priorities[system] <= above:
                self.fail(f"{where}: only systems of poolPriority above {above} may use it, but {system} "
                          f"(poolPriority {priorities[system]}) has an instance there")


def _task_stage(task_plan: TaskPlan, routing: Routing, connections: int) -> float:
    return max((recomputed_stage_latency_ms(c, config_dispersion(task_plan, c, routing, connections))
                for c in task_plan.configs), default=0.0)
