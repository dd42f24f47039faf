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

A re-plan (a plan in force) is incremental where some systems' parts may be
kept. A system's part is *kept* when what it was planned from is unchanged
(`Plan.planned_from`: a digest of its spec, its variants' profiles, the GPU,
the features and the options, recorded in every plan this module returns),
the plan in force serves it in full, and every GPU it runs on is still in the
pool, known, with the layout the plan gave it, usable by it and holding
what the plan put there (not cordoned by others, not taken back for an
AdapterPool, no more instances held by others). Kept parts stay exactly as
they are: the same GPUs, instances, variants, batches and replicas (no change,
nothing moves); every node carrying a kept instance keeps all its GPUs'
layouts (mig-manager re-partitions a node at a time, stopping its pods), and
so does every node the caller keeps for running systems (NodeState.kept_for).
Systems that are new or changed are planned alone (as on a fresh pool, each
quota less what the kept parts use of it) and packed onto what is left: the
free instances of the nodes that stay (a changed system's replica stays on
its instance where it still fits), then the free GPUs of the other nodes
(nodes others hold instances on, and lent GPUs, are left alone); removed
systems free what they held. The combined plan gets the same check. Where nothing may be kept the re-plan is
joint, as is every re-plan with `decompose` off.

Where a part serves less than its whole demand (the pool, a quota or the
SLO holds it back: priorities and floors then decide who gets what), the
packing needs more GPUs than the pool has (has left), or the check fails,
the joint solve plans the pool (`SolverReport.method` "joint-fallback", with
the reason). What the combined plan may lose against the joint optimum is
cost only, never served demand: every system is served in full, which is the
most the joint can serve it, and every running floor is met. The cost lost
is that of each system's own choice of instances (the joint may pick
instances that fill another system's half-used GPU) and, incrementally, of
the kept parts' places (the joint may move them to free GPUs);
bench/README.md states it on the bench instances.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TypeVar

import pyomo.environ as pyo

from tessera.planner.assignment import assign_gpus, gpu_key, layout_of
from tessera.planner.change_cost import ChangeSummary, nodes_changed, serving_nodes
from tessera.planner.catalog import COMPUTE_SLICES, Layout, gpu_product, layout_compute_slices, valid_layouts
from tessera.planner.checker import check_plan
from tessera.planner.errors import NoPlanError
from tessera.planner.features import Features
from tessera.planner.highs_driver import MODELS, HighsModel
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.nodes import NodePool, PlannableGpu, PoolGpus, as_layout, pool_gpus
from tessera.planner.plan import GpuPlan, InstancePlan, PathPlan, Plan, SolverReport, SystemSummary, TaskPlan
from tessera.planner.profiles import ProfileStore
from tessera.planner.quota import InstanceQuota, instances_of
from tessera.planner.solve import PlannerOptions, kept_for_of, plan, running_floors

FIRST_SUB_POOL_GPUS = 8
"""A part is first planned on this many GPUs (one node of eight), doubled until it is served in full."""
FALLBACK_SHARE = 0.25
"""The least share of the time limit a joint fallback gets. The parts and the packing may take the whole limit:
a joint solve rarely plans in what parts that ran out of time leave, and with the parts held to three quarters
of 60 s, twenty systems on a machine at load 9-12 fell back every time, the joint ran out too, and the pool
stayed unplanned solve after solve (bench/README.md, operator_speed). After parts that took the limit (a part's
model build and check are not bounded) a plan may take the limit and a quarter, which the worker's grace
(worker.GRACE_S, 30 s) covers for limits up to 120 s."""

JOINT, DECOMPOSED, INCREMENTAL, JOINT_FALLBACK = "joint", "decomposed", "incremental", "joint-fallback"
T = TypeVar("T")
R = TypeVar("R")


class _Fallback(Exception):
    """The decomposed or incremental plan cannot stand: why, for the joint solve's report."""


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
    """plan()'s answer for a pool: incremental or decomposed where it may be and the whole passes the check, else
    joint; the plan records what each system was planned from (`Plan.planned_from`).

    Raises what plan() raises (the joint solve's answer) where the joint solve plans the pool.
    """
    digests = planned_from(systems, store, features, options, pool.gpu)
    kept = keepable(systems, pool, options, current, digests)
    if kept:
        assert current is not None
        result = _or_joint(lambda: _plan_incremental(systems, pool, store, features, options, current, quotas,
                                                     running, kept),
                           systems, pool, store, features, options, current, quotas, running)
    elif decomposable(systems, pool, options, current):
        result = _or_joint(lambda: _plan_decomposed(systems, pool, store, features, options, quotas, running),
                           systems, pool, store, features, options, current, quotas, running)
    else:
        result = plan(systems, pool, store, features, options, current, quotas, running)
    result.planned_from = digests
    return result


