"""Exhaustive search for the planner's optimum on small instances (a test helper).

It implements the planner's semantics from their statement, not from the
MILP's code: it uses only the spec models, the catalog's profile definitions
(slices, memory, starts, max count) and the profile store's lookups.

Semantics
---------
- one variant per task (only the most accurate ones without feature A);
- demand on a task: source demand x served fraction phi_s x edge factors
  (the factor may depend on the upstream task's variant), summed over parents;
- a task is served by configurations c = (MIG profile, MPS degree k, batch b)
  with r_c >= 0 replicas; with budget B a configuration is usable when
  2 x lat <= B and k x variant memory <= MIG memory (S off: the whole-GPU
  profile with k = 1); its load x_c must satisfy
      r_c x k x (b - 1) x 1000 / (B - lat)  <=  x_c  <=  r_c x min(thr / (1 + headroom), Q)
  (the lower bound only for b > 1), and the loads add up to the demand; lat
  is the p99 batch latency (an estimate's times the spread); with queueing,
  Q = A thr^2 / (ln(100) / 2 x D + A thr), A = k b (floor((B - 2 lat) / lat) + 1) / thr
  (the requests ahead go k b per round, and the budget holds that many whole
  rounds beside two batches, plus the batch in progress), is the most
  load whose p99 queueing wait fits the budget, with D = 1 + the largest
  bulk a parent hands over at once (the edge's largest factor over the
  parent's allowed variants x the parent's largest batch), 1 at a source;
  under a routing that splits bulks over replicas, and only for plans that
  serve all demand, a replica of load lam sees 1 + bulk x g(lam / L) with L
  the task's least demand (source demand x the smallest factor of each
  edge over the parent's allowed variants, summed over parents) and g the
  checker's bulk share, and Q is the largest lam whose wait fits (found here
  by bisection); plans serving less count whole bulks;
- budgets: levels slo x i / levels (T on), or slo / (tasks on the longest
  path) (T off); every path's budgets add up to at most the SLO;
- accuracy: every path's product of normalised accuracies >= the SLO;
- resources: every replica takes one MIG instance of its profile; used GPUs
  each hold a valid layout (derived here from the placement rules by trying
  every set of placements), at most `pool.gpus` GPUs;
- objective, lexicographic: max sum of phi_s; min GPUs; min compute slices;
  max sum over systems of the mean over paths of log(path accuracy); the
  accuracy of systems with `priority: accuracy` comes before GPUs; where
  the systems' `poolPriority` differ and no plan serves every system in
  full, the sum of phi_s is replaced by, per priority, highest first: the
  sum of its phi_s, then (but for the lowest) the sum of its accuracy scores
  (`stage_one`). With several priorities the systems' tables are combined
  by trying every combination (no pruning per vector: a combination's order
  depends on whether all of it is served).

Search, and why each shortcut is safe
-------------------------------------
1. Budgets: a larger budget never hurts (more configurations pass 2 x lat <=
   B, lower bounds drop, upper bounds stay) and the objective does not depend
   on budgets, so only budget vectors that cannot be raised one level on any
   task are tried.
2. Per task, with its variant and budget fixed, every replica vector is
   enumerated configuration by configuration; for each vector of instances
   per MIG profile only the (sum of lower bounds, sum of upper bounds) pairs
   not dominated by another pair of the same instances are kept (a pair with a
   lower L and a higher U routes every demand the other routes). Partial
   vectors that no longer fit the pool are dropped (fitting is closed under
   removing instances).
3. Per system the tasks are combined the same way: with base demands D_t
   (phi = 1), phi is feasible iff max_t L_t / D_t <= phi <= min(1, min_t
   U_t / D_t); pairs (max L/D, min(1, min U/D)) are kept per instance vector
   up to the same dominance.
4. Systems are independent given their instance vectors, so each system
   keeps, per instance vector, its best (phi, accuracy score); they are then
   combined over all pairs of vectors.
5. Idle instances only add slices and never make a layout fit that did not
   fit without them, so instance vectors are exactly the replicas.
6. Parents' largest batches: every vector of them is tried, each parent
   held to batches up to its entry and its children's D computed from it; a
   plan whose parents run smaller batches is also feasible where the vector
   is its own largest batches (D there is its own).
7. Split bulks: the search runs once with split bulks keeping only plans that
   serve all demand, and once with whole bulks; a plan of the first wins
   whenever one exists (it serves all, and whole bulks only load less).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from functools import cache

from tessera.planner.catalog import COMPUTE_SLICES, MEMORY_SLICES, GpuProduct, gpu_product
from tessera.planner.checker import replica_bulk_share
from tessera.planner.features import Features
from tessera.planner.latency import (DEFAULT_CONNECTIONS, Routing, arrival_dispersion, max_segment_load_rps,
                                     p99_batch_latency_ms, replica_dispersion, stage_latency_ms)
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import (ConfigPlan, GpuPlan, InstancePlan, PathPlan, Plan, SolverReport, SystemSummary,
                                  TaskPlan)
from tessera.planner.profiles import Profile, ProfileStore, SegmentType

TOL = 1e-9

Vector = tuple[int, ...]  # instance count per MIG profile, in the GPU's profile order


# ---------------------------------------------------------------------------
# MIG layouts: every set of non-overlapping placements, checked one by one
# ---------------------------------------------------------------------------

@cache
def single_gpu_vectors(gpu_name: str) -> frozenset[Vector]:
    """Instance vectors that one GPU can hold (including the empty one)."""
    gpu = gpu_product(gpu_name)
    placements = []  # (profile index, memory-slice bitmask)
    for index, profile in enumerate(gpu.profiles):
        for start in profile.starts:
            if start + profile.memory_slices > MEMORY_SLICES:
                continue
            mask = sum(1 << s for s in range(start, start + profile.memory_slices))
            placements.append((index, mask))
    vectors = set()
    # No GPU holds more than 7 instances (7 compute slices, each instance >= 1).
    for size in range(COMPUTE_SLICES + 1):
        for chosen in itertools.combinations(placements, size):
            used = 0
            overlap = False
            for _, mask in chosen:
                if used & mask:
                    overlap = True
                    break
                used |= mask
            if overlap:
                continue
            counts = [0] * len(gpu.profiles)
            for index, _ in chosen:
                counts[index] += 1
            if sum(c * p.compute_slices for c, p in zip(counts, gpu.profiles)) > COMPUTE_SLICES:
                continue
            if any(c > p.max_count for c, p in zip(counts, gpu.profiles)):
                continue
            vectors.add(tuple(counts))
    return frozenset(vectors)


@cache
def min_gpus(gpu_name: str, max_gpus: int) -> dict[Vector, int]:
    """The fewest GPUs that hold each instance vector, for vectors that fit in max_gpus GPUs."""
    single = single_gpu_vectors(gpu_name)
    zero = tuple(0 for _ in next(iter(single)))
    best = {zero: 0}
    frontier = {zero}
    for gpus in range(1, max_gpus + 1):
        reached = {_add(a, b) for a in frontier for b in single}
        new = {v for v in reached if v not in best}
        for v in new:
            best[v] = gpus
        frontier = reached
    return best


def _add(a: Vector, b: Vector) -> Vector:
    return tuple(x + y for x, y in zip(a, b))


# ---------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Objective:
    served: float  # sum over systems of the served fraction
    gpus: int
    slices: int
    accuracy: float  # sum over systems of the mean log path accuracy
    # the same sum over the systems with `priority: accuracy` only; it comes right after `served`
    priority_accuracy: float = 0.0
    # with several poolPriority values and not every system served in full: stage_one's vector, first of all
    by_priority: tuple[float, ...] = ()


def stage_one(systems: list[SystemSpec], served: list[float], accuracy: list[float]) -> tuple[float, ...]:
    """Per poolPriority, highest first: its systems' served fractions summed, then (but for the lowest) their
    accuracy scores summed; () with one priority or every system served in full (then stage 1 is the sum)."""
    levels = sorted({s.pool_priority for s in systems}, reverse=True)
    if len(levels) == 1 or all(phi >= 1 - TOL for phi in served):
        return ()
    vector: list[float] = []
    for rank, level in enumerate(levels):
        members = [i for i, s in enumerate(systems) if s.pool_priority == level]
        vector.append(sum(served[i] for i in members))
        if rank + 1 < len(levels):
            vector.append(sum(accuracy[i] for i in members))
    return tuple(vector)


@dataclass(frozen=True)
class _Option:
    """A configuration a task may use under one (variant, budget): one replica's load bounds."""

    profile: int  # index into gpu.profiles
    segment: SegmentType
    batch: int
    profile_figures: Profile
    low: float  # per replica: least load (batch fill)
    high: float  # per replica: most load (throughput with headroom, queueing wait within the budget)
    latency_ms: float  # p99 batch latency


