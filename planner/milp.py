"""The compound-system MILP (JigsawServe), built in Pyomo and solved by HiGHS.

Decisions: one variant per task (binary y), one latency budget level per task
(binary z), MIG instance counts per candidate configuration (integer n) with
the load routed to it (x), and the number of GPUs using each valid MIG layout
(integer g). Counting GPUs per layout, rather than deciding per GPU, keeps
the model the same size at any pool size; concrete GPUs are assigned after
the solve (assignment.py).

Demand flows along edges whose factor may depend on the upstream variant.
That product of a binary and a continuous demand is made linear exactly by
splitting the upstream demand into one part per variant (W), of which only
the chosen variant's may be non-zero.

The latency model is latency.py's. Every task picks one budget level (binary
z). A candidate run under level k is an "option": usable only when 2 x batch
latency fits the level, with the least load per instance that fills its
batches in time under it. Within one (task, variant, MIG profile, level)
only options that no other option beats on both throughput and least load
are kept, which is exact. A candidate's kept options become one unit with one
replica count and load (not one per level): its least load follows the
task's level in steps, so the columns stay as many as the candidates.
With queueing on, its most load per instance follows the level the same way
and also the bulk its parents hand over at once: per edge, binaries U say
which of the parent's batches is its largest (the parent's options set them),
and each step gets a row that the next level relaxes, in which a count of
the instances under each bulk class or larger takes the most load down to
that class's (one row per step and one per class, not per step and class).
With a routing that splits bulks over replicas, those rows
take a replica's share of its task's least demand (latency.py): valid only
while all demand is served, so they are relaxed, and the rows of whole bulks
added, when the pool cannot serve it all.
While all demand is served, whole-slice cuts (an integer knapsack per task,
variant and level) give the relaxation the rounding up of instances that
fractional replicas hide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyomo.environ as pyo

from tessera.planner.candidates import Candidate
from tessera.planner.change_cost import NodeGroup
from tessera.planner.catalog import COMPUTE_SLICES, GpuProduct, Layout, layout_compute_slices
from tessera.planner.latency import (DEFAULT_CONNECTIONS, Routing, arrival_dispersion, max_replica_load_rps,
                                     min_segment_load_rps, usable_load_rps)
from tessera.planner.model import Edge, SystemSpec
from tessera.planner.quota import InstanceQuota

if TYPE_CHECKING:
    from tessera.planner.assignment import ConfigKey

TaskKey = tuple[str, str]
VariantKey = tuple[str, str, str]
_MAX_ROUNDED_SLICES = 256  # beyond this many slices a task's rounding is a small share of its cost


@dataclass
class MilpInput:
    systems: list[SystemSpec]
    gpu: GpuProduct
    pool_gpus: int
    candidates: list[Candidate]
    levels: dict[str, list[float]]
    layouts: list[Layout]
    utilisation: float
    variants: dict[TaskKey, list[str]]
    tier_ratio: float = 2.0
    busy_instances: int = 0
    maximise_common_scale: bool = False
    scale_upper_bound: float = 1.0
    current_layouts: dict[Layout, int] = field(default_factory=dict)
    current_replicas: dict[ConfigKey, int] = field(default_factory=dict)
    # GPUs that may be re-partitioned; the rest of the pool is fixed_groups
    # (layout, instances tessera may use, GPUs): nodes whose layouts must stay.
    free_gpus: int | None = None
    fixed_groups: list[tuple[Layout, Layout, int]] = field(default_factory=list)
    # The p99 queueing wait in the stage latency (latency.py); off, the model before it.
    queueing: bool = False
    # How requests reach a task's replicas: whether a parent's bulk is split over them (latency.Routing).
    routing: Routing = Routing.ONE_REPLICA
    connections: int = DEFAULT_CONNECTIONS
    # Nodes that carry instances, grouped by layouts, and what changing one costs (change_cost.py):
    # the share of its capacity a change loses over the plan's horizon, and the most nodes changed.
    node_groups: list[NodeGroup] = field(default_factory=list)
    change_share: float = 0.0
    max_nodes_changed: int | None = None
    # At most so many instances of a profile for a set of systems (a namespace's ResourceQuota, quota.py).
    quotas: list[InstanceQuota] = field(default_factory=list)
    # poolPriority -> GPUs that may be re-partitioned and only systems of a higher priority may use
    # (NodeState.usable_above; _priority_thresholds).
    usable_above: dict[int, int] = field(default_factory=dict)

    @property
    def splits_bulks(self) -> bool:
        """Whether replicas' bulk shares of their task's least demand bound the wait (all demand served)."""
        return self.queueing and self.routing is not Routing.ONE_REPLICA and not self.maximise_common_scale

    @property
    def repartitionable_gpus(self) -> int:
        return self.pool_gpus if self.free_gpus is None else self.free_gpus


def candidate_key(c: Candidate) -> ConfigKey:
    return (c.system, c.task, c.variant, c.segment, c.batch)


def demand_bound(system: SystemSpec, variants: dict[TaskKey, list[str]],
                 pick: Callable[[Iterable[float]], float] = max) -> dict[str, float]:
    """Bound on every task's demand over all allowed variant choices (upper with max, lower with min)."""
    bound: dict[str, float] = {}
    for name in system.topological_order:
        parents = system.parents(name)
        if not parents:
            bound[name] = system.demand_rps
            continue
        bound[name] = sum(
            bound[e.source] * pick(e.factor_for(v) for v in variants[(system.name, e.source)])
            for e in parents
        )
    return bound


@dataclass(frozen=True)
class Arrivals:
    """What one edge hands its child task at once: the bulk of each batch its parent may run.

    A bulk is the edge's largest factor over the parent's allowed variants x
    the parent's batch (one class per batch, not per variant and batch: far
    fewer rows, and safe). `bulks` are sorted; class j holds while the
    parent's largest batch is the j-th. A child's most load per instance
    follows the class, as its least load follows its budget level.
    """

    parent: str
    bulks: tuple[float, ...]

    @property
    def dispersions(self) -> tuple[float, ...]:
        return tuple(arrival_dispersion(b) for b in self.bulks)