def _or_joint(attempt: Callable[[], Plan], systems: list[SystemSpec], pool: Pool | NodePool, store: ProfileStore,
              features: Features, options: PlannerOptions, current: Plan | None, quotas: Sequence[InstanceQuota],
              running: Mapping[str, float]) -> Plan:
    """The attempt's plan, or where it cannot stand, the joint solve's with the reason, in what is left of the
    time limit (at least the share the attempt may not take)."""
    started = time.perf_counter()
    try:
        return attempt()
    except _Fallback as why:
        left = max(options.time_limit_s - (time.perf_counter() - started), options.time_limit_s * FALLBACK_SHARE)
        joint = plan(systems, pool, store, features, options.model_copy(update={"time_limit_s": left}), current,
                     quotas, running)
        joint.solver.method, joint.solver.fallback = JOINT_FALLBACK, str(why)
        return joint


def planned_from(systems: list[SystemSpec], store: ProfileStore, features: Features, options: PlannerOptions,
                 gpu: str) -> dict[str, str]:
    """System name -> a digest of what its part is planned from: its spec, its variants' profiles, the GPU, the
    features and the options (but the time limit, the choice of method and the parts solved at once, which change
    no plan's validity)."""
    profiles: dict[str, list[str]] = {}
    for (variant, segment, batch), profile in store.items():
        profiles.setdefault(variant, []).append(f"{segment.mig_profile} x{segment.mps} b{batch} "
                                                f"{profile.model_dump_json()}")
    unplanned = {'time_limit_s', 'decompose', 'parallel_parts'}
    common = f"{gpu} {features.label} {options.model_dump_json(exclude=unplanned)}"
    digests = {}
    for system in systems:
        variants = sorted({v.name for t in system.tasks for v in t.variants})
        text = "\n".join([common, system.model_dump_json(),
                          *(line for v in variants for line in sorted(profiles.get(v, [])))])
        digests[system.name] = hashlib.sha256(text.encode()).hexdigest()
    return digests


def keepable(systems: list[SystemSpec], pool: Pool | NodePool, options: PlannerOptions, current: Plan | None,
             digests: Mapping[str, str]) -> list[str]:
    """The systems whose parts of the plan in force a re-plan keeps (the module's rule): planned from what they
    are planned from now, served in full, and on GPUs that still stand as the plan left them."""
    if not options.decompose or current is None:
        return []
    served = {s.system for s in current.systems if s.served_rps >= s.demand_rps * (1 - 1e-5)}
    priorities = {s.name: s.pool_priority for s in systems}
    gpus = {gpu_key(g.node, g.device, g.index): g for g in pool_gpus(pool).gpus}
    standing = {name: True for name in priorities if name in served
                and current.planned_from.get(name) == digests.get(name)}
    for gpu in current.gpus:
        on = {i.system for i in gpu.instances if i.system in standing}
        if on and not _stands(gpu, gpus.get(gpu_key(gpu.node, gpu.device, gpu.index)), priorities, on):
            standing.update(dict.fromkeys(on, False))
    return [name for name, stands in standing.items() if stands]


def _stands(planned: GpuPlan, now: PlannableGpu | None, priorities: Mapping[str, int], systems: set[str]) -> bool:
    """Whether a GPU of the plan in force is still in the pool as the plan left it: known, with the plan's layout,
    usable by the systems on it, and with room (others' held instances taken) for every instance the plan uses."""
    if now is None or (now.current is not None and now.current != layout_of(planned)):
        return False
    if not all(now.usable_by(priorities[system]) for system in systems):
        return False
    return not _used(planned) - _room(now, planned)


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
    deadline = time.perf_counter() + options.time_limit_s
    gpus = pool_gpus(pool)
    parts = _parts(systems, gpus.gpu, len(gpus.gpus), store, features, options, quotas, deadline)
    layouts, packing = _pack(parts, gpus.gpu, len(gpus.gpus), Counter(), f"the pool's {len(gpus.gpus)} GPUs",
                             features, options, deadline)
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
        "solver": _report(parts, packing, DECOMPOSED),
        "running": running_floors(running, systems),
    })
    errors = check_plan(combined, systems, pool, store, features, options, quotas)
    if errors:
        raise _Fallback(f"the combined plan fails the check ({len(errors)} violations): {errors[0]}")
    return combined