@dataclass(frozen=True)
class SystemChoice:
    """What the search chose for one system: enough to write the plan down."""

    system: str
    served_fraction: float
    variants: dict[str, str]
    budgets: dict[str, float]
    replicas: dict[str, tuple[tuple[_Option, int], ...]]  # per task: (option, replicas > 0)


@dataclass(frozen=True)
class _Queueing:
    on: bool
    latency_spread: float
    routing: Routing = Routing.ONE_REPLICA
    connections: int = DEFAULT_CONNECTIONS
    split: bool = False  # this pass takes bulk shares of least demands (plans that serve all demand only)

    @property
    def splits(self) -> bool:
        return self.on and self.routing is not Routing.ONE_REPLICA


def least_demand(system: SystemSpec, task: str, allowed: dict[str, list[str]]) -> float:
    """The least demand any allowed variant choice puts on the task (phi = 1), edge by edge."""
    parents = system.parents(task)
    if not parents:
        return system.demand_rps
    return sum(least_demand(system, e.source, allowed) * min(e.factor_for(v) for v in allowed[e.source])
               for e in parents)


def split_most_load(lat: float, thr: float, budget: float, bulk: float, base: float, queueing: _Queueing,
                    round_requests: int) -> float:
    """The largest load per replica whose p99 wait, with its share of the bulk, fits beside two batches:
    the thr x wait requests ahead go `round_requests` per round, and the budget holds the whole rounds
    that fit beside two batches and one more (the wait only grows with the load, so bisection finds the
    end of the loads that fit)."""
    allowance_s = round_requests * (math.floor((budget - 2 * lat) / lat + 1e-12) + 1) / thr

    def fits(load: float) -> bool:
        share = replica_bulk_share(load / base, queueing.routing, queueing.connections)
        dispersion = 1 + bulk * share
        return math.log(100) / 2 * load * dispersion / (thr * (thr - load)) <= allowance_s

    if allowance_s <= 0:
        return 0.0
    low, high = 0.0, thr
    for _ in range(200):
        middle = (low + high) / 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def allowed_variants(system: SystemSpec, features: Features) -> dict[str, list[str]]:
    return {task.name: [v.name for v in task.variants
                        if features.accuracy_scaling or v.accuracy == task.best_accuracy] for task in system.tasks}


