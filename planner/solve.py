"""Plan compound systems on a GPU pool: the MILP solved stage by stage.

The objective is lexicographic, solved as a sequence of HiGHS solves on one
model, each stage fixing the value the previous one reached:

1. serve the demand: only when the pool cannot serve all of it, maximise the
   served fractions (accuracy may drop to its SLO first, since the accuracy
   constraint allows it); with several `poolPriority` values, one priority
   at a time, highest first: its served fractions, then (where a lower
   priority follows) its accuracy, so a lower-priority system loses
   accuracy, then served demand, before a higher one loses either; within a
   priority, first what already runs (`running`: each running system at
   least the served fraction the plan in force gives it, as far as the
   quotas and higher priorities leave room), then the rest;
2. systems with `priority: accuracy`: their accuracy;
3. cost: fewest GPUs, then fewest compute slices (one weighted sum, a GPU
   outweighing every slice), proven in its own units: to an absolute gap
   below `slice_tolerance` slices, which proves the GPUs exactly too; no
   relative gap leaves slices unproven on a large pool; on a pool of nodes
   that carry MIG instances, plus the price of the nodes the plan changes
   (change_cost.py), after two reference solves that say what a change saves;
4. accuracy of every system (tie-break among equally cheap plans);
5. least change from the current plan, when one is given.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pyomo.environ as pyo
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tessera.planner.assignment import assign_gpus, current_layout_counts, current_replica_counts
from tessera.planner.candidates import allowed_variants, budget_levels, enumerate_candidates
from tessera.planner.catalog import COMPUTE_SLICES, gpu_product, valid_layouts
from tessera.planner.change_cost import (DEFAULT_HORIZON_S, DEFAULT_RECONFIGURE_S, ChangeSummary, node_groups,
                                         nodes_changed, serving_nodes)
from tessera.planner.checker import check_plan
from tessera.planner.diagnosis import diagnose
from tessera.planner.errors import InfeasibleError, NoPlanError, PlannerBug, TimeLimitError
from tessera.planner.features import Features
from tessera.planner.highs_driver import COLLECTOR, HighsModel
from tessera.planner.latency import DEFAULT_CONNECTIONS, Routing
from tessera.planner.milp import CompoundMilp, MilpInput, candidate_key
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.nodes import NodePool, PoolGpus, pool_gpus
from tessera.planner.numerics import check_capacity_covers_demand, check_milp_input
from tessera.planner.plan import CostProof, Plan, SolverReport
from tessera.planner.plan_extraction import extract_plan
from tessera.planner.profiles import DEFAULT_BATCHES, ProfileStore
from tessera.planner.quota import InstanceQuota

__all__ = ["InfeasibleError", "NoPlanError", "PlannerBug", "PlannerOptions", "TimeLimitError", "max_common_scale",
           "plan"]

TIME_LIMIT_STATUS = "Time limit reached"
INFEASIBLE_STATUS = "Infeasible"
EXACT_UP_TO_GPUS = 2


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
    exact_up_to_gpus: int = Field(
        default=EXACT_UP_TO_GPUS, ge=0,
        description="Pools of at most this many GPUs solve the exact model (tier_ratio 1, busy_instances 0) "
                    "whatever those two say: there a fraction of an instance is a share of the cost.",
    )
    batches: tuple[int, ...] = Field(default=DEFAULT_BATCHES, description="Batch sizes profiled and planned.")
    max_batch: int | None = Field(
        default=None, ge=1, description="The largest batch a variant's server accepts (None: the largest of "
                                        "`batches`).")
    max_mps: int = Field(default=4, ge=1, le=48, description="Most server processes sharing one MIG instance "
                                                             "(each bounded by memory).")
    mip_gap: float = Field(default=1e-3, ge=0, description="Relative gap of the serve and accuracy stages.")
    slice_tolerance: float = Field(
        default=1.0, gt=0,
        description="The slice count is proven once its lower bound is less than this many slices below it "
                    "(1: the fewest slices, slices being whole); GPUs are always proven exactly.",
    )
    time_limit_s: float = Field(default=60, gt=0, description="Wall-clock budget of all solves of one plan.")
    latency_spread: float = Field(
        default=1.0, ge=1, le=10,
        description="p99/p50 of a batch's latency, applied to estimated profiles (medians) whose variant's "
                    "measurements do not say it (their median p99/p50; 1 for estimates fitted to measured p99s); "
                    "measured and given profiles state their p99. 1 takes an estimate as its p99: no measurement "
                    "of the examples' variants records a median.")
    queueing: bool = Field(
        default=False,
        description="Count each segment's p99 queueing wait, with fan-out bulks, in the stage latency "
                    "(latency.py). Off by default for now: it takes a parent's whole bulk to land on one "
                    "replica, so at scale it over-provisions; off, the model the serving simulation found "
                    "optimistic under load and fan-out.")

    routing: Routing = Field(
        default=Routing.ONE_REPLICA,
        description="How requests reach a task's replicas, for the queueing wait's bulks: one-replica (a whole "
                    "bulk may land on any replica: safe under any routing), per-request (in proportion to "
                    "planned load, as tessera's frontend routes) or per-connection (a plain Service).")
    connections: int = Field(default=DEFAULT_CONNECTIONS, ge=1, le=1024,
                             description="Client connections to each task's Service (per-connection routing).")

    reconfigure_s: float = Field(
        default=DEFAULT_RECONFIGURE_S, ge=0,
        description="Seconds mig-manager takes to re-partition a node, its capacity lost meanwhile (an estimate "
                    "until measured on a GPU); 0 prices no change.")
    change_horizon_s: float = Field(
        default=DEFAULT_HORIZON_S, gt=0,
        description="Seconds a plan is expected to stand: a node's change costs its capacity times "
                    "reconfigure_s / change_horizon_s (docs/planner.md).")
    max_nodes_changed: int | None = Field(
        default=None, ge=0,
        description="The most nodes the current plan serves on that one re-plan may re-partition (None: no bound).")
    decompose: bool = Field(
        default=True,
        description="On a fresh pool (no plan in force), plan each system alone, pack them together and check "
                    "the whole; on a re-plan, keep the parts of the systems whose inputs are unchanged and plan "
                    "the others so; falling back to the joint solve where that fails (decompose.py).")
    parallel_parts: int = Field(
        default=2, ge=1, le=64,
        description="Parts of a decomposed or incremental plan solved at once, by threads of the solving process "
                    "(at most the cores it may use): HiGHS solves one part while the next one's model is built. "
                    "The plan is the same for any value; 1 solves them one after another.")

    @field_validator("batches")
    @classmethod
    def _batches_positive(cls, batches: tuple[int, ...]) -> tuple[int, ...]:
        if not batches or min(batches) < 1:
            raise ValueError(f"batches must be one or more sizes >= 1, got {batches}")
        return tuple(sorted(set(batches)))

    @property
    def utilisation(self) -> float:
        return 1 / (1 + self.headroom)

    @property
    def change_share(self) -> float:
        """The share of a changed node's capacity a change loses over the plan's horizon."""
        return self.reconfigure_s / self.change_horizon_s

    @property
    def prices_change(self) -> bool:
        return self.change_share > 0 or self.max_nodes_changed is not None

    def exact_for(self, pool_gpus: int) -> bool:
        return pool_gpus <= self.exact_up_to_gpus


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
        self.relaxed: tuple[object, float] | None = None  # (expression, bound) from relax-and-fix
        self.rounded: StageResult | None = None  # relax-and-fix's start
        self.start_seconds = 0.0  # what relax-and-fix's two solves took
        self.relax_and_fix_start = False
        # The accuracy stage gets a relax-and-fix start of its own (_accuracy_stage).
        self.accuracy_from_start = False
        # Relax-and-fix's relaxation proved infeasible: so is the full model (it only adds integrality).
        self.proven_infeasible = False
        # The reference plans a change is weighed between: stage name -> (cost, nodes changed).
        self.references: dict[str, tuple[float, int]] = {}

    def _solve(self, name: str, expression: Any, sense: Any, share: float,
               abs_gap: float | None = None) -> StageResult | None:
        self.highs.set_objective(expression, sense)
        remaining = self.deadline - time.perf_counter()
        # RINS and RENS fix the integers the root LP agrees on and solve the rest,
        # which is what relax-and-fix has just done for this objective: repeating
        # it only delays the bound (120 H100s: the cost stage proved its optimum
        # in about 4 s without them, 7 s with them). Later objectives keep them.
        result = self.highs.solve(remaining * share, neighbourhood_search=not self.relax_and_fix_start,
                                  abs_gap=abs_gap)
        self.relax_and_fix_start = False
        if result is None:
            return None
        return StageResult(name, result.value, result.bound, result.seconds, result.status)

    def optimise(self, name: str, expression: Any, sense: Any, share: float = 0.5,
                 abs_gap: float | None = None) -> StageResult | None:
        stage = self._proven_by_start(name, expression, abs_gap) or self._solve(name, expression, sense, share, abs_gap)
        if stage is None:
            return None
        if self.relaxed is not None and self.relaxed[0] is expression:
            # relax-and-fix solved a relaxation of this very objective: its bound holds here
            tighter = max if sense == pyo.minimize else min
            stage.bound = tighter(stage.bound, self.relaxed[1])
        self.results.append(stage)
        self.highs.load_into_model()
        return stage

    def _proven_by_start(self, name: str, expression: Any, abs_gap: float | None) -> StageResult | None:
        """Relax-and-fix's start when its relaxation's bound already proves it within the stage's tolerance.

        On small pools this is the common case (4 H100s: the relaxation with
        integral variants, levels and totals reaches the optimum), and the
        full MIP would spend seconds re-proving it from a weaker root.
        """
        if (not self.relax_and_fix_start or self.relaxed is None or self.rounded is None
                or self.relaxed[0] is not expression):
            return None
        value, bound = self.rounded.value, self.relaxed[1]
        tolerance = abs_gap if abs_gap is not None else self.options.mip_gap * max(abs(value), 1e-9)
        if not math.isfinite(bound) or abs(value - bound) > tolerance:
            return None
        self.relax_and_fix_start = False
        return StageResult(name, value, bound, self.start_seconds, "Optimal")

    def find_start(self, expression: Any, sense: Any) -> None:
        """Relax-and-fix: a good first solution and a strong bound.

        On large pools HiGHS's own heuristics find no solution in a minute (the
        variant and level binaries make rounding fail), and the plain LP bound
        is weak (fractional variants mix accuracies). So first solve with only
        those binaries and the GPU and slice totals integral, whose optimum
        bounds the full problem; fix the binaries, solve for integral
        replicas and layouts, and start from that. (Integral totals cost the
        relaxation little and make its bound count whole GPUs: on small pools
        it then often proves the start optimal.) The queueing wait's bulk
        classes (U) are relaxed too, the rounded solve setting them: integral,
        they made the relaxation as slow as the full model (4 H100s at 80%
        fill: 35 CPU s, time-limited at the same bound, against 8). And the
        rounded solve leaves the budget levels free: a level sets each
        instance's most load as well as its least, and the relaxation's
        levels, chosen for fractional instances, cost whole GPUs (120 H100s
        at 80% fill: a start of 101 GPUs / 706 slices, then 41-43 CPU s of
        cost stage to the optimum 100 / 697; with the levels free, 100 / 700
        in 14-15 CPU s and 14-15 more to the optimum).
        """
        m = self.milp.m
        counts = list(m.n.values()) + list(m.g.values()) + list(m.h.values()) + self.highs.in_model(m.U.values())
        self.highs.set_integral(counts, False)
        relaxed = self._solve("relaxed", expression, sense, share=0.3)
        self.highs.set_integral(counts, True)
        self.proven_infeasible = relaxed is None and self.highs.last_status == INFEASIBLE_STATUS
        if relaxed is None:
            return
        self.relaxed = (expression, relaxed.bound)
        choices = list(m.y.values()) + ([] if self.milp.data.queueing else list(m.z.values()))
        for var in choices:
            value = round(self.highs.value(var))
            self.highs.set_bounds([var], value, value)
        rounded = self._solve("rounded", expression, sense, share=0.4)
        self.highs.restore_bounds(choices)
        self.rounded = rounded
        self.start_seconds = relaxed.seconds + (rounded.seconds if rounded else 0.0)
        self.relax_and_fix_start = rounded is not None

    def hold(self, expression: Any, stage: StageResult, sense: Any) -> None:
        """Keep what a stage reached while later stages optimise something else."""
        slack = 1e-7 * max(1.0, abs(stage.value))
        if sense == pyo.minimize:
            self.highs.add_row(expression, -math.inf, stage.value + slack)
        else:
            self.highs.add_row(expression, stage.value - slack, math.inf)

    def run(self, name: str, expression: Any, sense: Any, share: float = 0.5,
            abs_gap: float | None = None) -> StageResult | None:
        if pyo.is_constant(expression):
            return StageResult(name, pyo.value(expression), pyo.value(expression), 0.0, "constant")
        stage = self.optimise(name, expression, sense, share, abs_gap)
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
            # A replica's bulk share of its task's least demand holds only while all demand is served.
            self.highs.relax_rows(self.milp.m.split_bulk_rows.values())
            for excess in self.milp.part_served_rows:
                self.highs.add_row(excess(), -math.inf, 0.0)


def plan(
    systems: list[SystemSpec],
    pool: Pool | NodePool,
    store: ProfileStore,
    features: Features = Features(),
    options: PlannerOptions = PlannerOptions(),
    current: Plan | None = None,
    quotas: Sequence[InstanceQuota] = (),
    running: Mapping[str, float] = MappingProxyType({}),
) -> Plan:
    """The cheapest plan that serves the demand within the SLOs and the quotas, or as much of it as they allow.

    `running`: system name -> the served fraction the plan in force gives a
    running system that this re-plan must not lower (whom to protect is the
    caller's choice); precedence: quotas, then priority, then these.

    Every plan returned has passed the independent checker; a plan that
    fails it raises PlannerBug. No plan at all raises InfeasibleError or
    TimeLimitError (both NoPlanError).
    """
    started = time.perf_counter()
    gpus = pool_gpus(pool)
    data = _milp_input(systems, gpus, store, features, options, current, quotas)
    milp, solver, build_s = _build(data, options, started)
    if current is not None and isinstance(pool, NodePool):
        _keep_what_runs(solver, gpus, current, {system for node in pool.nodes for system in node.kept_for})

    solver.serve_all_demand(True)
    first = _solve_after_serving(solver, milp, systems, current is not None or bool(data.current_layouts))
    if first is None:
        solver.serve_all_demand(False)
        _serve_by_priority(solver, systems, running)
        _solve_after_serving(solver, milp, systems, current is not None or bool(data.current_layouts))

    result = extract_plan(milp, features, options.headroom, options.latency_spread)
    placed = assign_gpus(result.tasks, gpus, milp.layout_counts(), milp.fixed_counts(), current,
                         milp.kept_nodes(), milp.restricted_counts(), {s.name: s.pool_priority for s in systems})
    report = _solver_report(solver, milp, build_s, options)
    plan_ = result.finish(placed, report)
    if milp.prices_change:
        plan_.changes = _change_summary(gpus, plan_, milp, solver)
    plan_.running = running_floors(running, systems)
    plan_.kept_for = kept_for_of(pool)
    check_capacity_covers_demand(plan_, systems)
    plan_.diagnosis = diagnose(plan_, systems, data.candidates, data.levels)
    errors = check_plan(plan_, systems, pool, store, features, options, quotas)
    if errors:
        raise PlannerBug(f"the plan fails the independent checker ({len(errors)} violations): {errors[0]}", errors)
    return plan_


def running_floors(running: Mapping[str, float], systems: list[SystemSpec]) -> dict[str, float]:
    """The running floors given for the planned systems (Plan.running)."""
    names = {s.name for s in systems}
    return {name: floor for name, floor in sorted(running.items()) if name in names}


def kept_for_of(pool: Pool | NodePool) -> dict[str, list[str]]:
    """Nodes kept for running systems -> those systems (Plan.kept_for); none on a pool of unnamed GPUs."""
    return {node.name: list(node.kept_for) for node in pool.nodes if node.kept_for} if isinstance(pool, NodePool) \
        else {}


def _build(data: MilpInput, options: PlannerOptions, started: float) -> tuple[CompoundMilp, _StagedSolver, float]:
    with COLLECTOR.held():  # the model's objects, built and loaded, free nothing to collect meanwhile
        milp = CompoundMilp(data)
        build_s = time.perf_counter() - started
        return milp, _StagedSolver(milp, options), build_s


SERVE_STAGE = "serve"
RUNNING_STAGE = "running"
RUNNING_SLACK = 1e-6
"""A running system's floor is held this far below what it reached (the solver's tolerances)."""
NOTHING_SERVED = 1e-5
"""A priority's served fraction per system at or below which it serves nothing (the solver's tolerances)."""


def serve_stage(name: str) -> bool:
    """Whether a stage is one of stage 1's (one per priority where systems' priorities differ)."""
    return name == SERVE_STAGE or name.startswith(f"{SERVE_STAGE}-")


def priority_levels(systems: list[SystemSpec]) -> list[tuple[int, list[str]]]:
    """(poolPriority, the names of its systems), highest first."""
    levels: dict[int, list[str]] = {}
    for system in systems:
        levels.setdefault(system.pool_priority, []).append(system.name)
    return sorted(levels.items(), reverse=True)


def _serve_by_priority(solver: _StagedSolver, systems: list[SystemSpec], running: Mapping[str, float]) -> None:
    """Stage 1 where the pool cannot serve all demand: the most served, one priority at a time, highest first.

    Each priority's served fractions are held before the next is served, and
    so is its accuracy where a lower priority follows: lower priorities get
    only what is left, so they lose accuracy, then served demand, first.
    One priority (the default: every system 0) is one stage, as before.
    Within a priority, its `running` systems are held first (_hold_running).
    """
    levels = priority_levels(systems)
    if len(levels) == 1:
        _hold_running(solver, RUNNING_STAGE, running)
        _maximise_served(solver, SERVE_STAGE, systems, share=0.5)
        return
    for rank, (priority, names) in enumerate(levels):
        _hold_running(solver, f"{RUNNING_STAGE}-priority-{priority}", {n: running[n] for n in names if n in running})
        _maximise_served(solver, f"{SERVE_STAGE}-priority-{priority}", systems, share=0.5, names=names)
        if rank + 1 < len(levels):
            solver.run(f"accuracy-priority-{priority}", solver.milp.accuracy_score(names), pyo.maximize, share=0.5)


def _keep_what_runs(solver: _StagedSolver, gpus: PoolGpus, current: Plan, kept: set[str]) -> None:
    """The systems nodes are kept for (NodeState.kept_for) keep what runs, in every stage: at least their current
    replicas of each configuration, and the kept GPUs they run on stay in use, so the assignment leaves them
    where they are (a cheaper plan would otherwise move them off the kept node: a needless move)."""
    if not kept:
        return
    milp = solver.milp
    counts = {key: n for key, n in current_replica_counts(current).items() if key[0] in kept}
    for i, candidate in enumerate(milp.data.candidates):
        replicas = counts.get(candidate_key(candidate), 0)
        if replicas:
            options = [milp.m.n[o] for o, option in enumerate(milp.options) if option.candidate == i]
            solver.highs.add_row(sum(options), replicas, math.inf)
    running_on = {(g.node, g.device) for g in current.gpus if any(i.system in kept for i in g.instances)}
    used = Counter((g.current, g.usable) for g in gpus.gpus if g.fixed and (g.node, g.device) in running_on)
    for k, (layout, usable, _) in enumerate(milp.data.fixed_groups):
        if used[(layout, usable)]:
            solver.highs.add_row(milp.m.h[k], used[(layout, usable)], math.inf)


def _hold_running(solver: _StagedSolver, name: str, floors: Mapping[str, float]) -> None:
    """What already runs comes before the others of its priority: the running systems' served fractions are
    maximised, each capped at its floor (what the plan in force gives it), and held: each at its floor where
    all reach theirs, else their sum at what it reached (a lowered quota, or a higher priority, leaves less).

    A stage that finds nothing in its time holds nothing (the others' stage still
    runs; the plan is checked as always).
    """
    planned = {system.name for system in solver.milp.data.systems}
    floors = {system: min(1.0, floor) for system, floor in sorted(floors.items())
              if floor > NOTHING_SERVED and system in planned}
    if not floors:
        return
    phi = solver.milp.m.phi
    for system, floor in floors.items():
        solver.highs.set_bounds([phi[system]], 0.0, floor)
    served = solver.milp.served(list(floors))
    solver.find_start(served, pyo.maximize)
    stage = solver.optimise(name, served, pyo.maximize, share=0.5)
    solver.highs.restore_bounds([phi[system] for system in floors])
    if stage is None:
        return
    if stage.value >= sum(floors.values()) - RUNNING_SLACK * len(floors):
        for system, floor in floors.items():
            solver.highs.set_bounds([phi[system]], max(0.0, floor - RUNNING_SLACK), 1.0)
    else:
        solver.hold(served, stage, pyo.maximize)


def _maximise_served(solver: _StagedSolver, name: str, systems: list[SystemSpec], share: float,
                     names: list[str] | None = None) -> StageResult:
    """The most served of the systems `names` (default all), held for the stages after."""
    served = solver.milp.served(names)
    solver.find_start(served, pyo.maximize)
    if solver.proven_infeasible:
        raise InfeasibleError(_no_plan_message(systems))
    stage = solver.optimise(name, served, pyo.maximize, share=share)
    if stage is None:
        if solver.highs.last_status == INFEASIBLE_STATUS:
            raise InfeasibleError(_no_plan_message(systems))
        raise TimeLimitError(_time_limit_message(solver))
    if names is not None and stage.value <= NOTHING_SERVED * len(names):
        # Within the solver's tolerances of nothing: held as it is, it would be claimed as demand served by
        # replicas that integrality tolerance leaves at 1e-7 and the plan rounds to 0 (maximised alone, a
        # priority that gets no capacity reaches exactly that).
        solver.highs.fix([solver.milp.m.phi[n] for n in names], 0.0)
    else:
        solver.hold(served, stage, pyo.maximize)
    return stage


def _solve_after_serving(solver: _StagedSolver, milp: CompoundMilp, systems: list[SystemSpec],
                         replanning: bool) -> StageResult | None:
    """The stages after the demand to serve is settled; None when serving all of it is infeasible."""
    accuracy_first = [s.name for s in systems if s.priority == "accuracy"]
    stages = []
    if accuracy_first:
        stages.append(("accuracy-first", milp.accuracy_score(accuracy_first), pyo.maximize))
    stages.append(("cost", milp.priced_cost(), pyo.minimize))
    stages.append(("accuracy", milp.accuracy_score(), pyo.maximize))
    if replanning:
        stages.append(("least-change", milp.change(), pyo.maximize))
    # A constant objective (one variant per task) needs no solve, but the first
    # solve also tells whether all demand can be served, so it must be a real one.
    stages = [stage for stage in stages if not pyo.is_constant(stage[1])]
    solver.find_start(*stages[0][1:])
    if solver.proven_infeasible:
        # Serving all demand is infeasible already without integral replicas and layouts: proving it
        # again on the full model took the 4-H100 benchmark's queueing solve 14 s of its 60.
        return None
    first = None
    for position, (name, expression, sense) in enumerate(stages, start=1):
        share = 0.75 if position == 1 else 1.0 if position == len(stages) else 0.5
        # The cost is proven in its own units: an absolute gap below the slice
        # tolerance proves the GPUs exactly too (see _cost_proof).
        abs_gap = solver.options.slice_tolerance - 1e-6 if name == "cost" else None
        if name == "cost" and milp.prices_change:
            _change_references(solver, milp, abs_gap)
        if name == "cost" and not milp.prices_change:
            stage = _cost_stage(solver, milp, expression, share, abs_gap)
        elif name == "accuracy" and solver.accuracy_from_start:
            stage = _accuracy_stage(solver, expression, share)
        else:
            stage = solver.run(name, expression, sense, share=share, abs_gap=abs_gap)
        if position == 1:
            if stage is None:
                if solver.highs.last_status != INFEASIBLE_STATUS:
                    raise TimeLimitError(_time_limit_message(solver))
                return None
            first = stage
    return first


def _cost_stage(solver: _StagedSolver, milp: CompoundMilp, cost: Any, share: float,
                abs_gap: float | None) -> StageResult | None:
    """The cost stage (unpriced), its GPU count bounded by relax-and-fix's start and, once proven, fixed with the
    slices for the stages after it: the same plans each time, with counts the relaxations would leave
    fractional."""
    _bound_gpus_by_start(solver, milp, cost)
    tight = _start_within_a_gpu(solver, milp, cost)
    stage = solver.run("cost", cost, pyo.minimize, share=share, abs_gap=abs_gap)
    if stage is None:
        solver.highs.restore_bounds([milp.m.gpus_used])
    else:
        solver.accuracy_from_start = _fix_proven_cost(solver, milp, stage) and tight
    return stage


def _start_within_a_gpu(solver: _StagedSolver, milp: CompoundMilp, cost: Any) -> bool:
    """Whether relax-and-fix's start for the cost came within one GPU's weight of its relaxation's bound: whole
    replicas then cost the relaxation's variants little, and a relaxation of the accuracy stage likely fits too."""
    return (solver.relaxed is not None and solver.rounded is not None and solver.relaxed[0] is cost
            and solver.rounded.value - solver.relaxed[1] < milp.gpu_weight)