def _plan_incremental(systems: list[SystemSpec], pool: Pool | NodePool, store: ProfileStore, features: Features,
                      options: PlannerOptions, current: Plan, quotas: Sequence[InstanceQuota],
                      running: Mapping[str, float], kept: list[str]) -> Plan:
    """The kept systems' parts as in force, the others planned alone and packed onto what is left, checked as a
    whole; raises _Fallback where the combined plan cannot stand."""
    deadline = time.perf_counter() + options.time_limit_s
    gpus = pool_gpus(pool)
    kept_for = kept_for_of(pool)
    staying = _staying_gpus(gpus, current, set(kept), set(kept_for))
    kept_tasks = [t for t in current.tasks if t.system in kept]
    left = [_quota_left(q, kept_tasks) for q in quotas]
    parts = _parts([s for s in systems if s.name not in kept], gpus.gpu, len(gpus.gpus), store, features, options,
                   left, deadline)
    left_gpus = _left_over(gpus, staying)
    room = sum((Counter(dict(g.usable)) for g in left_gpus.gpus if g.usable), Counter())
    layouts, packing = _pack(parts, gpus.gpu, len(left_gpus.free), room,
                             f"the {len(left_gpus.free)} GPUs and {sum(room.values())} instances the kept parts "
                             "leave free", features, options, deadline)
    tasks = [task for part in parts for task in part.tasks]
    placed = {g.index: g for g in assign_gpus(tasks, left_gpus, layouts, left_gpus.fixed_groups(), current,
                                              priorities={s.name: s.pool_priority for s in systems})}
    combined_gpus = sorted([*(_merged(gpu, placed.get(i)) for i, gpu in staying.items()),
                            *(gpu for i, gpu in placed.items() if i not in staying)], key=lambda g: g.index)
    product = gpu_product(gpus.gpu)
    all_tasks = kept_tasks + tasks
    combined = current.model_copy(update={
        "pool_gpus": len(gpus.gpus), "tasks": all_tasks, "gpus": combined_gpus,
        "paths": [p for p in current.paths if p.system in kept] + [p for part in parts for p in part.paths],
        "systems": [s for s in current.systems if s.system in kept] + [s for part in parts for s in part.systems],
        "gpus_used": sum(1 for g in combined_gpus if g.layout),
        "slices_used": sum(layout_compute_slices(product, layout_of(g)) for g in combined_gpus),
        "profile_sources": dict(Counter(c.source.value for t in all_tasks for c in t.configs)),
        "solver": _report(parts, packing, INCREMENTAL, kept),
        "diagnosis": [], "changes": _changes(gpus, combined_gpus, current), "running": running_floors(running, systems),
        "kept_for": kept_for,
    })
    errors = check_plan(combined, systems, pool, store, features, options, quotas)
    if errors:
        raise _Fallback(f"the combined plan, keeping {len(kept)} systems, fails the check ({len(errors)} "
                        f"violations): {errors[0]}")
    return combined


def _changes(gpus: PoolGpus, planned: list[GpuPlan], current: Plan) -> ChangeSummary:
    """Which serving nodes the incremental plan changes and keeps. Unpriced (`price` 0, no slices saved or
    forgone): no cost stage weighed a change against keeping, the kept parts' nodes keep their layouts by rule."""
    changed, kept = nodes_changed(gpus, {(g.node, g.device): layout_of(g) for g in planned}, serving_nodes(current))
    return ChangeSummary(nodes_changed=changed, nodes_kept=kept, price=0.0)


def _staying_gpus(gpus: PoolGpus, current: Plan, kept: set[str], held_for: set[str]) -> dict[int, GpuPlan]:
    """Pool index -> the GPUs whose layouts stay: those carrying a kept instance (as in force, the other systems'
    instances freed) and, on their nodes and on the nodes kept for running systems (`held_for`), every other GPU
    laid out (its instances free)."""
    index = {gpu_key(g.node, g.device, g.index): g.index for g in gpus.gpus}
    staying = {}
    for gpu in current.gpus:
        if any(i.system in kept for i in gpu.instances):
            at = index[gpu_key(gpu.node, gpu.device, gpu.index)]
            staying[at] = gpu.model_copy(update={"index": at, "instances": [
                i if i.system in kept else InstancePlan(mig_profile=i.mig_profile) for i in gpu.instances]})
    nodes = ({gpus.gpus[i].node for i in staying} | held_for) - {None}
    for other in gpus.gpus:
        if other.node in nodes and other.index not in staying and other.current:
            staying[other.index] = GpuPlan(
                index=other.index, node=other.node, device=other.device, layout=list(other.current),
                instances=[InstancePlan(mig_profile=name) for name, count in other.current for _ in range(count)])
    return staying