def dispersion_of(system: SystemSpec, task: str, largest_batch: dict[str, int], allowed: dict[str, list[str]],
                  queueing: bool) -> float:
    """D = 1 + the largest bulk (the edge's largest factor over the parent's allowed variants x the parent's
    largest batch) of the task's parents; 1 at a source; 0 without queueing."""
    if not queueing:
        return 0.0
    bulks = [max(e.factor_for(v) for v in allowed[e.source]) * largest_batch[e.source]
             for e in system.parents(task)]
    return arrival_dispersion(max(bulks, default=0.0))


@dataclass
class _TaskTable:
    options: list[_Option]
    # per instance vector: undominated (sum of lower bounds, sum of upper bounds, replicas per option)
    table: dict[Vector, list[tuple[float, float, tuple[int, ...]]]]


def exhaustive_optimum(
    systems: list[SystemSpec],
    pool: Pool,
    store: ProfileStore,
    features: Features = Features(),
    headroom: float = 0.1,
    budget_levels: int = 20,
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32),
    queueing: bool = True,
    latency_spread: float = 1.0,
    routing: Routing = Routing.ONE_REPLICA,
    connections: int = DEFAULT_CONNECTIONS,
) -> Objective | None:
    """The optimal objective, or None when no plan exists (no variants meet the accuracy SLO)."""
    found = exhaustive_search(systems, pool, store, features, headroom, budget_levels, batches, queueing,
                              latency_spread, routing, connections)
    return None if found is None else found[0]


