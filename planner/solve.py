"""Plan compound systems on a GPU pool: the MILP solved stage by stage.

The objective is lexicographic, solved as a sequence of HiGHS solves on one
model, each stage fixing the value the previous one reached:

1. serve the demand: only when the pool cannot serve all of it, maximise the
   served fractions (accuracy may drop to its SLO first, since the accuracy
   constraint allows it);
2. systems with `priority: accuracy`: their accuracy;
3. cost: fewest GPUs, then fewest compute slices;
4. accuracy of every system (tie-break among equally cheap plans);
5. least change from the current plan, when one is given.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pyomo.environ as pyo
from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.assignment import assign_gpus, current_layout_counts, current_replica_counts
from tessera.planner.candidates import allowed_variants, budget_levels, enumerate_candidates
from tessera.planner.catalog import COMPUTE_SLICES, gpu_product, valid_layouts
from tessera.planner.diagnosis import diagnose
from tessera.planner.features import Features
from tessera.planner.highs_driver import HighsModel
from tessera.planner.milp import CompoundMilp, MilpInput
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import Plan, SolverReport
from tessera.planner.plan_extraction import extract_plan
from tessera.planner.profiles import DEFAULT_BATCHES, ProfileStore



class PlannerOptions(BaseModel):
    model_config = ConfigDict(frozen=True)  # safe as a default argument

    headroom: float = Field(default=0.1, ge=0, description="Segments run at most at 1/(1+headroom) of profiled throughput.")
    budget_levels: int = Field(default=10, ge=1, description="Latency budget levels per task (fractions of the SLO).")
    busy_instances: int = Field(
        default=8, ge=0,
        description="Where a task's least demand keeps this many instances of a kind busy, keep only its "
                    "highest-throughput options; 0 keeps all (exact, larger model).",
    )
    tier_ratio: float = Field(
        default=2.0, ge=1,
        description="Keep a candidate's option at a higher budget level only where its least load drops by this "
                    "factor; 1 keeps every level (exact, larger model).",
    )
    batches: tuple[int, ...] = DEFAULT_BATCHES
    mip_gap: float = Field(default=1e-3, ge=0)
    time_limit_s: float = Field(default=60, gt=0, description="Wall-clock budget of all solves of one plan.")

    @property
    def utilisation(self) -> float:
        return 1 / (1 + self.headroom)


class NoPlanError(ValueError):
    """The input admits no plan at all (not even serving part of the demand)."""


@dataclass
class StageResult:
    name: str
    value: float
    bound: float
    seconds: float
    status: str

    @property
    def gap(self) -> float:
        if not math.isfinite(self.bound):
            return math.inf
        return abs(self.value - self.bound) / max(abs(self.value), 1e-9)


class _StagedSolver:
    """One HiGHS model solving the stages in turn within one time budget."""

    def __init__(self, milp: CompoundMilp, options: PlannerOptions) -> None:
        self.milp = milp
        self.options = options
        self.highs = HighsModel(milp.m, options.mip_gap)
        self.deadline = time.perf_counter() + options.time_limit_s
        self.results: list[StageResult] = []
        self.relaxed_bound: float | None = None
        self.relax_and_fix_start = False

    def _solve(self, name: str, expression, sense, share: float) -> StageResult | None:
        self.highs.set_objective(expression, sense)
        remaining = self.deadline - time.perf_counter()
        # RINS and RENS fix the integers the root LP agrees on and solve the rest,
        # which is what relax-and-fix has just done for this objective: repeating
        # it only delays the bound (120 H100s: the cost stage proved its optimum
        # in about 4 s without them, 7 s with them). Later objectives keep them.
        result = self.highs.solve(remaining * share, neighbourhood_search=not self.relax_and_fix_start)
        self.relax_and_fix_start = False
        if result is None:
            return None
        return StageResult(name, result.value, result.bound, result.seconds, result.status)

    def optimise(self, name: str, expression, sense, share: float = 0.5) -> StageResult | None:
        stage = self._solve(name, expression, sense, share)
        if stage is None:
            return None
        if self.relaxed_bound is not None:
            tighter = max if sense == pyo.minimize else min
            stage.bound = tighter(stage.bound, self.relaxed_bound)
            self.relaxed_bound = None
        self.results.append(stage)
        self.highs.load_into_model()
        return stage

    def find_start(self, expression, sense) -> None:
        """Relax-and-fix: a good first solution and a strong bound.

        On large pools HiGHS's own heuristics find no solution in a minute (the
        variant and level binaries make rounding fail), and the plain LP bound
        is weak (fractional variants mix accuracies). So first solve with only
        those binaries integral, whose optimum bounds the full problem; fix
        them, solve for integral replicas and layouts, and start from that.
        """
        m = self.milp.m
        counts = list(m.n.values()) + list(m.g.values()) + [m.gpus_used, m.slices_used]
        self.highs.set_integral(counts, False)
        relaxed = self._solve("relaxed", expression, sense, share=0.3)
        self.highs.set_integral(counts, True)
        if relaxed is None:
            return
        self.relaxed_bound = relaxed.bound
        choices = list(m.y.values()) + list(m.z.values())
        for var in choices:
            value = round(self.highs.value(var))
            self.highs.set_bounds([var], value, value)
        rounded = self._solve("rounded", expression, sense, share=0.4)
        self.highs.restore_bounds(choices)
        self.relax_and_fix_start = rounded is not None

    def hold(self, expression, stage: StageResult, sense) -> None:
        """Keep what a stage reached while later stages optimise something else."""
        slack = 1e-7 * max(1.0, abs(stage.value))
        if sense == pyo.minimize:
            self.highs.add_row(expression, -math.inf, stage.value + slack)
        else:
            self.highs.add_row(expression, stage.value - slack, math.inf)

    def run(self, name: str, expression, sense, share: float = 0.5) -> StageResult | None:
        if pyo.is_constant(expression):
            return StageResult(name, pyo.value(expression), pyo.value(expression), 0.0, "constant")
        stage = self.optimise(name, expression, sense, share)
        if stage is not None:
            self.hold(expression, stage, sense)
        return stage

    def serve_all_demand(self, serve_all: bool) -> None:
        phis = list(self.milp.m.phi.values())
        if serve_all:
            self.highs.set_bounds(phis, 1.0, 1.0)
        else:
            self.highs.restore_bounds(phis)
            self.highs.relax_rows(self.milp.m.full_demand_cuts.values())


def plan(
    systems: list[SystemSpec],
    pool: Pool,
    store: ProfileStore,
    features: Features = Features(),
    options: PlannerOptions = PlannerOptions(),
    current: Plan | None = None,
) -> Plan:
    """The cheapest plan that serves the demand within the SLOs, or as much of it as the pool can."""
    started = time.perf_counter()
    data = _milp_input(systems, pool, store, features, options, current)
    milp, solver, build_s = _build(data, options, started)

    solver.serve_all_demand(True)
    first = _solve_after_serving(solver, milp, systems, current)
    if first is None:
        solver.serve_all_demand(False)
        _maximise_served(solver, "serve", systems, share=0.5)
        _solve_after_serving(solver, milp, systems, current)

    result = extract_plan(milp, features, options.headroom)
    gpus = assign_gpus(result.tasks, pool.gpus, milp.layout_counts(), current)
    report = _solver_report(solver, milp, build_s)
    plan_ = result.finish(gpus, report)
    plan_.diagnosis = diagnose(plan_, systems, data.candidates, data.levels)
    return plan_


def _build(data: MilpInput, options: PlannerOptions, started: float) -> tuple[CompoundMilp, _StagedSolver, float]:
    milp = CompoundMilp(data)
    build_s = time.perf_counter() - started
    return milp, _StagedSolver(milp, options), build_s


def _maximise_served(solver: _StagedSolver, name: str, systems: list[SystemSpec], share: float) -> StageResult:
    served = solver.milp.served()
    solver.find_start(served, pyo.maximize)
    stage = solver.run(name, served, pyo.maximize, share=share)
    if stage is None:
        raise NoPlanError(_no_plan_message(systems))
    return stage


def _solve_after_serving(solver: _StagedSolver, milp: CompoundMilp, systems: list[SystemSpec],
                         current: Plan | None):
    accuracy_first = [s.name for s in systems if s.priority == "accuracy"]
    stages = []
    if accuracy_first:
        stages.append(("accuracy-first", milp.accuracy_score(accuracy_first), pyo.maximize))
    stages.append(("cost", milp.cost(), pyo.minimize))
    stages.append(("accuracy", milp.accuracy_score(), pyo.maximize))
    if current is not None:
        stages.append(("least-change", milp.change(), pyo.maximize))
    # A constant objective (one variant per task) needs no solve, but the first
    # solve also tells whether all demand can be served, so it must be a real one.
    stages = [stage for stage in stages if not pyo.is_constant(stage[1])]
    solver.find_start(*stages[0][1:])
    first = solver.run(*stages[0], share=0.75)
    if first is None:
        if solver.highs.last_status != "Infeasible":
            raise NoPlanError(
                f"no plan found within the time limit of {solver.options.time_limit_s:g} s "
                f"(HiGHS: {solver.highs.last_status}); raise the time limit")
        return None
    for position, stage in enumerate(stages[1:], start=2):
        solver.run(*stage, share=1.0 if position == len(stages) else 0.5)
    return first


def max_common_scale(
    systems: list[SystemSpec],
    pool: Pool,
    store: ProfileStore,
    features: Features = Features(),
    options: PlannerOptions = PlannerOptions(),
) -> tuple[float, SolverReport]:
    """The largest factor by which every system's demand can grow and still be served."""
    started = time.perf_counter()
    data = _milp_input(systems, pool, store, features, options, None)
    data.maximise_common_scale = True
    data.scale_upper_bound = _scale_upper_bound(data)
    milp, solver, build_s = _build(data, options, started)
    stage = _maximise_served(solver, "max-demand", systems, share=1.0)
    return stage.value, _solver_report(solver, milp, build_s)