def _left_over(gpus: PoolGpus, staying: Mapping[int, GpuPlan]) -> PoolGpus:
    """What the kept parts leave, as the assignment sees it: the staying GPUs with free instances, fixed to them
    (`usable`), and the free GPUs of the other nodes (none lent only to some systems)."""
    nodes = {gpus.gpus[i].node for i in staying}
    free = [g for g in gpus.free if g.index not in staying and g.usable_above is None
            and (g.node is None or g.node not in nodes)]
    fixed = [gpus.gpus[i].model_copy(update={"current": layout_of(gpu), "usable": idle})
             for i, gpu in staying.items() if (idle := _idle(gpu, gpus.gpus[i]))]
    return PoolGpus(gpu=gpus.gpu, gpus=tuple(sorted([*free, *fixed], key=lambda g: g.index)))


def _idle(planned: GpuPlan, gpu: PlannableGpu) -> Layout:
    """A staying GPU's free instances: those the plan leaves idle that others do not hold (none on a GPU lent only
    to some systems: the new parts are placed where any system may be)."""
    if gpu.usable_above is not None:
        return ()
    return as_layout(_room(gpu, planned) - _used(planned))


def _room(gpu: PlannableGpu, planned: GpuPlan) -> Counter[str]:
    """The instances of a GPU of the plan in force that the plan may use: all its layout's but those others hold."""
    return Counter(dict(gpu.usable if gpu.usable is not None else layout_of(planned)))


def _used(planned: GpuPlan) -> Counter[str]:
    """The instances the plan in force runs a replica on, per MIG profile."""
    return Counter(i.mig_profile for i in planned.instances if i.system)


def _merged(staying: GpuPlan, placed: GpuPlan | None) -> GpuPlan:
    """A staying GPU with the new parts' replicas the assignment gave it, each on its instance where that one is
    free (a changed system's replica that stays where it ran), else on a free instance of its profile."""
    if placed is None:
        return staying
    instances = list(staying.instances)
    moved = []
    for slot, new in enumerate(placed.instances):
        if new.system is None:
            continue
        if instances[slot].system is None and instances[slot].mig_profile == new.mig_profile:
            instances[slot] = new
        else:
            moved.append(new)
    for new in moved:
        slot = next(s for s, i in enumerate(instances) if i.system is None and i.mig_profile == new.mig_profile)
        instances[slot] = new
    return staying.model_copy(update={"instances": instances})


def _quota_left(quota: InstanceQuota, kept: list[TaskPlan]) -> InstanceQuota:
    """A quota less what the kept parts use of it: what the others' parts may take."""
    return quota.model_copy(update={"limit": max(0, quota.limit - instances_of(quota, kept))})


def _parts(systems: list[SystemSpec], gpu: str, pool_size: int, store: ProfileStore, features: Features,
           options: PlannerOptions, quotas: Sequence[InstanceQuota], deadline: float) -> list[Plan]:
    """Each system's part (_part), solved once per input: a system planned from what another before it is (its
    spec but the name, under the same quotas) gets that one's part under its own name (_renamed); the parts
    solved `options.parallel_parts` at a time (_solved_at_once), each given back to its own system.

    The two solves would build the same model but for the name (one system, the same pool, profiles, features,
    options and quotas) and HiGHS is deterministic, so the plan is the one its own solve gives (a unit test compares
    them); a part with a diagnosis (served below its demand) is solved anyway, its messages name the system.
    """
    def solve(system: SystemSpec) -> Plan:
        return _part(system, gpu, pool_size, store, features, options, quotas, deadline)

    keys = [_part_input(system, quotas) for system in systems]
    first: dict[str, int] = {}
    for at, key in enumerate(keys):
        first.setdefault(key, at)
    solved = dict(zip(first, _solved_at_once([systems[at] for at in first.values()], solve, options.parallel_parts)))
    again = [at for at, key in enumerate(keys) if first[key] != at and solved[key].diagnosis]
    own = dict(zip(again, _solved_at_once([systems[at] for at in again], solve, options.parallel_parts)))
    return [solved[key] if first[key] == at else own[at] if at in own else _renamed(solved[key], systems[at].name)
            for at, key in enumerate(keys)]