def exhaustive_search(systems, pool, store, features=Features(), headroom=0.1, budget_levels=20,
                      batches=(1, 2, 4, 8, 16, 32), queueing=True, latency_spread=1.0,
                      routing=Routing.ONE_REPLICA,
                      connections=DEFAULT_CONNECTIONS) -> tuple[Objective, list[SystemChoice]] | None:
    """The optimal objective and the choices that reach it, or None when no plan exists."""
    whole = _Queueing(queueing, latency_spread, routing, connections)
    if whole.splits:
        split = _search(systems, pool, store, features, headroom, budget_levels, batches,
                        _Queueing(queueing, latency_spread, routing, connections, split=True))
        if split is not None and all(c.served_fraction >= 1 - TOL or s.demand_rps <= 0
                                     for s, c in zip(systems, split[1])):
            return split
    return _search(systems, pool, store, features, headroom, budget_levels, batches, whole)


def _search(systems, pool, store, features, headroom, budget_levels, batches,
            queueing: _Queueing) -> tuple[Objective, list[SystemChoice]] | None:
    gpu = gpu_product(pool.gpu)
    fits = min_gpus(gpu.name, pool.gpus)
    per_system = []
    for system in systems:
        table = _system_table(system, gpu, fits, store, features, headroom, budget_levels, batches, queueing)
        if queueing.split:  # this pass plans only what serves all of it
            table = {v: entry for v, entry in table.items() if entry[0] >= 1 - TOL or system.demand_rps <= 0}
        if not table:
            return None
        per_system.append(table)
    if len({s.pool_priority for s in systems}) > 1:
        return _search_every_combination(systems, per_system, gpu, fits)

    # Combine systems: per total instance vector, the best (served, accuracy of the systems with
    # priority accuracy, accuracy of all, choices); for one vector the cost is fixed, so this order is
    # the objective's.
    combined: dict[Vector, tuple] = {tuple(0 for _ in gpu.profiles): (0.0, 0.0, 0.0, ())}
    for system, table in zip(systems, per_system):
        first = system.priority == "accuracy"
        nxt: dict[Vector, tuple] = {}
        for v1, (s1, p1, a1, w1) in combined.items():
            for v2, (s2, a2, w2) in table.items():
                v = _add(v1, v2)
                if v not in fits:
                    continue
                value = (s1 + s2, p1 + (a2 if first else 0.0), a1 + a2, w1 + (w2,))
                if v not in nxt or _better(value, nxt[v]):
                    nxt[v] = value
        combined = nxt

    best: tuple[Objective, list[SystemChoice]] | None = None
    for v, (served, priority_accuracy, accuracy, choices) in combined.items():
        slices = sum(n * p.compute_slices for n, p in zip(v, gpu.profiles))
        candidate = Objective(served, fits[v], slices, accuracy, priority_accuracy)
        if best is None or _objective_better(candidate, best[0]):
            best = (candidate, list(choices))
    return best


