"""Plan a pool's systems one at a time, pack their instances together, and check the whole (issue 29 item 7).

The joint MILP (solve.py) grows faster than the systems it plans: on 100
nodes of 8 H100s, one system takes about 3 s, five together 19 s, ten 54 s
(bench/planner_many_systems.py). Its systems share only the pool's
capacity when every one is served in full, so where the pool is fresh
(no plan in force, no GPU laid out, kept, held by others or lent) each
system is planned alone, on the fewest GPUs that serve it (a sub-pool
doubled until it does: a system served in full on a sub-pool of identical
free GPUs gets there its optimum on the whole pool), and then:

1. packing: the fewest GPUs, then slices, whose layouts hold every part's
   MIG instances together (one small MILP over layout counts; instances of
   different systems share a GPU, which the parts alone could not);
2. the parts' replicas are placed on the pool's GPUs (assignment.py);
3. the combined plan goes through the independent checker with every
   system and quota: the pool's capacity, each quota over its namespace's
   systems together, the SLOs.

Where a part serves less than its whole demand (the pool, a quota or the
SLO holds it back: priorities and floors then decide who gets what), the
packing needs more GPUs than the pool has, or the check fails, the joint
solve plans the pool (`SolverReport.method` "joint-fallback", with the
reason). What the combined plan may lose against the joint optimum is cost
only, never served demand: every system is served in full, which is the
most the joint can serve it. The cost lost is that of each system's own
choice of instances (the joint may pick instances that fill another
system's half-used GPU); bench/README.md states it on the bench instances.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import pyomo.environ as pyo

from tessera.planner.assignment import assign_gpus
from tessera.planner.catalog import COMPUTE_SLICES, Layout, gpu_product, layout_compute_slices, valid_layouts
from tessera.planner.checker import check_plan
from tessera.planner.errors import NoPlanError
from tessera.planner.features import Features
from tessera.planner.highs_driver import HighsModel
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.nodes import NodePool, PoolGpus, pool_gpus
from tessera.planner.plan import Plan, SolverReport
from tessera.planner.profiles import ProfileStore
from tessera.planner.quota import InstanceQuota
from tessera.planner.solve import PlannerOptions, plan

FIRST_SUB_POOL_GPUS = 8
"""A part is first planned on this many GPUs (one node of eight), doubled until it is served in full."""
DECOMPOSED_SHARE = 0.75
"""The share of the time limit the parts and the packing may take. A joint fallback gets what is left of the
limit, at least the other quarter of it: after parts that overran their share (a part's model build and check
are not bounded) a plan may take the limit and a quarter, which the worker's grace (worker.GRACE_S, 30 s)
covers for limits up to 120 s."""

JOINT, DECOMPOSED, JOINT_FALLBACK = "joint", "decomposed", "joint-fallback"


class _Fallback(Exception):
    """The decomposed plan cannot stand: why, for the joint solve's report."""


def plan_pool(
    systems: list[SystemSpec],
    pool: Pool | NodePool,
    store: ProfileStore,
    features: Features = Features(),
    options: PlannerOptions = PlannerOptions(),
    current: Plan | None = None,
    quotas: Sequence[InstanceQuota] = (),
    running: Mapping[str, float] = MappingProxyType({}),
) -> Plan:
    """plan()'s answer for a pool: decomposed where it may be and passes the combined check, else joint.

    Raises what plan() raises (the joint solve's answer) where the joint solve plans the pool.
    """
    if not decomposable(systems, pool, options, current):
        return plan(systems, pool, store, features, options, current, quotas, running)
    started = time.perf_counter()
    try:
        return _plan_decomposed(systems, pool, store, features, options, quotas, running)
    except _Fallback as why:
        left = max(options.time_limit_s - (time.perf_counter() - started), options.time_limit_s * (1 - DECOMPOSED_SHARE))
        joint = plan(systems, pool, store, features, options.model_copy(update={"time_limit_s": left}), current,
                     quotas, running)
        joint.solver.method, joint.solver.fallback = JOINT_FALLBACK, str(why)
        return joint


def decomposable(systems: list[SystemSpec], pool: Pool | NodePool, options: PlannerOptions,
                 current: Plan | None) -> bool:
    """Whether the pool is one the parts may be planned on alone: the option on, several systems, and a fresh
    pool (no plan in force, every GPU free, blank and lent to everyone). A plan in force brings the change
    price and the least-change stage, which weigh the systems' layouts together: the joint solve keeps them."""
    if not options.decompose or len(systems) < 2 or current is not None:
        return False
    gpus = pool_gpus(pool)
    return all(not g.fixed and not g.current and g.usable_above is None for g in gpus.gpus)


def _plan_decomposed(systems: list[SystemSpec], pool: Pool | NodePool, store: ProfileStore, features: Features,
                     options: PlannerOptions, quotas: Sequence[InstanceQuota], running: Mapping[str, float]) -> Plan:
    """The parts planned alone, packed and placed on the pool, checked as a whole; raises _Fallback where
    the combined plan cannot stand."""
    deadline = time.perf_counter() + options.time_limit_s * DECOMPOSED_SHARE
    gpus = pool_gpus(pool)
    parts = [_part(system, gpus.gpu, len(gpus.gpus), store, features, options, quotas, deadline) for system in systems]
    layouts, packing = _pack(parts, gpus, features, options, deadline)
    tasks = [task for part in parts for task in part.tasks]
    placed = assign_gpus(tasks, gpus, layouts)
    product = gpu_product(gpus.gpu)
    combined = parts[0].model_copy(update={
        "pool_gpus": len(gpus.gpus), "tasks": tasks, "gpus": placed,
        "paths": [path for part in parts for path in part.paths],
        "systems": [summary for part in parts for summary in part.systems],
        "gpus_used": sum(count for _, count in layouts),
        "slices_used": sum(layout_compute_slices(product, layout) * count for layout, count in layouts),
        "profile_sources": dict(sum((Counter(part.profile_sources) for part in parts), Counter())),
        "solver": _report(parts, packing),
        "running": {name: floor for name, floor in sorted(running.items()) if any(s.name == name for s in systems)},
    })
    errors = check_plan(combined, systems, pool, store, features, options, quotas)
    if errors:
        raise _Fallback(f"the combined plan fails the check ({len(errors)} violations): {errors[0]}")
    return combined