def _bound_gpus_by_start(solver: _StagedSolver, milp: CompoundMilp, cost: Any) -> None:
    """Relax-and-fix's bound and start bound the GPUs of any plan at least as cheap as the start.

    Every plan serving all demand costs at least the relaxation's bound B, so
    uses at least ceil(B / (W + S)) GPUs (as _cost_proof counts them); one no
    dearer than the start (cost V) uses at most V // W.
    """
    if (solver.relaxed is None or solver.rounded is None or solver.relaxed[0] is not cost
            or not math.isfinite(solver.relaxed[1])):
        return
    weight = milp.gpu_weight
    least = max(0, math.ceil(solver.relaxed[1] / (weight + COMPUTE_SLICES) - 1e-6))
    most = round(solver.rounded.value) // weight
    if least <= most:
        solver.highs.set_bounds([milp.m.gpus_used], least, most)


def _fix_proven_cost(solver: _StagedSolver, milp: CompoundMilp, stage: StageResult) -> bool:
    """A cost proven to the slice fixes the GPUs and slices for the stages after it.

    The cost W x GPUs + slices is integral and its bound proves no plan costs
    less, so the held row `cost <= value` admits exactly the plans of these
    counts (slices < W, so the split is unique): the same plans, but the later
    stages' relaxations no longer trade a fraction of a GPU for slices
    (4 H100s at 80% fill under the queueing wait: the accuracy stage took 50 s
    of the solve's 117 proving a tie-break against that weak relaxation).
    """
    if not math.isfinite(stage.bound) or math.ceil(stage.bound - 1e-6) < round(stage.value):
        return False
    gpus, slices = divmod(round(stage.value), milp.gpu_weight)
    solver.highs.fix([milp.m.gpus_used], gpus)
    solver.highs.fix([milp.m.slices_used], slices)
    return True


