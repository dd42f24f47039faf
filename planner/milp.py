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
While all demand is served, whole-slice cuts (an integer knapsack per task,
variant and level) give the relaxation the rounding up of instances that
fractional replicas hide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyomo.environ as pyo

from tessera.planner.candidates import Candidate
from tessera.planner.catalog import COMPUTE_SLICES, GpuProduct, Layout, layout_compute_slices
from tessera.planner.latency import min_segment_load_rps
from tessera.planner.model import SystemSpec

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
class Option:
    """A candidate usable under its task's budget level `level` and every higher one.

    `min_load_rps` is the least load per instance that fills its batches at
    `level`; higher levels need less, so it holds for them too.
    """

    candidate: int
    level: int
    min_load_rps: float


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


def _tiers(c: Candidate, levels: list[float], utilisation: float, ratio: float) -> list[Option]:
    """Options of one candidate: the first usable level, then wherever the least load drops by `ratio`.

    With ratio 1 every usable level is an option of its own (exact); a larger
    ratio keeps fewer options and charges levels between tiers the least load
    of the tier below, which is safe but may cost a little optimality.
    """
    options: list[Option] = []
    for k, budget in enumerate(levels):
        if not c.usable_at(budget, utilisation):
            continue
        need = min_segment_load_rps(c.latency_ms, c.batch, c.segment.mps, budget)
        if not options or (need < options[-1].min_load_rps and need * ratio <= options[-1].min_load_rps):
            options.append(Option(-1, k, need))
        if need == 0:
            break
    return options


def build_options(data: MilpInput) -> list[Option]:
    least = {} if data.maximise_common_scale else {
        (system.name, task): demand
        for system in data.systems for task, demand in demand_bound(system, data.variants, pick=min).items()
    }
    groups: dict[tuple[str, str, str, str], list[Option]] = {}
    for i, c in enumerate(data.candidates):
        for tier in _tiers(c, data.levels[c.system], data.utilisation, data.tier_ratio):
            key = (c.system, c.task, c.variant, c.segment.mig_profile)
            groups.setdefault(key, []).append(Option(i, tier.level, tier.min_load_rps))
    options = []
    for (system, task, _, _), group in groups.items():
        kept = _pareto(data, group)
        busiest = max(data.candidates[o.candidate].throughput_rps for o in kept)
        if data.busy_instances and least.get((system, task), 0.0) >= data.busy_instances * busiest:
            kept = _busiest(data, kept)
        options += kept
    return options


def _pareto(data: MilpInput, group: list[Option]) -> list[Option]:
    """Options no other beats on both throughput and least load from the same or a lower level (exact)."""
    group = sorted(group, key=lambda o: (o.level, -data.candidates[o.candidate].throughput_rps, o.min_load_rps))
    kept: list[Option] = []
    for option in group:
        throughput = data.candidates[option.candidate].throughput_rps
        if not any(data.candidates[k.candidate].throughput_rps >= throughput and k.min_load_rps <= option.min_load_rps
                   for k in kept):
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
        self._choices()
        self._demand_flow()
        self._routing_and_capacity()
        self._budgets_and_paths()
        self._resources()
        m.full_demand_cuts = pyo.ConstraintList()
        if not data.maximise_common_scale:
            self._full_demand_cuts()
        if data.current_layouts or data.current_replicas:
            self._change_variables()

    # -- indexing -----------------------------------------------------------------

    def _index(self) -> None:
        d = self.data
        self.task_keys = [(s.name, t.name) for s in d.systems for t in s.tasks]
        self.variant_keys = [(s, t, v) for (s, t) in self.task_keys for v in d.variants[(s, t)]]
        self.level_keys = [(s, t, k) for (s, t) in self.task_keys for k in range(len(d.levels[s]))]
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
        for unit in units(build_options(d)):
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

    def _replica_bound(self, option: Unit, supply: dict[str, int]) -> int:
        """No optimal plan runs more instances of an option than its task's demand can load."""
        d = self.data
        c = d.candidates[option.candidate]
        demand = self.demand_bound[(c.system, c.task)]
        bound = min(supply[c.segment.mig_profile], math.ceil(demand / (c.throughput_rps * d.utilisation) - 1e-9))
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
        m, d = self.m, self.data
        for (s, t, v), indices in self.by_variant.items():
            m.cons.add(sum(m.x[o] for o in indices) == m.W[s, t, v])
        for o, unit in enumerate(self.options):
            c = self.candidate(o)
            bound = self.replica_bound[o]
            # No option carries more than its task's demand bound, so capping the coefficient there admits
            # the same integer plans; uncapped, a 1e5 req/s segment serving 1 req/s let load leak past
            # n = 0 within HiGHS's tolerances, and the plan claimed demand no replica served.
            capacity = min(c.throughput_rps * d.utilisation, self.demand_bound[(c.system, c.task)])
            m.cons.add(m.x[o] <= capacity * m.n[o])
            m.cons.add(m.n[o] <= bound * m.y[c.system, c.task, c.variant])
            if unit.level > 0:
                m.cons.add(m.n[o] <= bound * self._levels_from(c, unit.level))
            self._least_loads(o, unit, bound)

    def _least_loads(self, o: int, unit: Unit, bound: int) -> None:
        """Under the task's level, each instance carries at least the least load of the unit's step there.

        Step i holds while the level is below step i + 1's (a higher level
        needs less): x >= L_i n - L_i bound (levels from step i + 1 chosen).
        """
        m, c = self.m, self.candidate(o)
        for i, (_, least) in enumerate(unit.steps):
            if least <= 0:
                continue
            if i + 1 == len(unit.steps):
                m.cons.add(m.x[o] >= least * m.n[o])
            else:
                m.cons.add(m.x[o] >= least * m.n[o] - least * bound * self._levels_from(c, unit.steps[i + 1][0]))

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
        one more (1 - y_parent) on the right under a parent's variant.
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
                    for parent, demand in conditions:
                        if demand <= 0:
                            continue
                        fewest = [fewest_slices(self._capacity_by_size(options, k), demand, most) for k in levels]
                        off = (1 - y) + (0 if parent is None else 1 - parent)
                        m.full_demand_cuts.add(slices >= fewest[-1] * (1 - off))
                        if fewest[0] > fewest[-1]:
                            m.full_demand_cuts.add(
                                slices >= sum(fewest[k] * m.z[system.name, t, k] for k in levels) - fewest[0] * off)

    def _capacity_by_size(self, options: list[int], level: int) -> dict[int, float]:
        """The most load one instance of each size (compute slices) carries among options usable at `level`."""
        best: dict[int, float] = {}
        for o in options:
            if self.options[o].level > level:
                continue
            c = self.candidate(o)
            capacity = min(c.throughput_rps * self.data.utilisation, self.demand_bound[(c.system, c.task)])
            best[c.compute_slices] = max(best.get(c.compute_slices, 0.0), capacity)
        return best

    # -- objective expressions ----------------------------------------------------

    def served(self) -> Any:
        if self.data.maximise_common_scale:
            return self.m.scale
        return sum(self.m.phi[s.name] for s in self.data.systems)

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
