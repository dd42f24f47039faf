"""What the simulation runs: a plan's deployment as flat arrays, one row per replica.

A replica is one planned segment (a MIG instance) of a task's configuration:
`processes` server processes (the MPS degree) share one request queue, each
runs one batch of at most `batch` requests at a time. Its batch latency for
n requests is read from the profile store at every profiled batch up to the
planned one and interpolated linearly between them (a partial batch is
cheaper than a full one); without a store every batch costs the planned
batch latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tessera.planner import latency
from tessera.planner.catalog import gpu_product
from tessera.planner.model import SystemSpec
from tessera.planner.plan import ConfigPlan, Plan, TaskPlan
from tessera.planner.profiles import ProfileStore

MS = 1e-3


@dataclass
class Stage:
    """One task of one system and the replicas that serve it."""

    system: str
    task: str
    variant: str
    budget_s: float
    replicas: np.ndarray  # indices into Deployment's replica arrays
    weights: np.ndarray  # planned share of the task's load per replica (sums to 1)
    children: list[tuple[int, float]] = field(default_factory=list)  # (stage index, mean fan-out factor)
    parents: list[int] = field(default_factory=list)
    single_s: float = 0.0  # a batch of one on the stage's fastest replica (early dropping's least time)

    @property
    def is_source(self) -> bool:
        return not self.parents


@dataclass
class SystemRoutes:
    name: str
    slo_s: float
    demand_rps: float
    stages: list[int]  # indices into Deployment.stages, parents before children
    paths: list[tuple[list[int], float]]  # (stage indices of a source-to-sink path, planned latency s)


@dataclass
class Deployment:
    """Flat replica arrays (the kernel's input) and the task graph above them."""

    stages: list[Stage]
    systems: list[SystemRoutes]
    batch: np.ndarray  # int64 per replica
    processes: np.ndarray  # int64 per replica
    batching_delay_s: np.ndarray  # float64 per replica
    latency_s: np.ndarray  # float64 [replica, n]: median batch latency of n requests (column 0 unused)
    slices: np.ndarray  # compute slices per replica
    planned_stage_s: np.ndarray  # the plan's stage latency per replica
    capacity_rps: np.ndarray  # the profile's throughput per replica
    pool_slices: int

    @property
    def allocated_slices(self) -> int:
        return int(self.slices.sum())


def unserved_systems(plan: Plan, systems: list[SystemSpec]) -> list[str]:
    """Systems the plan gives no replicas to (their SLO is unreachable, or the pool too small)."""
    served = {(t.system, t.task) for t in plan.tasks if any(c.replicas for c in t.configs)}
    return [s.name for s in systems if not all((s.name, t.name) in served for t in s.tasks)]


def batching_delay_ms(config: ConfigPlan) -> float:
    """The time the latency model lets a batch form: max(batch latency, formation time) at the planned load.

    A replica closes a batch when it is full or when its first request has
    waited this long, so at the planned load batches fill, and at lower load
    they leave no later than the model assumed.
    """
    if config.batch == 1:
        return 0.0
    return latency.batching_delay_ms(config.batch_latency_ms, config.batch, config.segment.mps,
                                     config.load_rps / config.replicas)


def build_deployment(plan: Plan, systems: list[SystemSpec], store: ProfileStore | None = None) -> Deployment:
    """The plan's replicas and routes, for the systems it was made for."""
    largest_batch = max((c.batch for t in plan.tasks for c in t.configs), default=1)
    product = gpu_product(plan.gpu)
    rows: list[tuple[ConfigPlan, np.ndarray]] = []
    stages: list[Stage] = []
    index: dict[tuple[str, str], int] = {}
    for task_plan in plan.tasks:
        first = len(rows)
        for config in task_plan.configs:
            rows += [(config, _latency_curve(task_plan, config, store, largest_batch))] * config.replicas
        if len(rows) == first:
            continue  # the plan serves none of this system: it is left out (see `unserved_systems`)
        shares = np.array([c.load_rps / c.replicas for c, _ in rows[first:]], dtype=float)
        index[(task_plan.system, task_plan.task)] = len(stages)
        stages.append(Stage(task_plan.system, task_plan.task, task_plan.variant, task_plan.budget_ms * MS,
                            np.arange(first, len(rows)), shares / shares.sum()))
    configs = [config for config, _ in rows]
    latency_s = np.array([curve for _, curve in rows]).reshape(len(rows), largest_batch + 1)
    routes = [_routes(system, plan, stages, index, latency_s) for system in systems
              if all((system.name, task.name) in index for task in system.tasks)]
    return Deployment(
        stages=stages, systems=routes,
        batch=np.array([c.batch for c in configs], dtype=np.int64),
        processes=np.array([c.segment.mps for c in configs], dtype=np.int64),
        batching_delay_s=np.array([batching_delay_ms(c) * MS for c in configs]),
        latency_s=latency_s,
        slices=np.array([product.profile(c.segment.mig_profile).compute_slices for c in configs], dtype=np.int64),
        planned_stage_s=np.array([c.stage_latency_ms * MS for c in configs]),
        capacity_rps=np.array([c.segment_throughput_rps for c in configs]),
        pool_slices=plan.pool_gpus * product.whole_gpu_profile.compute_slices,
    )


def _latency_curve(task_plan: TaskPlan, config: ConfigPlan, store: ProfileStore | None, width: int) -> np.ndarray:
    """Median batch latency (s) for n = 0..width requests; NaN beyond the planned batch."""
    # The plan holds p99 batch latencies; an estimate's median is the p99 over the spread it was scaled by.
    known = {config.batch: config.batch_latency_ms / config.latency_spread}
    if store is not None:
        for batch in range(1, config.batch):
            profile = store.get(task_plan.variant, config.segment, batch)
            if profile is not None:
                known[batch] = profile.latency_ms
    batches = sorted(known)
    curve = np.interp(np.arange(width + 1), batches, [known[b] for b in batches]) * MS
    curve[config.batch + 1:] = np.nan
    curve[0] = 0.0
    return curve


def _routes(system: SystemSpec, plan: Plan, stages: list[Stage], index: dict[tuple[str, str], int],
            latency_s: np.ndarray) -> SystemRoutes:
    planned = {t.name: index[(system.name, t.name)] for t in system.tasks if (system.name, t.name) in index}
    for edge in system.edges:
        if edge.source in planned and edge.target in planned:
            parent, child = planned[edge.source], planned[edge.target]
            stages[parent].children.append((child, edge.factor_for(stages[parent].variant)))
            stages[child].parents.append(parent)
    order = _topological(list(planned.values()), stages)
    for position in order:
        stages[position].single_s = float(latency_s[stages[position].replicas, 1].min())
    paths = [([planned[name] for name in path.tasks], path.latency_ms * MS)
             for path in plan.paths if path.system == system.name and all(name in planned for name in path.tasks)]
    return SystemRoutes(system.name, system.slo.latency_ms * MS, system.demand_rps, order, paths)


def _topological(members: list[int], stages: list[Stage]) -> list[int]:
    """Parents before children."""
    order: list[int] = []
    seen: set[int] = set()

    def visit(stage: int) -> None:
        if stage not in seen:
            seen.add(stage)
            for parent in stages[stage].parents:
                visit(parent)
            order.append(stage)

    for stage in members:
        visit(stage)
    return order


def single_server(batch: int, processes: int, batching_delay_s: float, latency_s: np.ndarray,
                  slo_s: float = np.inf, demand_rps: float = 1.0, name: str = "server") -> Deployment:
    """One replica serving one task: `latency_s[n]` is the median latency of a batch of n (index 0 unused).

    The unit the closed-form checks and the real-server comparison use.
    """
    curve = np.asarray(latency_s, dtype=float)
    if curve.shape != (batch + 1,):
        raise ValueError(f"latency_s needs batch + 1 = {batch + 1} entries (index 0 unused), got {curve.shape}")
    stage = Stage(name, name, name, slo_s, np.array([0]), np.array([1.0]))
    return Deployment(
        stages=[stage], systems=[SystemRoutes(name, slo_s, demand_rps, [0], [])],
        batch=np.array([batch]), processes=np.array([processes]), batching_delay_s=np.array([batching_delay_s]),
        latency_s=curve.reshape(1, -1), slices=np.array([1]), planned_stage_s=np.array([np.nan]),
        capacity_rps=np.array([processes * batch / curve[batch]]), pool_slices=1,
    )