def _accuracy_stage(solver: _StagedSolver, accuracy: Any, share: float) -> StageResult | None:
    """The accuracy tie-break after a proven cost, from a relax-and-fix start of its own.

    With the GPUs and slices fixed, the relaxation (integral variants,
    fractional replicas and layouts) bounds the accuracy of every plan of
    that cost, and where its variants also fit with whole replicas, that
    plan reaches the bound: proven within the stage's gap without the full
    MIP, whose root alone took most of the stage (4 H100s at 80% fill under
    the queueing wait: 10 CPU s instead of 23). Otherwise the full MIP runs
    from the better of the two plans, the relaxation's bound kept.
    """
    cheapest = solver.highs.last_solution()
    solver.find_start(accuracy, pyo.maximize)
    if solver.rounded is None:
        solver.highs.start_from(cheapest)
    return solver.run("accuracy", accuracy, pyo.maximize, share=share)


REFERENCE_ANY_CHANGE = "cost-any-change"
REFERENCE_NO_CHANGE = "cost-no-change"


def _change_references(solver: _StagedSolver, milp: CompoundMilp, abs_gap: float | None) -> None:
    """The two plans a change is weighed between, solved (not held) before the priced cost stage: the
    cheapest regardless of change, and, where that one changes nodes, the cheapest that changes none.

    They cost a solve or two of the cost stage on a re-plan, and say in the plan what a change saves or
    what a declined one would have (ChangeSummary).
    """
    solver.references.clear()
    # Among the cheapest plans, one that changes the fewest nodes: a tie-break worth less than a slice in all.
    fewest = milp.cost() + milp.nodes_changed() / (milp.carrying_nodes + 1)
    cheapest = solver.optimise(REFERENCE_ANY_CHANGE, fewest, pyo.minimize, share=0.25, abs_gap=abs_gap)
    if cheapest is None:
        return
    solver.references[REFERENCE_ANY_CHANGE] = (pyo.value(milp.cost()), round(pyo.value(milp.nodes_changed())))
    if solver.references[REFERENCE_ANY_CHANGE][1] == 0:
        solver.references[REFERENCE_NO_CHANGE] = solver.references[REFERENCE_ANY_CHANGE]
        return
    cheapest_priced, cheapest_solution = pyo.value(milp.priced_cost()), solver.highs.last_solution()
    stay = list(milp.m.stay.values())
    for var in stay:
        solver.highs.set_bounds([var], var.ub, var.ub)
    unchanged = solver.optimise(REFERENCE_NO_CHANGE, milp.cost(), pyo.minimize, share=0.25, abs_gap=abs_gap)
    solver.highs.restore_bounds(stay)
    if unchanged is not None:
        solver.references[REFERENCE_NO_CHANGE] = (unchanged.value, 0)
    # The priced stage starts from whichever reference its price makes cheaper (both are feasible there).
    if unchanged is None or cheapest_priced < unchanged.value:
        solver.highs.start_from(cheapest_solution)


