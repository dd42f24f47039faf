"""Plan, then simulate: the studies the simulator exists for.

- `simulate_plan`: one plan under one trace, without and with early dropping.
- `check_latency_model`: each system planned alone at several demands and
  simulated under steady Poisson demand (the model's own assumption): the
  simulated p99 stage and path latencies beside the plan's predictions.
- `static_plan_study`: plans made for a trace's mean and for its p95 rate,
  per feature set, simulated under that trace: violations without dropping,
  drops with it, slice use.
"""

from __future__ import annotations

from typing import Callable

from pydantic import BaseModel

from tessera.planner.features import Features
from tessera.planner.input_files import InputError
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import Plan
from tessera.planner.profiles import ProfileStore
from tessera.planner.simulation import engine, metrics
from tessera.planner.simulation.entities import build_deployment, unserved_systems
from tessera.planner.simulation.policies import Policies
from tessera.planner.simulation.workloads import RateTrace, constant
from tessera.planner.solve import NoPlanError, PlannerOptions, plan

Progress = Callable[[int], None] | None


class PlanOutcome(BaseModel):
    """One plan under one trace: without early dropping and with it."""

    features: str
    planned_for: str
    demand_scale: float
    gpus_used: int
    unserved: list[str]
    served_pct: float  # of the demand the plan was made for: below 100 where the pool is too small
    without_dropping: metrics.Report
    with_dropping: metrics.Report
    series: list[metrics.Series]
    dropping_series: list[metrics.Series]


def scaled(systems: list[SystemSpec], factor: float) -> list[SystemSpec]:
    return [s.model_copy(update={"demand_rps": s.demand_rps * factor}) for s in systems]


def stage_count(systems: list[SystemSpec]) -> int:
    return sum(len(s.tasks) for s in systems)


def simulate_plan(plan_: Plan, systems: list[SystemSpec], store: ProfileStore, trace: RateTrace,
                  policies: Policies = Policies(), planned_for: str = "mean", demand_scale: float = 1.0,
                  progress: Progress = None) -> PlanOutcome:
    """Run `plan_` under `trace` (scaled to the systems' demand) twice: without and with early dropping."""
    deployment = build_deployment(plan_, systems, store)
    plain = engine.run(deployment, trace, policies.model_copy(update={"early_dropping": False}), progress)
    dropping = engine.run(deployment, trace, policies.model_copy(update={"early_dropping": True}), progress)
    return PlanOutcome(
        features=plan_.features, planned_for=planned_for, demand_scale=demand_scale, gpus_used=plan_.gpus_used,
        unserved=unserved_systems(plan_, systems),
        served_pct=100 * sum(s.served_rps for s in plan_.systems) / max(sum(s.demand_rps for s in plan_.systems), 1e-9),
        without_dropping=metrics.report(plain),
        with_dropping=metrics.report(dropping), series=metrics.series(plain),
        dropping_series=metrics.series(dropping))


def plan_and_simulate(systems: list[SystemSpec], pool: Pool, store: ProfileStore, trace: RateTrace,
                      features: Features = Features(), options: PlannerOptions = PlannerOptions(),
                      policies: Policies = Policies(), planned_for: str = "mean",
                      progress: Progress = None) -> PlanOutcome:
    """Plan for the trace's mean or p95 rate, then simulate under the trace. Raises NoPlanError."""
    factor = {"mean": 1.0, "p95": trace.p95()}[planned_for]
    if not factor > 0:  # a plan for no demand "serves" a trace that has some
        raise InputError(f"--plan-for p95: the trace {trace.name!r} has a p95 rate of 0 (its load falls in fewer "
                         f"than 5% of its {trace.bin_s:g} s bins); plan for its mean")
    plan_ = plan(scaled(systems, factor), pool, store, features, options)
    return simulate_plan(plan_, systems, store, trace, policies, planned_for, factor, progress)


class ModelCheckRow(BaseModel):
    system: str
    load: float
    demand_rps: float
    balancing: str
    what: str  # "stage <task>" or "path a>b>c"
    predicted_ms: float
    simulated_p99_ms: float

    @property
    def ratio(self) -> float:
        return self.simulated_p99_ms / self.predicted_ms


def check_latency_model(systems: list[SystemSpec], pool: Pool, store: ProfileStore,
                        loads: tuple[float, ...] = (0.5, 1.0, 2.0), duration_s: float = 300.0,
                        policies: tuple[Policies, ...] = (Policies(),), options: PlannerOptions = PlannerOptions(),
                        features: Features = Features(), progress: Progress = None) -> list[ModelCheckRow]:
    """Each system planned alone at demand x load, simulated at that demand under steady Poisson arrivals."""
    rows = []
    for system in systems:
        for load in loads:
            chosen = scaled([system], load)
            deployment = build_deployment(plan(chosen, pool, store, features, options), chosen, store)
            for policy in policies:
                report = metrics.report(engine.run(deployment, constant(duration_s), policy))
                common = dict(system=system.name, load=load, demand_rps=chosen[0].demand_rps,
                              balancing=report.balancing)
                rows += [ModelCheckRow(**common, what=f"stage {s.task}", predicted_ms=s.planned_ms,
                                       simulated_p99_ms=s.p99_ms) for s in report.stages]
                rows += [ModelCheckRow(**common, what="path " + ">".join(p.tasks), predicted_ms=p.planned_ms,
                                       simulated_p99_ms=p.p99_ms) for p in report.paths]
            if progress:
                progress(1)
    return rows


def static_plan_study(systems: list[SystemSpec], pool: Pool, store: ProfileStore, trace: RateTrace,
                      feature_sets: list[Features], policies: Policies = Policies(),
                      options: PlannerOptions = PlannerOptions(), progress: Progress = None) -> list[PlanOutcome]:
    """Per feature set, plans for the trace's mean and its p95 rate, each simulated under the trace."""
    outcomes = []
    for features in feature_sets:
        for planned_for in ("mean", "p95"):
            try:
                outcomes.append(plan_and_simulate(systems, pool, store, trace, features, options, policies,
                                                  planned_for))
            except NoPlanError:
                pass  # no plan at all: the study's table shows the row missing
            if progress:
                progress(1)
    return outcomes