def _solved_at_once(items: list[T], solve: Callable[[T], R], at_once: int) -> list[R]:
    """Each item's answer, in the items' order, solved `at_once` at a time (at most the cores this process may use)
    by threads of this process, each holding the models' lock (highs_driver.MODELS) but while HiGHS runs: HiGHS lets
    go of the GIL while it solves, so one part's solve overlaps the next one's model build, and the process's
    memory cap holds them all. An item that raises stops those not
    yet started, and the first item's error in order is raised, as one after another would."""
    threads = min(at_once, len(items), len(os.sched_getaffinity(0)))
    if threads <= 1:
        return [solve(item) for item in items]
    def holding_models(item: T) -> R:
        with MODELS.held():
            return solve(item)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tessera-part") as pool:
        futures = [pool.submit(holding_models, item) for item in items]
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()


def _part_input(system: SystemSpec, quotas: Sequence[InstanceQuota]) -> str:
    """What a part is solved from beyond what all parts share: the spec but its name, and which quotas cap it."""
    capped_by = [i for i, quota in enumerate(quotas) if system.name in quota.systems]
    return f"{capped_by} {system.model_copy(update={'name': ''}).model_dump_json()}"


def _renamed(part: Plan, name: str) -> Plan:
    """A part of one system as the same part of the system `name` (every name it carries renamed), its solve not
    counted again (no build or HiGHS seconds) and `solver.reused` saying whose it is."""
    old = part.systems[0].system
    copy = part.model_copy(deep=True)
    named: list[TaskPlan | PathPlan | SystemSummary | InstancePlan] = [
        *copy.tasks, *copy.paths, *copy.systems, *(i for g in copy.gpus for i in g.instances)]
    for item in named:
        if item.system == old:
            item.system = name
    copy.solver = copy.solver.model_copy(update={"build_s": 0.0, "solve_s": 0.0, "reused": [name]})
    return copy


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
            raise _Fallback("the parts took the whole time limit")
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


def _pack(parts: list[Plan], gpu: str, free: int, room: Counter[str], where: str, features: Features,
          options: PlannerOptions, deadline: float) -> tuple[list[tuple[Layout, int]], tuple[float, float, float, str]]:
    """The fewest GPUs, then slices, of the `free` GPUs whose layouts hold every part's instances beyond the free
    instances `room` (per MIG profile) of GPUs whose layouts stay: (layout, GPUs) and the solve's (value, bound,
    seconds, status). Raises _Fallback where they cannot hold them (`where`: what they were packed onto, in words)."""
    product = gpu_product(gpu)
    needed = Counter(c.segment.mig_profile for part in parts for t in part.tasks for c in t.configs
                     for _ in range(c.replicas)) - room
    if not needed:
        return [], (0.0, 0.0, 0.0, "Optimal")
    layouts = list(valid_layouts(product.name)) if features.spatial_partitioning else [
        ((product.whole_gpu_profile.name, 1),)]
    m = pyo.ConcreteModel(name="tessera-packing")
    m.g = pyo.Var(range(len(layouts)), domain=pyo.NonNegativeIntegers, bounds=(0, free))
    m.cons = pyo.ConstraintList()
    for profile, count in needed.items():
        m.cons.add(sum(dict(layout).get(profile, 0) * m.g[j] for j, layout in enumerate(layouts)) >= count)
    m.cons.add(sum(m.g.values()) <= free)
    weight = COMPUTE_SLICES * free + 1
    cost = sum((weight + layout_compute_slices(product, layout)) * m.g[j] for j, layout in enumerate(layouts))
    highs = HighsModel(m, options.mip_gap)
    highs.set_objective(cost, pyo.minimize)
    result = highs.solve(max(deadline - time.perf_counter(), 1.0), abs_gap=options.slice_tolerance - 1e-6)
    if result is None:
        raise _Fallback(f"the parts' instances do not fit {where} together (packing: {highs.last_status})")
    highs.load_into_model()
    counts = [(layout, round(pyo.value(m.g[j]))) for j, layout in enumerate(layouts)]
    return [(layout, n) for layout, n in counts if n > 0], (result.value, result.bound, result.seconds,
                                                            result.status)


def _report(parts: list[Plan], packing: tuple[float, float, float, str], method: str,
            kept: Sequence[str] = ()) -> SolverReport:
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
        method=method,
        kept=sorted(kept),
        reused=sorted(name for _, report in reports for name in report.reused),
    )