def _change_summary(pool: PoolGpus, plan_: Plan, milp: CompoundMilp, solver: _StagedSolver) -> ChangeSummary:
    """What the plan changes, measured on its GPUs, beside the reference plans' costs."""
    chosen = {(g.node, g.device): tuple(sorted(g.layout)) for g in plan_.gpus}
    changed, kept = nodes_changed(pool, chosen, {n for g in milp.data.node_groups for n in g.nodes})
    price = sum(milp.data.change_share * group.capacity(milp.data.gpu, milp.gpu_weight)
                for group in milp.data.node_groups for node in group.nodes if node in changed)
    weight = milp.gpu_weight
    summary = ChangeSummary(nodes_changed=changed, nodes_kept=kept, price=price)
    unchanged = solver.references.get(REFERENCE_NO_CHANGE)
    if changed and unchanged is not None:
        gpus, slices = divmod(round(unchanged[0]), weight)
        summary.gpus_saved, summary.slices_saved = gpus - plan_.gpus_used, slices - plan_.slices_used
    cheapest = solver.references.get(REFERENCE_ANY_CHANGE)
    if cheapest is not None and cheapest[1] > len(changed):
        summary.forgone_nodes = cheapest[1] - len(changed)
        gpus, slices = divmod(round(cheapest[0]), weight)
        summary.forgone_gpus, summary.forgone_slices = plan_.gpus_used - gpus, plan_.slices_used - slices
    return summary