def _search_every_combination(systems, per_system, gpu, fits) -> tuple[Objective, list[SystemChoice]] | None:
    best: tuple[Objective, list[SystemChoice]] | None = None
    for combination in itertools.product(*(table.items() for table in per_system)):
        v = tuple(sum(counts) for counts in zip(*(vector for vector, _ in combination)))
        if v not in fits:
            continue
        served = [entry[0] for _, entry in combination]
        accuracy = [entry[1] for _, entry in combination]
        candidate = Objective(
            sum(served), fits[v], sum(n * p.compute_slices for n, p in zip(v, gpu.profiles)), sum(accuracy),
            sum(a for a, s in zip(accuracy, systems) if s.priority == "accuracy"),
            stage_one(systems, served, accuracy))
        if best is None or _objective_better(candidate, best[0]):
            best = (candidate, [entry[2] for _, entry in combination])
    return best


def _better(a: tuple, b: tuple) -> bool:
    """Numbers first in a and b, lexicographically (bigger is better) with a tolerance; the rest is ignored."""
    for x, y in zip(a, b):
        if not isinstance(x, float | int) or not isinstance(y, float | int):
            return False
        if x > y + TOL:
            return True
        if x < y - TOL:
            return False
    return False


def _objective_better(a: Objective, b: Objective) -> bool:
    if bool(a.by_priority) != bool(b.by_priority):
        return not a.by_priority  # serving every system in full comes first
    for x, y in zip(a.by_priority, b.by_priority):
        if abs(x - y) > TOL:
            return x > y
    if abs(a.served - b.served) > TOL:
        return a.served > b.served
    if abs(a.priority_accuracy - b.priority_accuracy) > TOL:
        return a.priority_accuracy > b.priority_accuracy
    if a.gpus != b.gpus:
        return a.gpus < b.gpus
    if a.slices != b.slices:
        return a.slices < b.slices
    return a.accuracy > b.accuracy + TOL


def _system_table(system, gpu, fits, store, features, headroom, levels, batches,
                  queueing: _Queueing) -> dict[Vector, tuple]:
    """Per instance vector, the best (served fraction, accuracy score, SystemChoice) of one system."""
    tasks = [t.name for t in system.tasks]
    allowed = allowed_variants(system, features)
    variant_choices = [allowed[t] for t in tasks]
    parents = sorted({e.source for e in system.edges}) if queueing.on else []
    largest_batches = [dict(zip(parents, vector)) for vector in itertools.product(batches, repeat=len(parents))]
    slo = system.slo
    budget_vectors = _maximal_budgets(system, tasks, features, levels)
    zero = tuple(0 for _ in gpu.profiles)
    table: dict[Vector, tuple] = {}
    task_cache: dict[tuple[str, str, float], _TaskTable] = {}

    for chosen in itertools.product(*variant_choices):
        variants = dict(zip(tasks, chosen))
        accuracies = [system.path_accuracy(path, variants) for path in system.paths]
        if any(a < slo.accuracy - TOL for a in accuracies):
            continue
        score = sum(math.log(a) for a in accuracies) / len(accuracies)
        # Serving nothing is always possible.
        nothing = SystemChoice(system.name, 0.0, variants, dict(zip(tasks, budget_vectors[0])),
                               {t: () for t in tasks})
        if zero not in table or _better((0.0, score), table[zero]):
            table[zero] = (0.0, score, nothing)
        if system.demand_rps <= 0:
            continue
        base = system.demand(variants)  # at phi = 1
        for budgets, largest in itertools.product(budget_vectors, largest_batches):
            # states: instance vector -> (max L/D, min(1, min U/D), replicas per task) over the tasks so far
            states: dict[Vector, list[tuple]] = {zero: [(0.0, 1.0, ())]}
            per_task_tables = []
            for task_name, budget in zip(tasks, budgets):
                own = tuple(b for b in batches if b <= largest.get(task_name, b))
                dispersion = dispersion_of(system, task_name, largest, allowed, queueing.on)
                share_base = least_demand(system, task_name, allowed) if queueing.split else 0.0
                key = (task_name, variants[task_name], budget, own, dispersion, share_base)
                if key not in task_cache:
                    task_cache[key] = _task_table(system, task_name, variants[task_name], budget, gpu, fits,
                                                  store, features, headroom, own, dispersion, share_base, queueing)
                per_task = task_cache[key]
                per_task_tables.append(per_task)
                demand = base[task_name]
                nxt: dict[Vector, list[tuple]] = {}
                for v1, pairs1 in states.items():
                    for v2, pairs2 in per_task.table.items():
                        v = _add(v1, v2)
                        if v not in fits:
                            continue
                        for low1, high1, reps1 in pairs1:
                            for low2, high2, reps2 in pairs2:
                                pair = (max(low1, low2 / demand), min(high1, high2 / demand), reps1 + (reps2,))
                                if pair[0] > pair[1] * (1 + TOL) + TOL:
                                    continue  # no phi routes this
                                _keep_pareto(nxt.setdefault(v, []), pair)
                states = nxt
            for v, pairs in states.items():
                low, phi, reps = max(pairs, key=lambda pair: pair[1])
                if v not in table or _better((phi, score), table[v]):
                    replicas = {
                        t: tuple((option, r) for option, r in zip(tt.options, task_reps) if r > 0)
                        for t, tt, task_reps in zip(tasks, per_task_tables, reps)
                    }
                    choice = SystemChoice(system.name, phi, variants, dict(zip(tasks, budgets)), replicas)
                    table[v] = (phi, score, choice)
    return table