def arrivals(data: MilpInput) -> dict[TaskKey, list[Arrivals]]:
    """Per task, its incoming edges' bulk classes (none for a source task, or with queueing off)."""
    found: dict[TaskKey, list[Arrivals]] = {}
    for system in data.systems:
        for task in system.tasks:
            found[(system.name, task.name)] = [] if not data.queueing else [
                Arrivals(e.source, tuple(sorted({largest_factor(data, system, e) * c.batch for c in data.candidates
                                                 if (c.system, c.task) == (system.name, e.source)})))
                for e in system.parents(task.name)
            ]
    return found


def largest_factor(data: MilpInput, system: SystemSpec, edge: Edge) -> float:
    return max(edge.factor_for(v) for v in data.variants[(system.name, edge.source)])


def dispersion_range(data: MilpInput, edges: list[Arrivals]) -> tuple[float, float]:
    """The least and most index of dispersion a task's arrivals can have (Poisson at a source)."""
    if not data.queueing:
        return 0.0, 0.0
    if not edges or not all(e.bulks for e in edges):
        return 1.0, 1.0
    return (max(e.dispersions[0] for e in edges), max(e.dispersions[-1] for e in edges))


def most_load_rps(data: MilpInput, c: Candidate, budget_ms: float, dispersion: float, base_rps: float = 0.0) -> float:
    """Per instance: the usable throughput, or less where the p99 queueing wait must fit the budget; with a
    base (the task's least demand), a replica sees only its share of the bulk (1 + bulk = dispersion)."""
    if base_rps <= 0 or dispersion <= 1:
        return usable_load_rps(c.latency_ms, c.throughput_rps, data.utilisation, dispersion, budget_ms,
                               c.segment.mps * c.batch)
    return min(c.throughput_rps * data.utilisation,
               max_replica_load_rps(c.latency_ms, c.throughput_rps, budget_ms, dispersion - 1, base_rps,
                                    data.routing, data.connections, round_requests=c.segment.mps * c.batch))


def share_bases(data: MilpInput) -> dict[TaskKey, float]:
    """Per task, the load its replicas' bulk shares are taken of: its least demand while all is served
    (0 everywhere when bulks are not split)."""
    if not data.splits_bulks:
        return {}
    return {(system.name, task): demand
            for system in data.systems for task, demand in demand_bound(system, data.variants, pick=min).items()}


@dataclass(frozen=True)
class Option:
    """A candidate usable under its task's budget level `level` and every higher one.

    `min_load_rps` is the least load per instance that fills its batches at
    `level`; higher levels need less, so it holds for them too.
    """

    candidate: int
    level: int
    min_load_rps: float
    # The most load per instance at `level` under the task's least and most dispersed arrivals.
    max_load_rps: tuple[float, float]

    def carries_at_least(self, other: "Option") -> bool:
        """At least as much load at every dispersion between (1 / most load is linear in the dispersion)."""
        return all(mine >= theirs for mine, theirs in zip(self.max_load_rps, other.max_load_rps))


@dataclass(frozen=True)
class Unit:
    """One candidate's instances under every level it is usable at: one replica count and load in the MILP.

    `steps` are its options' (level, least load), levels rising and least
    loads falling; the task's level picks the step whose least load holds.
    One count per candidate instead of one per option keeps the model's
    columns as many as the candidates (not candidates x levels), at the
    price of one row per step.
    """

    candidate: int
    steps: tuple[tuple[int, float], ...]

    @property
    def level(self) -> int:
        """The lowest level the candidate is usable at."""
        return self.steps[0][0]

    @property
    def min_load_rps(self) -> float:
        """The least load per instance at any level (the last step's)."""
        return self.steps[-1][1]


def units(options: list[Option]) -> list[Unit]:
    steps: dict[int, list[tuple[int, float]]] = {}
    for option in options:
        steps.setdefault(option.candidate, []).append((option.level, option.min_load_rps))
    return [Unit(candidate, tuple(sorted(found))) for candidate, found in steps.items()]


def _tiers(data: MilpInput, c: Candidate, dispersions: tuple[float, float], base_rps: float) -> list[Option]:
    """Options of one candidate: the first usable level, then wherever the least load drops by the tier
    ratio or the most load rises at all.

    With ratio 1 every level that changes either is an option of its own
    (exact); a larger ratio keeps fewer options and charges levels between
    tiers the least load of the tier below, which is safe but may cost a
    little optimality. The most load (below the throughput only where the
    queueing wait binds) gets no tiers: the exhaustive search found them
    losing up to a third of the served demand on 3-4 GPU pools.
    """
    options: list[Option] = []
    ratio, ceiling = data.tier_ratio, c.throughput_rps * data.utilisation
    for k, budget in enumerate(data.levels[c.system]):
        least_dispersed = most_load_rps(data, c, budget, dispersions[0], base_rps)
        # Once where the least and most dispersed arrivals are alike (both 0 without the queueing wait, the default):
        # this runs for every candidate at every level, the largest share of building the options.
        most = (least_dispersed, least_dispersed if dispersions[1] == dispersions[0]
                else most_load_rps(data, c, budget, dispersions[1], base_rps))
        if not c.usable_at(budget, most[0]):
            continue
        need = min_segment_load_rps(c.latency_ms, c.batch, c.segment.mps, budget)
        if not options:
            options.append(Option(-1, k, need, most))
        else:
            last = options[-1]
            drops = need < last.min_load_rps and need * ratio <= last.min_load_rps
            # Every rise of the most load: charging the tier below's cost up to half an instance's
            # carry where the queueing wait binds (3-4 GPU pools served 0.31 of an optimum's 0.50).
            rises = most[1] > last.max_load_rps[1] * (1 + 1e-9)
            if drops or rises:
                options.append(Option(-1, k, need, most))
        if need == 0 and most[1] >= ceiling:
            break
    return options


def build_options(data: MilpInput, found: dict[TaskKey, list[Arrivals]]) -> list[Option]:
    least = {} if data.maximise_common_scale else {
        (system.name, task): demand
        for system in data.systems for task, demand in demand_bound(system, data.variants, pick=min).items()
    }
    ranges = {task: dispersion_range(data, edges) for task, edges in found.items()}
    bases = share_bases(data)
    groups: dict[tuple[str, str, str, str], list[Option]] = {}
    for i, c in enumerate(data.candidates):
        for tier in _tiers(data, c, ranges[(c.system, c.task)], bases.get((c.system, c.task), 0.0)):
            key = (c.system, c.task, c.variant, c.segment.mig_profile)
            groups.setdefault(key, []).append(Option(i, tier.level, tier.min_load_rps, tier.max_load_rps))
    options = []
    for (system, task, _, _), group in groups.items():
        kept = _pareto(data, group)
        busiest = max(data.candidates[o.candidate].throughput_rps for o in kept)
        if data.busy_instances and least.get((system, task), 0.0) >= data.busy_instances * busiest:
            kept = _busiest(data, kept)
        options += kept
    return options