def _milp_input(systems, pool, store, features, options, current) -> MilpInput:
    gpu = gpu_product(pool.gpu)
    candidates = [
        c for system in systems
        for c in enumerate_candidates(system, gpu, store, features, options.batches)
    ]
    layouts = list(valid_layouts(gpu.name))
    if not features.spatial_partitioning:
        layouts = [((gpu.whole_gpu_profile.name, 1),)]
    return MilpInput(
        systems=systems, gpu=gpu, pool_gpus=pool.gpus, candidates=candidates,
        levels={s.name: budget_levels(s, features, options.budget_levels) for s in systems},
        layouts=layouts, utilisation=options.utilisation, tier_ratio=options.tier_ratio,
        busy_instances=options.busy_instances,
        variants={(s.name, t.name): allowed_variants(t, features) for s in systems for t in s.tasks},
        current_layouts=current_layout_counts(current) if current else {},
        current_replicas=current_replica_counts(current) if current else {},
    )


def _scale_upper_bound(data: MilpInput) -> float:
    """No system can grow beyond what its source tasks' best candidates serve on the whole pool."""
    slices = COMPUTE_SLICES * data.pool_gpus
    bound = math.inf
    for system in data.systems:
        if system.demand_rps <= 0:
            continue
        for source in system.sources:
            per_slice = [c.throughput_rps / c.compute_slices for c in data.candidates
                         if (c.system, c.task) == (system.name, source)]
            if per_slice:
                bound = min(bound, max(per_slice) * slices / system.demand_rps)
    return bound if math.isfinite(bound) else 0.0


def _solver_report(solver: _StagedSolver, milp: CompoundMilp, build_s: float) -> SolverReport:
    stages = solver.results
    main = next((s for s in stages if s.name in ("cost", "max-demand")), stages[-1])
    return SolverReport(
        status=main.status,
        stages=[s.name for s in stages],
        objective={s.name: s.value for s in stages},
        mip_gap=main.gap,
        build_s=build_s,
        solve_s=sum(s.seconds for s in stages),
        variables=milp.m.nvariables(),
        constraints=milp.m.nconstraints(),
    )


def _no_plan_message(systems: list[SystemSpec]) -> str:
    names = ", ".join(s.name for s in systems)
    return (f"no plan exists for {names}: no choice of variants meets the accuracy SLO with "
            "budgets that fit the latency SLO")
