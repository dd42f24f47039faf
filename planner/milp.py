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
z). A candidate run under level k is an "option" of its own: usable only when
2 x batch latency fits the level, with the least load per instance that fills
its batches in time under it. Instances of an option may exist only under the
chosen level. This disaggregated form keeps the binaries few (tasks x levels)
and the relaxation tight; within one (task, variant, MIG profile, level) only
options that no other option beats on both throughput and least load are
kept, which is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pyomo.environ as pyo

from tessera.planner.candidates import Candidate
from tessera.planner.catalog import COMPUTE_SLICES, GpuProduct, Layout, layout_compute_slices
from tessera.planner.latency import min_segment_load_rps
from tessera.planner.model import SystemSpec

TaskKey = tuple[str, str]
VariantKey = tuple[str, str, str]


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
    current_replicas: dict[tuple, int] = field(default_factory=dict)
    # GPUs that may be re-partitioned; the rest of the pool is fixed_groups
    # (layout, instances tessera may use, GPUs): nodes whose layouts must stay.
    free_gpus: int | None = None
    fixed_groups: list[tuple[Layout, Layout, int]] = field(default_factory=list)

    @property
    def repartitionable_gpus(self) -> int:
        return self.pool_gpus if self.free_gpus is None else self.free_gpus


def candidate_key(c: Candidate) -> tuple:
    return (c.system, c.task, c.variant, c.segment, c.batch)


def demand_bound(system: SystemSpec, variants: dict[TaskKey, list[str]], pick=max) -> dict[str, float]:
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
    groups: dict[tuple, list[Option]] = {}
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


class CompoundMilp:
    """The Pyomo model and the expressions each objective stage uses."""

    def __init__(self, data: MilpInput) -> None:
        self.data = data
        self.m = m = pyo.ConcreteModel(name="tessera-compound")
        self._index()
        m.y = pyo.Var(self.variant_keys, domain=pyo.Binary)
        m.z = pyo.Var(self.level_keys, domain=pyo.Binary)
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
        self.options, self.replica_bound = [], []
        for option in build_options(d):
            bound = self._replica_bound(option, supply)
            if bound > 0:
                self.options.append(option)
                self.replica_bound.append(bound)
        self.by_task: dict[TaskKey, list[int]] = {k: [] for k in self.task_keys}
        self.by_variant: dict[VariantKey, list[int]] = {k: [] for k in self.variant_keys}
        for o, option in enumerate(self.options):
            c = d.candidates[option.candidate]
            self.by_task[(c.system, c.task)].append(o)
            self.by_variant[(c.system, c.task, c.variant)].append(o)

    def _replica_bound(self, option: Option, supply: dict[str, int]) -> int:
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
        for o, option in enumerate(self.options):
            c = self.candidate(o)
            bound = self.replica_bound[o]
            m.cons.add(m.x[o] <= c.throughput_rps * d.utilisation * m.n[o])
            if option.min_load_rps > 0:
                m.cons.add(m.x[o] >= option.min_load_rps * m.n[o])
            m.cons.add(m.n[o] <= bound * m.y[c.system, c.task, c.variant])
            levels = range(option.level, len(d.levels[c.system]))
            if option.level > 0:
                m.cons.add(m.n[o] <= bound * sum(m.z[c.system, c.task, k] for k in levels))

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

    def _path_log_accuracy(self, system: SystemSpec, path: tuple[str, ...]):
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
        """Valid only while all demand is served: a chosen variant needs whole slices.

        Fractional instances make the relaxation weak on small pools; serving
        at least the least demand a task can see, with the best throughput
        per slice any option of the variant offers, needs this many slices.
        """
        m, d = self.m, self.data
        for system in d.systems:
            least = demand_bound(system, d.variants, pick=min)
            for t in system.topological_order:
                for v in d.variants[(system.name, t)]:
                    options = self.by_variant[(system.name, t, v)]
                    if least[t] <= 0 or not options:
                        continue
                    per_slice = max(self.candidate(o).throughput_rps * d.utilisation / self.candidate(o).compute_slices
                                    for o in options)
                    slices = math.ceil(least[t] / per_slice - 1e-9)
                    m.full_demand_cuts.add(
                        sum(self.candidate(o).compute_slices * m.n[o] for o in options) >= slices * m.y[system.name, t, v])

    # -- objective expressions ----------------------------------------------------

    def served(self):
        if self.data.maximise_common_scale:
            return self.m.scale
        return sum(self.m.phi[s.name] for s in self.data.systems)

    @property
    def gpu_weight(self) -> int:
        return COMPUTE_SLICES * self.data.pool_gpus + 1

    def cost(self):
        """GPUs first, then slices, as one sum (relax-and-fix's start): a GPU outweighs every slice."""
        return self.gpu_weight * self.m.gpus_used + self.m.slices_used

    def accuracy_score(self, systems: list[str] | None = None):
        """Sum over systems of the mean log accuracy of their paths."""
        chosen = [s for s in self.data.systems if systems is None or s.name in systems]
        total = 0
        for system in chosen:
            paths = system.paths
            total += sum(self._path_log_accuracy(system, path) for path in paths) / len(paths)
        return total

    def change(self):
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
