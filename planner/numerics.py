"""Numerical safety of the MILP: refuse inputs that make a solve meaningless, verify what a solve claims.

HiGHS works to absolute tolerances (feasibility 1e-7, integrality 1e-6). A
demand bound of 1e15 req/s used as a big-M lets an integer 1e-6 away from 0
carry a billion requests, and the plan then claims demand that no replica
serves. Two guards, both cheap:

- `check_milp_input`: before building the model, every coefficient the model
  uses (demands after edge factors, profiled throughputs and latencies, SLOs)
  is finite and inside a range where those tolerances are negligible;
  otherwise an InputError names the system and the field and states the
  range.
- `check_capacity_covers_demand`: after the solve, every task's rounded
  replicas carry the demand the plan says it serves (within 1e-6 relative),
  and every system's sources get what the system is said to serve;
  otherwise NumericalError, never a plan.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tessera.planner.input_files import InputError, shorten

if TYPE_CHECKING:
    from tessera.planner.milp import MilpInput
    from tessera.planner.model import SystemSpec
    from tessera.planner.plan import Plan

MAX_TASK_DEMAND_RPS = 1e7
MIN_POSITIVE_DEMAND_RPS = 1e-3
MAX_THROUGHPUT_RPS = 1e7
MIN_THROUGHPUT_RPS = 1e-4
MAX_LATENCY_MS = 3.6e6
MIN_LATENCY_MS = 1e-3
REL_TOL = 1e-6


class NumericalError(InputError):
    """A solve whose answer does not hold up when checked: its input's numbers span too wide a range."""


def check_milp_input(data: MilpInput) -> None:
    """Refuse a MilpInput whose coefficients would make a solve numerically meaningless."""
    for system in data.systems:
        try:
            _check_system(system, data)
        except InputError as error:
            raise type(error)(str(error), system=system.name) from None


def _check_system(system: SystemSpec, data: MilpInput) -> None:
    from tessera.planner.milp import demand_bound

    where = f"system {shorten(system.name)}"
    _finite_in(system.demand_rps, 0, MAX_TASK_DEMAND_RPS, f"{where}: demandRequestsPerSecond", "req/s")
    if 0 < system.demand_rps < MIN_POSITIVE_DEMAND_RPS:
        raise InputError(f"{where}: demandRequestsPerSecond {system.demand_rps:g} is below {MIN_POSITIVE_DEMAND_RPS:g} "
                         "req/s; expected 0 or at least that")
    _finite_in(system.slo.latency_ms, MIN_LATENCY_MS, MAX_LATENCY_MS, f"{where}: slo.latencyMilliseconds", "ms")
    for i, edge in enumerate(system.edges):
        for variant_name, factor in [(None, edge.factor), *edge.factor_by_variant.items()]:
            field = f"edges[{i}].factor" + (f"ByVariant.{shorten(variant_name)}" if variant_name else "")
            _finite_in(factor, 0, MAX_TASK_DEMAND_RPS, f"{where}: {field}", "")
    for task in system.tasks:
        for j, variant in enumerate(task.variants):
            _finite_in(variant.accuracy, 0, math.inf, f"{where}: task {shorten(task.name)}: variants[{j}].accuracy", "")
    for task_name, bound in demand_bound(system, data.variants).items():
        if not bound <= MAX_TASK_DEMAND_RPS:
            raise InputError(
                f"{where}: task {shorten(task_name)} may see {bound:.3g} req/s (demandRequestsPerSecond x the edge factors on its "
                f"paths), over the limit of {MAX_TASK_DEMAND_RPS:g} req/s that keeps the MILP's numbers "
                "meaningful: lower demandRequestsPerSecond or the edges' factors")
    for c in data.candidates:
        # A profile too slow for the SLO never enters the model: it is no input error to have one.
        if c.system != system.name or (math.isfinite(c.latency_ms) and 2 * c.latency_ms > system.slo.latency_ms):
            continue
        where = (f"system {shorten(c.system)}: task {shorten(c.task)}: variant {shorten(c.variant)} on "
                 f"{c.segment}, batch {c.batch} (a given, measured or estimated profile)")
        _finite_in(c.throughput_rps, MIN_THROUGHPUT_RPS, MAX_THROUGHPUT_RPS, f"{where}: throughputRequestsPerSecond", "req/s")
        _finite_in(c.latency_ms, MIN_LATENCY_MS, MAX_LATENCY_MS, f"{where}: latencyMilliseconds", "ms")


def _finite_in(value: float, low: float, high: float, what: str, unit: str) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise InputError(f"{what}: {value:g} {unit}".rstrip() + f"; expected a finite number in [{low:g}, {high:g}]")


def check_capacity_covers_demand(plan: Plan, systems: list[SystemSpec]) -> None:
    """Every task's replicas carry its demand, and every system's sources get what it is said to serve."""
    utilisation = 1 / (1 + plan.headroom)
    for task in plan.tasks:
        capacity = sum(c.replicas * c.segment_throughput_rps for c in task.configs) * utilisation
        load = sum(c.load_rps for c in task.configs)
        if not (_at_least(capacity, task.demand_rps) and _close(load, task.demand_rps)):
            raise NumericalError(
                system=task.system, message=f"system {shorten(task.system)}: task {shorten(task.task)}: the solver's plan routes {load:.6g} "
                f"req/s to capacity for {capacity:.6g} req/s but claims {task.demand_rps:.6g} req/s served: its "
                "numbers span too wide a range for the solver's tolerances; bring demand and edge factors "
                "closer to the profiled throughputs")
    tasks = {(t.system, t.task): t for t in plan.tasks}
    served = {s.system: s.served_rps for s in plan.systems}
    for system in systems:
        for source in system.sources:
            source_task = tasks.get((system.name, source))
            received = source_task.demand_rps if source_task else 0.0
            if not _close(received, served.get(system.name, 0.0)):
                raise NumericalError(
                    system=system.name, message=f"system {shorten(system.name)}: the solver's plan claims {served.get(system.name, 0.0):.6g} "
                    f"req/s served but its source task {shorten(source)} receives {received:.6g} req/s: its numbers "
                    "span too wide a range for the solver's tolerances")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b), 1.0)


def _at_least(a: float, b: float) -> bool:
    return a >= b - REL_TOL * max(abs(a), abs(b), 1.0)