def _keep_pareto(pairs: list[tuple], pair: tuple) -> None:
    """Add (low, high, ...) unless a kept pair has lower-or-equal low and higher-or-equal high."""
    low, high = pair[0], pair[1]
    for other in pairs:
        if other[0] <= low and other[1] >= high:
            return
    pairs[:] = [other for other in pairs if not (low <= other[0] and high >= other[1])]
    pairs.append(pair)


def _task_table(system, task_name, variant_name, budget, gpu: GpuProduct, fits, store: ProfileStore,
                features: Features, headroom: float, batches, dispersion: float, base: float,
                queueing: _Queueing) -> _TaskTable:
    """Per instance vector of this task alone, the undominated (sum of lower, sum of upper) load bounds."""
    variant = system.task(task_name).variant(variant_name)
    options: list[_Option] = []
    for index, profile in enumerate(gpu.profiles):
        if not features.spatial_partitioning and profile.compute_slices != COMPUTE_SLICES:
            continue
        degrees = gpu.mps_degrees if features.spatial_partitioning else (1,)
        for k in degrees:
            if k * variant.memory_gb > profile.memory_gb:
                continue
            segment = SegmentType(gpu=gpu.name, mig_profile=profile.name, mps=k)
            for b in batches:
                found = store.get(variant_name, segment, b)
                if found is None:
                    continue
                lat = p99_batch_latency_ms(found, queueing.latency_spread)
                thr = found.throughput_rps
                if 2 * lat > budget:
                    continue
                wait_bound = (split_most_load(lat, thr, budget, dispersion - 1, base, queueing, k * b)
                              if base > 0 and dispersion > 1
                              else max_segment_load_rps(lat, thr, dispersion, budget, k * b))
                high = min(thr / (1 + headroom), wait_bound)
                low = k * (b - 1) * 1000.0 / (budget - lat) if b > 1 else 0.0
                if low > high:
                    continue  # no load fills its batches in time without overloading it
                options.append(_Option(index, segment, b, found, low, high, lat))
    zero = tuple(0 for _ in gpu.profiles)
    table: dict[Vector, list[tuple[float, float, tuple[int, ...]]]] = {zero: [(0.0, 0.0, ())]}
    for option in options:
        nxt: dict[Vector, list[tuple[float, float, tuple[int, ...]]]] = {}
        for v, pairs in table.items():
            replicas = 0
            current = v
            while current in fits:
                for low, high, reps in pairs:
                    _keep_pareto(nxt.setdefault(current, []),
                                 (low + replicas * option.low, high + replicas * option.high, reps + (replicas,)))
                replicas += 1
                current = tuple(n + (1 if i == option.profile else 0) for i, n in enumerate(current))
        table = nxt
    return _TaskTable(options, table)