def _pareto(data: MilpInput, group: list[Option]) -> list[Option]:
    """Options no other beats on throughput, least and most load from the same or a lower level (exact)."""
    group = sorted(group, key=lambda o: (o.level, -data.candidates[o.candidate].throughput_rps, o.min_load_rps,
                                         tuple(-m for m in o.max_load_rps)))
    kept: list[Option] = []
    for option in group:
        throughput = data.candidates[option.candidate].throughput_rps
        if not any(data.candidates[k.candidate].throughput_rps >= throughput and k.min_load_rps <= option.min_load_rps
                   and k.carries_at_least(option) for k in kept):
            kept.append(option)
    return kept


def _busiest(data: MilpInput, kept: list[Option]) -> list[Option]:
    """For a task that keeps many instances of this kind busy, the highest-throughput option per level.

    Low-throughput options only help to fill a lightly loaded last instance,
    so dropping them costs at most a fraction of one instance (inexact; the
    planner benchmark measures it).
    """
    best: dict[int, Option] = {}
    for option in kept:
        current = best.get(option.level)
        if current is None or (data.candidates[option.candidate].throughput_rps
                               > data.candidates[current.candidate].throughput_rps):
            best[option.level] = option
    return list(best.values())


def fewest_slices(capacity: dict[int, float], demand: float, most: int) -> int:
    """The fewest compute slices whose instances carry `demand` (an unbounded knapsack over instance sizes).

    `capacity` is the most load one instance of each size carries. Past
    `most` slices the answer is `most`, an under-estimate, which keeps a
    bound built on it valid.
    """
    carried = [0.0]
    while carried[-1] < demand * (1 - 1e-9) and len(carried) <= most:
        k = len(carried)
        carried.append(max([carried[k - size] + load for size, load in capacity.items() if size <= k]
                           + [carried[k - 1]]))
    return min(len(carried) - 1, most)