def _part(system: SystemSpec, gpu: str, pool_size: int, store: ProfileStore, features: Features, options: PlannerOptions,
          quotas: Sequence[InstanceQuota], deadline: float) -> Plan:
    """One system alone, on a sub-pool of FIRST_SUB_POOL_GPUS GPUs doubled until it serves the whole demand.

    The sub-pool keeps the whole pool's model (exact or approximate), so its optimum is the whole pool's.
    """
    exact = options.exact_for(pool_size)
    size = min(pool_size, FIRST_SUB_POOL_GPUS)
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise _Fallback(f"the parts took more than {DECOMPOSED_SHARE:.0%} of the time limit")
        own = options.model_copy(update={"time_limit_s": left, "exact_up_to_gpus": pool_size if exact else 0})
        try:
            part = plan([system], Pool(gpu=gpu, gpus=size), store, features, own, quotas=quotas)
        except NoPlanError as error:
            raise _Fallback(f"{system.name} alone: {error}") from None
        if part.fully_served:
            return part
        if size >= pool_size:
            raise _Fallback(f"{system.name} alone is not served in full on the pool's {pool_size} GPUs")
        size = min(pool_size, 2 * size)


def _pack(parts: list[Plan], gpus: PoolGpus, features: Features, options: PlannerOptions,
          deadline: float) -> tuple[list[tuple[Layout, int]], tuple[float, float, float, str]]:
    """The fewest GPUs, then slices, whose layouts hold every part's instances: (layout, GPUs) and the solve's
    (value, bound, seconds, status). Raises _Fallback where the pool's GPUs cannot hold them."""
    product = gpu_product(gpus.gpu)
    needed = Counter(c.segment.mig_profile for part in parts for t in part.tasks for c in t.configs
                     for _ in range(c.replicas))
    layouts = list(valid_layouts(product.name)) if features.spatial_partitioning else [
        ((product.whole_gpu_profile.name, 1),)]
    m = pyo.ConcreteModel(name="tessera-packing")
    m.g = pyo.Var(range(len(layouts)), domain=pyo.NonNegativeIntegers, bounds=(0, len(gpus.gpus)))
    m.cons = pyo.ConstraintList()
    for profile, count in needed.items():
        m.cons.add(sum(dict(layout).get(profile, 0) * m.g[j] for j, layout in enumerate(layouts)) >= count)
    m.cons.add(sum(m.g.values()) <= len(gpus.gpus))
    weight = COMPUTE_SLICES * len(gpus.gpus) + 1
    cost = sum((weight + layout_compute_slices(product, layout)) * m.g[j] for j, layout in enumerate(layouts))
    highs = HighsModel(m, options.mip_gap)
    highs.set_objective(cost, pyo.minimize)
    result = highs.solve(max(deadline - time.perf_counter(), 1.0), abs_gap=options.slice_tolerance - 1e-6)
    if result is None:
        raise _Fallback(f"the parts' instances do not fit the pool's {len(gpus.gpus)} GPUs together "
                        f"(packing: {highs.last_status})")
    highs.load_into_model()
    counts = [(layout, round(pyo.value(m.g[j]))) for j, layout in enumerate(layouts)]
    return [(layout, n) for layout, n in counts if n > 0], (result.value, result.bound, result.seconds,
                                                            result.status)


def _report(parts: list[Plan], packing: tuple[float, float, float, str]) -> SolverReport:
    """The parts' reports and the packing's, as one: stages named by system, time-limited stages by their own
    names (what outcome_of reads), the largest gap; no cost proof (each part's cost is proven, the whole's
    against the joint optimum is not)."""
    value, bound, seconds, status = packing
    reports = [(part.systems[0].system, part.solver) for part in parts]
    gap = abs(value - bound) / max(abs(value), 1e-9) if math.isfinite(bound) else math.inf
    statuses = [report.status for _, report in reports] + [status]
    return SolverReport(
        status=next((s for s in statuses if s != "Optimal"), "Optimal"),
        stages=[f"{name}: {stage}" for name, report in reports for stage in report.stages] + ["packing"],
        objective={**{f"{name}: {stage}": v for name, report in reports for stage, v in report.objective.items()},
                   "packing": value},
        mip_gap=max([report.mip_gap for _, report in reports] + [gap]),
        build_s=sum(report.build_s for _, report in reports),
        solve_s=sum(report.solve_s for _, report in reports) + seconds,
        variables=sum(report.variables for _, report in reports),
        constraints=sum(report.constraints for _, report in reports),
        time_limited=sorted({stage for _, report in reports for stage in report.time_limited}
                            | ({"packing"} if status != "Optimal" else set())),
        method=DECOMPOSED,
    )