def _time_limit_message(solver: _StagedSolver) -> str:
    return (f"no plan found within the time limit of {solver.options.time_limit_s:g} s "
            f"(HiGHS: {solver.highs.last_status}); raise the time limit")


def max_common_scale(
    systems: list[SystemSpec],
    pool: Pool | NodePool,
    store: ProfileStore,
    features: Features = Features(),
    options: PlannerOptions = PlannerOptions(),
) -> tuple[float, SolverReport]:
    """The largest factor by which every system's demand can grow and still be served."""
    started = time.perf_counter()
    data = _milp_input(systems, pool_gpus(pool), store, features, options, None)
    data.maximise_common_scale = True
    data.scale_upper_bound = _scale_upper_bound(data)
    milp, solver, build_s = _build(data, options, started)
    stage = _maximise_served(solver, "max-demand", systems, share=1.0)
    return stage.value, _solver_report(solver, milp, build_s, options)


def _milp_input(systems: list[SystemSpec], pool: PoolGpus, store: ProfileStore, features: Features,
                options: PlannerOptions, current: Plan | None, quotas: Sequence[InstanceQuota] = ()) -> MilpInput:
    gpu = gpu_product(pool.gpu)
    exact = options.exact_for(len(pool.gpus))
    candidates = [
        c for system in systems
        for c in enumerate_candidates(system, gpu, store, features, options.batches, options.max_mps,
                                      options.max_batch, options.latency_spread)
    ]
    layouts = list(valid_layouts(gpu.name))
    if not features.spatial_partitioning:
        layouts = [((gpu.whole_gpu_profile.name, 1),)]
    data = MilpInput(
        systems=systems, gpu=gpu, pool_gpus=len(pool.gpus), candidates=candidates,
        levels={s.name: budget_levels(s, features, options.budget_levels) for s in systems},
        layouts=layouts, utilisation=options.utilisation, queueing=options.queueing, routing=options.routing,
        connections=options.connections,
        tier_ratio=1.0 if exact else options.tier_ratio, busy_instances=0 if exact else options.busy_instances,
        variants={(s.name, t.name): allowed_variants(t, features) for s in systems for t in s.tasks},
        # A pool of nodes knows every GPU's layout; a plain pool only what the last plan chose.
        current_layouts=pool.current_free_layouts() or (current_layout_counts(current) if current else {}),
        current_replicas=current_replica_counts(current) if current else {},
        free_gpus=len(pool.free), fixed_groups=pool.fixed_groups(),
        node_groups=node_groups(pool, serving_nodes(current)) if options.prices_change else [],
        change_share=options.change_share, max_nodes_changed=options.max_nodes_changed,
        quotas=[q for q in quotas if q.systems & {s.name for s in systems}],
        usable_above=pool.usable_above_counts(),
    )
    check_milp_input(data)
    return data


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