class CompoundMilp:
    """The Pyomo model and the expressions each objective stage uses."""

    def __init__(self, data: MilpInput) -> None:
        self.data = data
        self.m = m = pyo.ConcreteModel(name="tessera-compound")
        self._index()
        m.y = pyo.Var(self.variant_keys, domain=pyo.Binary)
        m.z = pyo.Var(self.level_keys, domain=pyo.Binary)
        # Z[s, t, k]: the task's level is k or higher. Rows that hold from a
        # level on name one Z instead of every z above it (fewer nonzeros).
        m.Z = pyo.Var(self.level_keys, domain=pyo.NonNegativeReals, bounds=(0, 1))
        m.n = pyo.Var(range(len(self.options)), domain=pyo.NonNegativeIntegers,
                      bounds=lambda _, o: (0, self.replica_bound[o]))
        m.x = pyo.Var(range(len(self.options)), domain=pyo.NonNegativeReals)
        # U[s, t, parent, j]: the parent's largest bulk handed to t is bulks[j] or more (j >= 1).
        m.U = pyo.Var(self.bulk_keys, domain=pyo.Binary)
        # V: an option's instances under its parents' bulks of a class or larger (_most_loads_rows).
        m.V = pyo.VarList(domain=pyo.NonNegativeReals)
        m.D = pyo.Var(self.task_keys, domain=pyo.NonNegativeReals)
        m.W = pyo.Var(self.variant_keys, domain=pyo.NonNegativeReals)
        m.g = pyo.Var(range(len(data.layouts)), domain=pyo.NonNegativeIntegers,
                      bounds=(0, data.repartitionable_gpus))
        m.h = pyo.Var(range(len(data.fixed_groups)), domain=pyo.NonNegativeIntegers,
                      bounds=lambda _, k: (0, data.fixed_groups[k][2]))
        if data.maximise_common_scale:
            m.scale = pyo.Var(domain=pyo.NonNegativeReals, bounds=(0, data.scale_upper_bound))
        else:
            m.phi = pyo.Var([s.name for s in data.systems], domain=pyo.NonNegativeReals, bounds=(0, 1))
        m.cons = pyo.ConstraintList()
        # The most-load rows of split bulks (valid while all demand is served) and, kept aside, rows added
        # when it is not (each an expression <= 0): those of whole bulks that replace them, and the step
        # rows of levels a task can take only then (_levels_when_served).
        m.split_bulk_rows = pyo.ConstraintList()
        self.part_served_rows: list[Callable[[], Any]] = []
        self._choices()
        self._demand_flow()
        self._routing_and_capacity()
        self._budgets_and_paths()
        self._resources()
        if data.usable_above:
            self._priority_thresholds()
        m.full_demand_cuts = pyo.ConstraintList()
        if not data.maximise_common_scale:
            self._full_demand_cuts()
            self._served_level_cuts()
        if data.current_layouts or data.current_replicas:
            self._change_variables()
        if data.node_groups:
            self._node_change_variables()

    # -- indexing -----------------------------------------------------------------

    def _index(self) -> None:
        d = self.data
        self.task_keys = [(s.name, t.name) for s in d.systems for t in s.tasks]
        self.variant_keys = [(s, t, v) for (s, t) in self.task_keys for v in d.variants[(s, t)]]
        self.level_keys = [(s, t, k) for (s, t) in self.task_keys for k in range(len(d.levels[s]))]
        self.arrivals = arrivals(d)
        self.share_base = share_bases(d)
        self._system_index = {s.name: i for i, s in enumerate(d.systems)}
        self.bulk_keys = [(s, t, e.parent, j) for (s, t) in self.task_keys for e in self.arrivals[(s, t)]
                          for j in range(1, len(e.bulks))]
        scale = d.scale_upper_bound if d.maximise_common_scale else 1.0
        self.demand_bound = {
            (s.name, t): bound * scale
            for s in d.systems for t, bound in demand_bound(s, d.variants).items()
        }
        supply = {p.name: p.max_count * d.repartitionable_gpus for p in d.gpu.profiles}
        for _, usable, count in d.fixed_groups:
            for name, instances in usable:
                supply[name] += instances * count
        self.options: list[Unit] = []
        self.replica_bound: list[int] = []
        for unit in units(build_options(d, self.arrivals)):
            bound = self._replica_bound(unit, supply)
            if bound > 0:
                self.options.append(unit)
                self.replica_bound.append(bound)
        self.by_task: dict[TaskKey, list[int]] = {k: [] for k in self.task_keys}
        self.by_variant: dict[VariantKey, list[int]] = {k: [] for k in self.variant_keys}
        for o, option in enumerate(self.options):
            c = d.candidates[option.candidate]
            self.by_task[(c.system, c.task)].append(o)
            self.by_variant[(c.system, c.task, c.variant)].append(o)
        self.served_levels = self._levels_when_served()

    def _levels_when_served(self) -> dict[TaskKey, tuple[int, int]]:
        """Per task, the lowest and highest budget level it can take in a plan that serves all demand.

        A task whose least demand is positive carries load, so runs instances of some unit (x <= capacity
        n), so its level is at least the lowest any of its units is usable at (n <= bound Z_first); each
        path's budgets fit its SLO, so a task's level is at most what a path leaves it with the other tasks
        at their lowest (4 H100s at 80% fill: the AR assistant's three levels are fixed so, and 3,185 of
        15,443 level steps lie above). Levels outside hold only plans that serve part of the demand.
        """
        d = self.data
        if d.maximise_common_scale:  # no stage serves all demand (a common scale of it)
            return {(s, t): (0, len(d.levels[s]) - 1) for s, t in self.task_keys}
        found: dict[TaskKey, tuple[int, int]] = {}
        for system in d.systems:
            levels, slo = d.levels[system.name], system.slo.latency_ms
            least = demand_bound(system, d.variants, pick=min)
            lowest = {t: min((self.options[o].level for o in self.by_task[(system.name, t)]), default=0)
                      if least[t] > 0 else 0 for t in least}
            slack = 1e-6 * max(1.0, slo)  # budgets are grid steps apart: far more than the solver's tolerance
            for t in least:
                if len(levels) == 1:  # no path rows (_budgets_and_paths)
                    found[(system.name, t)] = (0, 0)
                    continue
                fits = [k for k in range(len(levels))
                        if all(levels[k] + sum(levels[lowest[other]] for other in path if other != t) <= slo + slack
                               for path in system.paths if t in path)]
                found[(system.name, t)] = (lowest[t], max(fits, default=-1))
        return found

    def _replica_bound(self, option: Unit, supply: dict[str, int]) -> int:
        """No optimal plan runs more instances of an option than its task's demand can load."""
        d = self.data
        c = d.candidates[option.candidate]
        demand = self.demand_bound[(c.system, c.task)]
        carried = min(self._most_loads(c, option.steps[0][0]), default=0.0)
        if carried <= 0:
            return 0
        bound = min(supply[c.segment.mig_profile], math.ceil(demand / carried - 1e-9),
                    *(q.limit for q in d.quotas if c.system in q.systems and q.mig_profile == c.segment.mig_profile))
        if option.min_load_rps > 0:
            bound = min(bound, math.floor(demand / option.min_load_rps + 1e-9))
        return max(bound, 0)

    def candidate(self, o: int) -> Candidate:
        return self.data.candidates[self.options[o].candidate]

    # -- constraints --------------------------------------------------------------

    def _choices(self) -> None:
        m, d = self.m, self.data
        for s, t in self.task_keys:
            m.cons.add(sum(m.y[s, t, v] for v in d.variants[(s, t)]) == 1)
            m.cons.add(sum(m.z[s, t, k] for k in range(len(d.levels[s]))) == 1)
            top = len(d.levels[s]) - 1
            m.cons.add(m.Z[s, t, top] == m.z[s, t, top])
            for k in range(top):
                m.cons.add(m.Z[s, t, k] == m.z[s, t, k] + m.Z[s, t, k + 1])

    def _demand_flow(self) -> None:
        m, d = self.m, self.data
        for system in d.systems:
            s = system.name
            entering = m.scale if d.maximise_common_scale else m.phi[s]
            for t in system.topological_order:
                parents = system.parents(t)
                if not parents:
                    m.cons.add(m.D[s, t] == system.demand_rps * entering)
                else:
                    m.cons.add(m.D[s, t] == sum(
                        e.factor_for(v) * m.W[s, e.source, v]
                        for e in parents for v in d.variants[(s, e.source)]
                    ))
                m.cons.add(sum(m.W[s, t, v] for v in d.variants[(s, t)]) == m.D[s, t])
                for v in d.variants[(s, t)]:
                    m.cons.add(m.W[s, t, v] <= self.demand_bound[(s, t)] * m.y[s, t, v])

    def _routing_and_capacity(self) -> None:
        m = self.m
        for s, t, parent, j in self.bulk_keys:
            # Bulks of class j or larger are of class j - 1 or larger (_most_loads_rows sums on that); every
            # bulk is of class 0 or larger, a row that gives HiGHS a column for a U whose other rows may wait
            # until not all demand is served (part_served_rows).
            m.cons.add(m.U[s, t, parent, j] <= (m.U[s, t, parent, j - 1] if j > 1 else 1))
        for (s, t, v), indices in self.by_variant.items():
            m.cons.add(sum(m.x[o] for o in indices) == m.W[s, t, v])
        for o, unit in enumerate(self.options):
            c = self.candidate(o)
            bound = self.replica_bound[o]
            capacity = self._capacity(c, unit.steps[-1][0])
            m.cons.add(m.x[o] <= capacity * m.n[o])
            m.cons.add(m.n[o] <= bound * m.y[c.system, c.task, c.variant])
            if unit.level > 0:
                m.cons.add(m.n[o] <= bound * self._levels_from(c, unit.level))
            self._least_loads(o, unit, bound)
            self._most_loads_rows(o, unit, bound, capacity)
            self._bulks_handed_on(o, c, bound)

    def _capacity(self, c: Candidate, level: int, dispersion: float | None = None, split: bool = True) -> float:
        """The most load one instance carries at `level` (least dispersed arrivals by default), under split
        bulks where the model splits them (the looser rule) unless `split` is off.

        No option carries more than its task's demand bound, so capping the coefficient there admits
        the same integer plans; uncapped, a 1e5 req/s segment serving 1 req/s let load leak past
        n = 0 within HiGHS's tolerances, and the plan claimed demand no replica served.
        """
        d = self.data
        if dispersion is None:
            dispersion = dispersion_range(d, self.arrivals[(c.system, c.task)])[0]
        budget = d.levels[c.system][level]
        base = self.share_base.get((c.system, c.task), 0.0) if split else 0.0
        return min(most_load_rps(d, c, budget, dispersion, base), self.demand_bound[(c.system, c.task)])

    def _most_loads(self, c: Candidate, level: int) -> list[float]:
        """The most load per instance at `level` under each bulk class of each incoming edge, whole bulks
        (the stricter rule, so replica bounds hold under either)."""
        return [self._capacity(c, level, dispersion, split=False)
                for _, classes in self._edge_classes(c) for dispersion in classes]

    def _most_loads_rows(self, o: int, unit: Unit, bound: int, capacity: float) -> None:
        """Under the task's level and each parent's bulk class, each instance carries at most its most load.

        Step i's rule holds while the level is below step i + 1's; per incoming edge, in whichever of two
        forms has fewer rows: one row per step and bulk class J, relaxed where U_J is 0,
        x <= M_iJ n + big-M (Z_next + 1 - U_J), or one row per step,
        x <= M_i0 n - sum_j (M_i,j-1 - M_ij) V_j + big-M Z_next, with one V_j >= n - bound (1 - U_j) per
        class (the instances under bulks of class j or larger: U and the most load fall with j, so the sum
        leaves M_iJ n for the largest class J handed over). 4 H100s at 80% fill: 44,605 rows of the first
        form, 15,000 of the second; on 1,000, where steps are few, the first is the smaller.
        """
        c = self.candidate(o)
        split = self.share_base.get((c.system, c.task), 0.0) > 0 and bool(self.arrivals[(c.system, c.task)])
        reached = self._last_step_served(c, unit)
        for parent, classes in self._edge_classes(c):
            # (relax_level, whole bulks, most load per class, beyond the levels all demand allows)
            rows: list[tuple[Any, bool, list[float], bool]] = []
            for i, (level, _) in enumerate(unit.steps):
                relax_level = 0 if i + 1 == len(unit.steps) else self._levels_from(c, unit.steps[i + 1][0])
                for whole in (False, True) if split else (True,):
                    mosts = self._falling_mosts(c, level, classes, capacity, split=not whole)
                    if mosts[-1] < capacity * (1 - 1e-12):
                        rows.append((relax_level, whole, mosts, i > reached and self._carries_no_less(
                            c, unit, reached, classes, capacity, not whole, mosts)))
            per_class = [[j for j in range(len(mosts)) if mosts[j] < capacity * (1 - 1e-12)
                          and (j == 0 or mosts[j] < mosts[j - 1])] for _, _, mosts, _ in rows]
            falling = sorted({j for _, _, mosts, _ in rows for j in range(1, len(mosts)) if mosts[j] < mosts[j - 1]})
            # Sized by the rows while all demand is served (whole bulks' rows come only when it is not).
            live = [not (split and whole) and not beyond for _, whole, _, beyond in rows]
            by_count = (sum(len(js) for js, kept in zip(per_class, live) if kept)
                        > sum(live) + len(falling))
            counts = {j: self._class_count(o, c, parent, j, bound) for j in falling} if by_count else {}
            for (relax_level, whole, mosts, beyond), js in zip(rows, per_class):
                if by_count:
                    falls = [(mosts[j - 1] - mosts[j], counts[j]) for j in falling if mosts[j] < mosts[j - 1]]
                    self._most_load_row(o, mosts[0], mosts[-1], falls, capacity, bound, relax_level, split, whole,
                                        beyond)
                for j in () if by_count else js:
                    relax = relax_level + (0 if j == 0 else 1 - self.m.U[c.system, c.task, parent, j])
                    self._most_load_row(o, mosts[j], mosts[j], [], capacity, bound, relax, split, whole, beyond)

    def _carries_no_less(self, c: Candidate, unit: Unit, reached: int, classes: list[float], capacity: float,
                         split: bool, mosts: list[float]) -> bool:
        """Whether a step's most loads are at least the reached step's under every bulk class (then, while
        all demand is served, the reached step's row, in force, implies the step's; else n is 0: none reached)."""
        if reached < 0:
            return True
        at_reached = self._falling_mosts(c, unit.steps[reached][0], classes, capacity, split=split)
        return all(mine >= theirs for mine, theirs in zip(mosts, at_reached))

    def _most_load_row(self, o: int, top: float, least: float, falls: list[tuple[float, Any]], capacity: float,
                       bound: int, relax: Any, split: bool, whole: bool, beyond: bool) -> None:
        """One most-load row, kept aside for when not all demand is served where it holds only then (whole
        bulks where they split) or is implied while it is (`beyond` the levels all demand allows)."""
        excess = partial(self._excess, o, top, least, falls, capacity, bound, relax)
        if split and not whole:
            if not beyond:  # beyond: implied while all demand is served, and relaxed (as split rows are) when not
                self.m.split_bulk_rows.add(excess() <= 0)
        elif split or beyond:
            self.part_served_rows.append(excess)
        else:
            self.m.cons.add(excess() <= 0)

    def _falling_mosts(self, c: Candidate, level: int, classes: list[float], capacity: float,
                       split: bool) -> list[float]:
        """The most load per instance under each bulk class, at most `capacity`; falling with the class as
        the latency model's does with the dispersion (the running minimum only guards rounding)."""
        mosts: list[float] = []
        for dispersion in classes:
            most = min(self._capacity(c, level, dispersion, split=split), capacity)
            mosts.append(min(mosts[-1], most) if mosts else most)
        return mosts

    def _class_count(self, o: int, c: Candidate, parent: str | None, j: int, bound: int) -> Any:
        """V_j >= n - bound (1 - U_j) for bulk class j >= 1 of the edge from `parent`: n where U_j is 1."""
        m = self.m
        count = m.V.add()
        m.cons.add(count >= m.n[o] - bound * (1 - m.U[c.system, c.task, parent, j]))
        return count

    def _excess(self, o: int, top: float, least: float, falls: list[tuple[float, Any]], capacity: float,
                bound: int, relax: Any) -> Any:
        """Load above the most load (`top` less what the falls take off, at least `least`), less the big-M
        that `relax` frees.

        The big-M is the most x - least n can be: with x <= capacity n, n <= bound and x <= the task's
        demand bound D, min((capacity - least) bound, D (1 - least / capacity)), the second far smaller
        where the queueing wait binds (least << capacity, bound ~ D / least).
        """
        m, c = self.m, self.candidate(o)
        demand = self.demand_bound[(c.system, c.task)]
        big_m = min((capacity - least) * bound, demand * (1 - least / capacity))
        return m.x[o] - top * m.n[o] + sum(fall * count for fall, count in falls) - big_m * relax

    def _served_level_cuts(self) -> None:
        """While all demand is served, each task's level is at most its highest then (_levels_when_served):
        Z_highest+1 = 0, which also puts the step rows left out above it (_least_loads, _most_loads_rows) in
        force in the relaxation. (The lowest as a row too, Z_lowest >= 1, made 120 H100s slower: 50 against
        33 CPU s, bench/README.md.)"""
        m = self.m
        for (s, t), (_, highest) in self.served_levels.items():
            if highest < len(self.data.levels[s]) - 1:
                m.full_demand_cuts.add(m.Z[s, t, max(highest + 1, 0)] <= 0)

    def _edge_classes(self, c: Candidate) -> list[tuple[str | None, list[float]]]:
        """(parent, its bulk classes' dispersions) per incoming edge; (None, [Poisson's or 0]) where no parent
        hands bulks over."""
        edges = self.arrivals[(c.system, c.task)]
        return ([(e.parent, list(e.dispersions)) for e in edges if e.dispersions]
                or [(None, [dispersion_range(self.data, edges)[0]])])

    def _bulks_handed_on(self, o: int, c: Candidate, bound: int) -> None:
        """An instance of a parent's option sets its children's bulk class to its bulk or higher."""
        m, system = self.m, self.data.systems[self._system_index[c.system]]
        for edge in system.children(c.task):
            for arrivals_ in self.arrivals[(c.system, edge.target)]:
                if arrivals_.parent != c.task:
                    continue
                j = arrivals_.bulks.index(largest_factor(self.data, system, edge) * c.batch)
                if j > 0:
                    m.cons.add(m.n[o] <= bound * m.U[c.system, edge.target, c.task, j])

    def _least_loads(self, o: int, unit: Unit, bound: int) -> None:
        """Under the task's level, each instance carries at least the least load of the unit's step there.

        Step i holds while the level is below step i + 1's (a higher level
        needs less): x >= L_i n - (L_i - L_last) bound (levels from step i + 1 chosen).
        """
        m, c = self.m, self.candidate(o)
        reached = self._last_step_served(c, unit)
        for i, (_, least) in enumerate(unit.steps):
            if least <= 0:
                continue
            if i + 1 == len(unit.steps):
                shortfall = partial(self._shortfall, o, least, 0.0, 0)
            else:
                # x >= (the last step's least) n always holds, so least n - x is at most (least - that) bound
                big_m = (least - unit.min_load_rps) * bound
                shortfall = partial(self._shortfall, o, least, big_m, self._levels_from(c, unit.steps[i + 1][0]))
            if i > reached:
                # Beyond the levels all demand allows: while it is served, the reached step's row is in force
                # (its next level too high) with a least load at least this one's, or n is 0.
                self.part_served_rows.append(shortfall)
            else:
                m.cons.add(shortfall() <= 0)

    def _shortfall(self, o: int, least: float, big_m: float, relax: Any) -> Any:
        """Load below the least load (x >= least n), less the big-M that `relax` frees."""
        return least * self.m.n[o] - self.m.x[o] - big_m * relax

    def _last_step_served(self, c: Candidate, unit: Unit) -> int:
        """The unit's last step at a level its task can take while all demand is served (-1 if none)."""
        highest = self.served_levels[(c.system, c.task)][1]
        return max((i for i, (level, _) in enumerate(unit.steps) if level <= highest), default=-1)

    def _levels_from(self, c: Candidate, level: int) -> Any:
        return self.m.Z[c.system, c.task, level]

    def _budgets_and_paths(self) -> None:
        m, d = self.m, self.data
        for system in d.systems:
            s = system.name
            levels = d.levels[s]
            for path in system.paths:
                if len(levels) > 1:
                    m.cons.add(sum(levels[k] * m.z[s, t, k] for t in path for k in range(len(levels)))
                               <= system.slo.latency_ms)
                if self._accuracy_can_drop(system, path):
                    m.cons.add(self._path_log_accuracy(system, path) >= math.log(system.slo.accuracy) - 1e-9)

    def _accuracy_can_drop(self, system: SystemSpec, path: tuple[str, ...]) -> bool:
        return any(
            system.task(t).normalised_accuracy(v) < 1
            for t in path for v in self.data.variants[(system.name, t)]
        )

    def _path_log_accuracy(self, system: SystemSpec, path: tuple[str, ...]) -> Any:
        m, d = self.m, self.data
        return sum(
            math.log(system.task(t).normalised_accuracy(v)) * m.y[system.name, t, v]
            for t in path for v in d.variants[(system.name, t)]
            if system.task(t).normalised_accuracy(v) < 1
        )

    def _resources(self) -> None:
        m, d = self.m, self.data
        for profile in d.gpu.profiles:
            users = [o for o in range(len(self.options)) if self.candidate(o).segment.mig_profile == profile.name]
            provided = [(j, dict(layout).get(profile.name, 0)) for j, layout in enumerate(d.layouts)]
            provided = [(j, count) for j, count in provided if count]
            fixed = [(k, dict(usable).get(profile.name, 0)) for k, (_, usable, _) in enumerate(d.fixed_groups)]
            if users:
                m.cons.add(sum(m.n[o] for o in users) <= sum(count * m.g[j] for j, count in provided)
                           + sum(count * m.h[k] for k, count in fixed if count))
        for quota in d.quotas:
            under = [o for o in range(len(self.options)) if self.candidate(o).system in quota.systems
                     and self.candidate(o).segment.mig_profile == quota.mig_profile]
            if under:
                m.cons.add(sum(m.n[o] for o in under) <= quota.limit)
        # Totals as integer variables of their own: branching on them closes the
        # gap far faster than branching on single layout counts.
        m.gpus_used = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, d.pool_gpus))
        m.slices_used = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, COMPUTE_SLICES * d.pool_gpus))
        if d.fixed_groups:
            m.cons.add(sum(m.g[j] for j in range(len(d.layouts))) <= d.repartitionable_gpus)
        m.cons.add(m.gpus_used == sum(m.g[j] for j in range(len(d.layouts)))
                   + sum(m.h[k] for k in range(len(d.fixed_groups))))
        m.cons.add(m.slices_used == sum(
            layout_compute_slices(d.gpu, layout) * m.g[j] for j, layout in enumerate(d.layouts))
            + sum(layout_compute_slices(d.gpu, layout) * m.h[k] for k, (layout, _, _) in enumerate(d.fixed_groups)))

    def _full_demand_cuts(self) -> None:
        """Valid only while all demand is served: a chosen variant needs whole instances.

        Fractional instances make the relaxation weak on small pools: every
        task rounds its instances up, and the LP sees none of it, not even
        with variants and levels chosen (4 H100s: 20.8 slices relaxed, 23 in
        the best plan). With all demand served, a task carries at least its
        least demand (given its parent's variant, where it has one parent),
        which needs at least K whole slices of the chosen variant's options
        usable at the chosen level (an integer knapsack, see fewest_slices).
        Per variant v and condition, with z the level binaries:
        slices(v) >= K_top * y_v and slices(v) >= sum_k K_k z_k - K_0 (1 - y_v),
        one more (1 - y_parent) on the right under a parent's variant, and,
        with the queueing wait, one more pair per parent's bulk class j >= 1
        whose instances carry less, with that class's K and (1 - U_j) more.
        """
        m, d = self.m, self.data
        most = min(_MAX_ROUNDED_SLICES, COMPUTE_SLICES * d.pool_gpus + 1)
        for system in d.systems:
            least = demand_bound(system, d.variants, pick=min)
            levels = range(len(d.levels[system.name]))
            for t in system.topological_order:
                conditions = [(None, least[t])]
                parents = system.parents(t)
                if len(parents) == 1:
                    edge = parents[0]
                    conditions += [(m.y[system.name, edge.source, v], edge.factor_for(v) * least[edge.source])
                                   for v in d.variants[(system.name, edge.source)]]
                for v in d.variants[(system.name, t)]:
                    options = self.by_variant[(system.name, t, v)]
                    if not options:
                        continue
                    y = m.y[system.name, t, v]
                    slices = sum(self.candidate(o).compute_slices * m.n[o] for o in options)
                    # Per bulk class, each level's most load per instance size: the same under every condition.
                    by_class = [(bulk_class, [self._capacity_by_size(options, k, dispersion) for k in levels])
                                for bulk_class, dispersion in self._cut_classes(system.name, t)]
                    for parent, demand in conditions:
                        if demand <= 0:
                            continue
                        off = (1 - y) + (0 if parent is None else 1 - parent)
                        least_dispersed: list[int] = []
                        for bulk_class, capacities in by_class:
                            fewest = [fewest_slices(capacity, demand, most) for capacity in capacities]
                            if fewest == least_dispersed:
                                continue  # this bulk class's instances carry no less: the class-0 cut says it
                            least_dispersed = least_dispersed or fewest
                            held = off + (0 if bulk_class is None else 1 - bulk_class)
                            m.full_demand_cuts.add(slices >= fewest[-1] * (1 - held))
                            if fewest[0] > fewest[-1]:
                                m.full_demand_cuts.add(slices >= sum(fewest[k] * m.z[system.name, t, k] for k in levels)
                                                       - fewest[0] * held)

    def _cut_classes(self, system: str, task: str) -> list[tuple[Any, float | None]]:
        """(U binary or None, dispersion) under which a task's cuts hold: first the least dispersed arrivals
        (always), then each parent's larger bulk classes, each holding once its U is 1.

        With the queueing wait, bulks of a class cap an instance's load below the least dispersed arrivals'
        (4 H100s at 60% of the default's most demand: relaxed to 3 GPUs where 4 are needed, the class-0
        cuts alone not seeing the rounding).
        """
        found: list[tuple[Any, float | None]] = [(None, None)]
        for edge in self.arrivals[(system, task)]:
            found += [(self.m.U[system, task, edge.parent, j], dispersion)
                      for j, dispersion in enumerate(edge.dispersions) if j >= 1]
        return found

    def _capacity_by_size(self, options: list[int], level: int, dispersion: float | None = None) -> dict[int, float]:
        """The most load one instance of each size (compute slices) carries among options usable at `level`
        (under `dispersion`, the least dispersed arrivals by default)."""
        best: dict[int, float] = {}
        for o in options:
            if self.options[o].level > level:
                continue
            c = self.candidate(o)
            best[c.compute_slices] = max(best.get(c.compute_slices, 0.0), self._capacity(c, level, dispersion))
        return best

    # -- objective expressions ----------------------------------------------------

    def served(self, systems: list[str] | None = None) -> Any:
        """The served fractions summed over the systems (all of them, or those named)."""
        if self.data.maximise_common_scale:
            return self.m.scale
        return sum(self.m.phi[s.name] for s in self.data.systems if systems is None or s.name in systems)

    @property
    def gpu_weight(self) -> int:
        return COMPUTE_SLICES * self.data.pool_gpus + 1

    def cost(self) -> Any:
        """GPUs first, then slices, as one sum (relax-and-fix's start): a GPU outweighs every slice."""
        return self.gpu_weight * self.m.gpus_used + self.m.slices_used

    def accuracy_score(self, systems: list[str] | None = None) -> Any:
        """Sum over systems of the mean log accuracy of their paths."""
        chosen = [s for s in self.data.systems if systems is None or s.name in systems]
        total = 0
        for system in chosen:
            paths = system.paths
            total += sum(self._path_log_accuracy(system, path) for path in paths) / len(paths)
        return total

    def change(self) -> Any:
        """Layouts kept on GPUs (re-partitioning stops pods) count most, then replica moves."""
        m, d = self.m, self.data
        moved = sum(m.up[i] + m.down[i] for i in range(len(d.candidates)))
        weight = sum(self.replica_bound) + sum(d.current_replicas.values()) + 1
        return weight * sum(m.keep[j] for j in range(len(d.layouts))) - moved

    def _change_variables(self) -> None:
        m, d = self.m, self.data
        m.keep = pyo.Var(range(len(d.layouts)), domain=pyo.NonNegativeReals)
        m.up = pyo.Var(range(len(d.candidates)), domain=pyo.NonNegativeReals)
        m.down = pyo.Var(range(len(d.candidates)), domain=pyo.NonNegativeReals)
        for j, layout in enumerate(d.layouts):
            m.cons.add(m.keep[j] <= m.g[j])
            m.cons.add(m.keep[j] <= d.current_layouts.get(layout, 0))
        replicas: dict[int, list[int]] = {}
        for o, option in enumerate(self.options):
            replicas.setdefault(option.candidate, []).append(o)
        for i, c in enumerate(d.candidates):
            current = d.current_replicas.get(candidate_key(c), 0)
            m.cons.add(sum(m.n[o] for o in replicas.get(i, [])) - current == m.up[i] - m.down[i])

    def _node_change_variables(self) -> None:
        """stay[k]: nodes of group k that keep every GPU's layout; their layouts come out of the counts g
        and their GPUs without instances out of the GPUs left without a layout."""
        m, d = self.m, self.data
        index = {layout: j for j, layout in enumerate(d.layouts)}
        groups = d.node_groups
        m.stay = pyo.Var(range(len(groups)), domain=pyo.NonNegativeIntegers,
                         bounds=lambda _, k: (0, len(groups[k].nodes) if set(groups[k].counts()) <= set(index)
                                              else 0))
        for layout in sorted({layout for group in groups for layout in group.counts()} & set(index)):
            m.cons.add(sum(group.counts()[layout] * m.stay[k] for k, group in enumerate(groups)
                           if layout in group.counts()) <= m.g[index[layout]])
        if any(group.empty_gpus for group in groups):
            m.cons.add(sum(group.empty_gpus * m.stay[k] for k, group in enumerate(groups))
                       <= d.repartitionable_gpus - sum(m.g[j] for j in range(len(d.layouts))))
        if d.max_nodes_changed is not None:
            m.cons.add(self.nodes_changed() <= d.max_nodes_changed)

    def nodes_changed(self) -> Any:
        """Nodes carrying instances whose layouts change (0 without node groups)."""
        return sum(len(g.nodes) - self.m.stay[k] for k, g in enumerate(self.data.node_groups))

    def change_price(self) -> Any:
        """The changed nodes' capacity in the cost's units, times the share a change loses (change_cost.py)."""
        d = self.data
        return sum(d.change_share * g.capacity(d.gpu, self.gpu_weight) * (len(g.nodes) - self.m.stay[k])
                   for k, g in enumerate(d.node_groups))

    @property
    def carrying_nodes(self) -> int:
        return sum(len(g.nodes) for g in self.data.node_groups)

    @property
    def prices_change(self) -> bool:
        return bool(self.data.node_groups)

    def restricted_levels(self) -> list[int]:
        """The systems' poolPriority values that some GPU is not lent to (a threshold at or above them), lowest
        first."""
        top = max(self.data.usable_above, default=None)
        return sorted({s.pool_priority for s in self.data.systems if top is not None and s.pool_priority <= top})

    def _priority_thresholds(self) -> None:
        """GPUs lent only to systems above a priority: for each priority q some are not lent to, how many GPUs of
        each layout lie among those its systems and all lower ones may use (integer gq), nested level to level
        and within g, and those systems' instances of each profile fit there (with the fixed GPUs, never lent:
        nodes.py). The GPUs of the lower levels being a subset of the higher ones', this is exact: a layout
        choice and a placement exist (assignment.py places them, lowest level first)."""
        m, d = self.m, self.data
        levels = self.restricted_levels()
        m.gq = pyo.Var([(q, j) for q in levels for j in range(len(d.layouts))], domain=pyo.NonNegativeIntegers)
        for rank, q in enumerate(levels):
            lent = sum(count for above, count in d.usable_above.items() if above >= q)
            m.cons.add(sum(m.gq[q, j] for j in range(len(d.layouts))) <= d.repartitionable_gpus - lent)
            for j in range(len(d.layouts)):
                m.cons.add(m.gq[q, j] <= (m.gq[levels[rank + 1], j] if rank + 1 < len(levels) else m.g[j]))
            for profile in d.gpu.profiles:
                users = [o for o in range(len(self.options)) if self.candidate(o).segment.mig_profile == profile.name
                         and self._priority(self.candidate(o).system) <= q]
                if users:
                    m.cons.add(sum(m.n[o] for o in users)
                               <= sum(dict(layout).get(profile.name, 0) * m.gq[q, j]
                                      for j, layout in enumerate(d.layouts))
                               + sum(dict(usable).get(profile.name, 0) * m.h[k]
                                     for k, (_, usable, _) in enumerate(d.fixed_groups)))

    def _priority(self, system: str) -> int:
        return self.data.systems[self._system_index[system]].pool_priority

    def restricted_counts(self) -> list[tuple[int, dict[Layout, int]]]:
        """(poolPriority q, layout -> GPUs that systems of priority q or lower may use) of each restricted level,
        lowest first (empty without lent GPUs)."""
        if not self.data.usable_above:
            return []
        counts = []
        for q in self.restricted_levels():
            found = {layout: round(pyo.value(self.m.gq[q, j], exception=False) or 0)
                     for j, layout in enumerate(self.data.layouts)}
            counts.append((q, {layout: n for layout, n in found.items() if n > 0}))
        return counts

    def priced_cost(self) -> Any:
        """The cost plus the price of the nodes it changes: a change is made where it pays."""
        return self.cost() + self.change_price() if self.prices_change else self.cost()

    def kept_nodes(self) -> list[tuple[NodeGroup, int]]:
        """(group, nodes the solution keeps) of each node group."""
        return [(g, round(pyo.value(self.m.stay[k], exception=False) or 0))
                for k, g in enumerate(self.data.node_groups)]

    # -- solution -----------------------------------------------------------------

    def layout_counts(self) -> list[tuple[Layout, int]]:
        counts = [(layout, round(pyo.value(self.m.g[j], exception=False) or 0))
                  for j, layout in enumerate(self.data.layouts)]
        return [(layout, count) for layout, count in counts if count > 0]

    def fixed_counts(self) -> list[tuple[Layout, Layout, int]]:
        """(layout, usable instances, GPUs tessera uses) per group of fixed GPUs."""
        counts = [(layout, usable, round(pyo.value(self.m.h[k], exception=False) or 0))
                  for k, (layout, usable, _) in enumerate(self.data.fixed_groups)]
        return [(layout, usable, count) for layout, usable, count in counts if count > 0]