def _maximal_budgets(system: SystemSpec, tasks: list[str], features: Features, levels: int) -> list[tuple[float, ...]]:
    slo = system.slo.latency_ms
    if not features.task_budgeting:
        equal = slo / system.longest_path_tasks
        return [tuple(equal for _ in tasks)]
    position = {t: i for i, t in enumerate(tasks)}
    paths = [[position[t] for t in path] for path in system.paths]

    def feasible(levels_vector) -> bool:
        return all(sum(levels_vector[i] for i in path) <= levels for path in paths)

    vectors = []
    for vector in itertools.product(range(1, levels + 1), repeat=len(tasks)):
        if not feasible(vector):
            continue
        raised = any(
            feasible(vector[:i] + (vector[i] + 1,) + vector[i + 1:])
            for i in range(len(tasks)) if vector[i] < levels
        )
        if not raised:
            vectors.append(tuple(slo * i / levels for i in vector))
    return vectors


# ---------------------------------------------------------------------------
# The search's choice written down as a Plan, so that the checker can judge it
# ---------------------------------------------------------------------------

def witness_plan(systems: list[SystemSpec], pool: Pool, features: Features, headroom: float,
                 choices: list[SystemChoice], queueing: bool = True, latency_spread: float = 1.0,
                 routing: Routing = Routing.ONE_REPLICA, connections: int = DEFAULT_CONNECTIONS) -> Plan:
    """A plan that reaches the search's optimum: loads routed within bounds, instances placed on GPUs."""
    gpu = gpu_product(pool.gpu)
    task_plans: list[TaskPlan] = []
    path_plans: list[PathPlan] = []
    summaries: list[SystemSummary] = []
    needed: list[tuple[str, str, int, str]] = []  # (system, task, config index, MIG profile) per replica
    split = (queueing and routing is not Routing.ONE_REPLICA
             and all(c.served_fraction >= 1 - TOL or s.demand_rps <= 0 for s, c in zip(systems, choices)))
    for system, choice in zip(systems, choices):
        base = system.demand(choice.variants)
        stage_of: dict[str, float] = {}
        largest_used = {t: max((o.batch for o, _ in picked), default=0) for t, picked in choice.replicas.items()}
        allowed = allowed_variants(system, features)
        for task in system.tasks:
            demand = choice.served_fraction * base[task.name]
            picked = choice.replicas[task.name]
            low = sum(r * o.low for o, r in picked)
            high = sum(r * o.high for o, r in picked)
            spare = max(demand - low, 0.0)
            configs = []
            dispersion = dispersion_of(system, task.name, largest_used, allowed, queueing)
            share_base = least_demand(system, task.name, allowed) if split else 0.0
            for index, (option, replicas) in enumerate(picked):
                share = (replicas * (option.high - option.low) / (high - low)) if high > low else 0.0
                load = replicas * option.low + spare * share
                figures = option.profile_figures
                configs.append(ConfigPlan(
                    segment=option.segment, batch=option.batch, replicas=replicas,
                    batch_latency_ms=option.latency_ms, segment_throughput_rps=figures.throughput_rps,
                    load_rps=load,
                    stage_latency_ms=stage_latency_ms(
                        option.latency_ms, option.batch, option.segment.mps, load / replicas, figures.throughput_rps,
                        replica_dispersion(dispersion - 1, load / replicas, share_base, routing, connections)
                        if dispersion > 1 else dispersion),
                    source=figures.source, latency_spread=option.latency_ms / figures.latency_ms,
                ))
                needed += [(system.name, task.name, index, option.segment.mig_profile)] * replicas
            stage_of[task.name] = max((c.stage_latency_ms for c in configs), default=0.0)
            task_plans.append(TaskPlan(
                system=system.name, task=task.name, variant=choice.variants[task.name],
                normalised_accuracy=task.normalised_accuracy(choice.variants[task.name]), demand_rps=demand,
                budget_ms=choice.budgets[task.name], stage_latency_ms=stage_of[task.name], configs=configs,
                arrival_dispersion=dispersion, share_base_rps=share_base,
            ))
        paths = []
        for path in system.paths:
            paths.append(PathPlan(system=system.name, tasks=list(path),
                                  latency_ms=sum(stage_of[t] for t in path),
                                  budget_ms=sum(choice.budgets[t] for t in path),
                                  accuracy=system.path_accuracy(path, choice.variants)))
        path_plans += paths
        summaries.append(SystemSummary(
            system=system.name, demand_rps=system.demand_rps,
            served_rps=choice.served_fraction * system.demand_rps, latency_slo_ms=system.slo.latency_ms,
            worst_path_latency_ms=max(p.latency_ms for p in paths), accuracy_slo=system.slo.accuracy,
            worst_path_accuracy=min(p.accuracy for p in paths),
        ))

    total = tuple(sum(1 for n in needed if n[3] == p.name) for p in gpu.profiles)
    per_gpu = _split_into_gpus(gpu.name, total, pool.gpus)
    assert per_gpu is not None, f"instances {total} do not fit {pool.gpus} GPUs"
    gpu_plans = []
    remaining = list(needed)
    for index, vector in enumerate(per_gpu):
        instances = []
        for profile, count in zip(gpu.profiles, vector):
            for _ in range(count):
                taken = next(n for n in remaining if n[3] == profile.name)
                remaining.remove(taken)
                instances.append(InstancePlan(mig_profile=profile.name, system=taken[0], task=taken[1],
                                              config=taken[2]))
        gpu_plans.append(GpuPlan(index=index, layout=[(p.name, n) for p, n in zip(gpu.profiles, vector) if n],
                                 instances=instances))
    return Plan(
        gpu=gpu.name, pool_gpus=pool.gpus, features=features.label, headroom=headroom, queueing=queueing,
        latency_spread=latency_spread, routing=routing, connections=connections, tasks=task_plans,
        gpus=gpu_plans, paths=path_plans, systems=summaries, gpus_used=len(per_gpu),
        slices_used=sum(n * p.compute_slices for n, p in zip(total, gpu.profiles)),
        profile_sources=dict(Counter(c.source.value for t in task_plans for c in t.configs)), solver=SolverReport(status="exhaustive", stages=[], objective={}, mip_gap=0.0,
                                                build_s=0.0, solve_s=0.0, variables=0, constraints=0),
    )


def _split_into_gpus(gpu_name: str, total: Vector, gpus: int) -> list[Vector] | None:
    """The fewest non-empty single-GPU vectors adding up to total (at most `gpus`)."""
    if not any(total):
        return []
    if gpus == 0:
        return None
    singles = sorted((v for v in single_gpu_vectors(gpu_name) if any(v)), key=lambda v: -sum(v))
    for used in range(1, gpus + 1):
        found = _split(total, singles, used)
        if found is not None:
            return found
    return None


def _split(total: Vector, singles: list[Vector], count: int) -> list[Vector] | None:
    if count == 1:
        return [total] if total in singles else None
    for first in singles:
        rest = tuple(a - b for a, b in zip(total, first))
        if min(rest) < 0 or not any(rest):
            continue
        found = _split(rest, singles, count - 1)
        if found is not None:
            return [first] + found
    return None