def _solver_report(solver: _StagedSolver, milp: CompoundMilp, build_s: float,
                   options: PlannerOptions) -> SolverReport:
    stages = solver.results
    by_name = {s.name: s for s in stages}
    main = [s for s in stages if s.name in ("cost", "max-demand") or serve_stage(s.name)] or stages[-1:]
    limited = [s for s in main if s.status == TIME_LIMIT_STATUS]
    return SolverReport(
        status=(limited or main)[0].status,
        stages=[s.name for s in stages],
        objective={s.name: s.value for s in stages},
        mip_gap=max(s.gap for s in main),
        build_s=build_s,
        solve_s=sum(s.seconds for s in stages),
        variables=milp.m.nvariables(),
        constraints=milp.m.nconstraints(),
        time_limited=[s.name for s in stages if s.status == TIME_LIMIT_STATUS],
        cost=_cost_proof(by_name, milp, options),
    )


def _cost_proof(stages: dict[str, StageResult], milp: CompoundMilp,
                options: PlannerOptions) -> CostProof | None:
    """GPUs and slices beside the lower bounds the weighted cost's bound B gives them.

    cost = W x GPUs + slices with slices <= S x GPUs (S = COMPUTE_SLICES) (a priced stage's cost less the
    plan's change price), so
    every plan has GPUs >= B / (W + S), and every plan with as many GPUs as
    this one has slices >= B - W x GPUs. When the solve proved the cost to
    within less than one slice, both bounds meet the counts: W exceeds
    S x GPUs + 1.
    """
    if "cost" not in stages:
        return None
    cost, weight = stages["cost"], milp.gpu_weight
    # A priced cost stage's bound, less the plan's change price, holds among plans with that price.
    price = pyo.value(milp.change_price()) if milp.prices_change else 0.0
    gpus, slices = divmod(round(cost.value - price), weight)
    bound = cost.bound - price if math.isfinite(cost.bound) else 0.0
    return CostProof(gpus=gpus, gpus_lower_bound=min(gpus, max(0, math.ceil(bound / (weight + COMPUTE_SLICES) - 1e-6))),
                     slices=slices, slices_lower_bound=min(slices, max(0, math.ceil(bound - weight * gpus - 1e-6))),
                     slice_tolerance=options.slice_tolerance)


def _no_plan_message(systems: list[SystemSpec]) -> str:
    names = ", ".join(s.name for s in systems)
    return (f"no plan exists for {names}: no choice of variants meets the accuracy SLO with "
            "budgets that fit the latency SLO")
