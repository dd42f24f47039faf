"""Why a plan does not serve all demand, in words a user can act on."""

from __future__ import annotations

import itertools
import math

from tessera.planner.candidates import Candidate
from tessera.planner.model import SystemSpec
from tessera.planner.plan import Plan

MAX_VARIANT_COMBINATIONS = 20_000


def diagnose(plan: Plan, systems: list[SystemSpec], candidates: list[Candidate],
             levels: dict[str, list[float]]) -> list[str]:
    messages = []
    for summary, system in zip(plan.systems, systems, strict=True):
        if summary.served_rps >= summary.demand_rps * (1 - 1e-6):
            continue
        messages.append(
            f"{system.name}: the pool of {plan.pool_gpus} x {plan.gpu} serves at most "
            f"{rate(summary.served_rps)} of {rate(summary.demand_rps)} requests/s "
            f"({share(summary.served_rps / max(summary.demand_rps, 1e-9))})"
        )
        messages += _why(system, [c for c in candidates if c.system == system.name], levels[system.name])
    return messages


def rate(rps: float) -> str:
    """Requests/s to one decimal, or to three significant digits below 1: a small rate never reads 0.0."""
    if rps == 0:
        return "0"
    return f"{rps:.1f}" if abs(rps) >= 1 else f"{rps:.3g}"


def share(fraction: float) -> str:
    """A percentage that reads 0% only when nothing is served."""
    percent = 100 * fraction
    if percent == 0 or percent >= 1:
        return f"{percent:.0f}%"
    return f"{percent:.2g}%"


def _fastest(candidates: list[Candidate], task: str, variant: str | None = None) -> float:
    """The lowest stage latency any configuration reaches: twice its batch latency."""
    return min(
        (2 * c.latency_ms for c in candidates if c.task == task and variant in (None, c.variant)),
        default=math.inf,
    )


def _why(system: SystemSpec, candidates: list[Candidate], levels: list[float]) -> list[str]:
    unservable = [t.name for t in system.tasks if not any(c.task == t.name for c in candidates)]
    if unservable:
        return [f"{system.name}: task {t} has no variant that fits in memory on any segment or has a profile"
                for t in unservable]
    if len(levels) == 1:
        fastest_by_task = {t.name: _fastest(candidates, t.name) for t in system.tasks}
        too_slow = [(task, fastest) for task, fastest in fastest_by_task.items() if fastest > levels[0]]
        if too_slow:
            return [f"{system.name}: with the SLO split equally over the tasks (feature T off) task {task} gets "
                    f"{levels[0]:.1f} ms but its fastest configuration takes {fastest:.1f} ms; enable T or "
                    "relax the SLO" for task, fastest in too_slow]
    slo = system.slo.latency_ms
    worst_path, worst = max(
        ((path, sum(_fastest(candidates, t) for t in path)) for path in system.paths), key=lambda p: p[1])
    if worst > slo:
        return [f"{system.name}: no configuration meets the latency SLO: the fastest choices take "
                f"{worst:.1f} ms on path {' -> '.join(worst_path)} (SLO {slo:.0f} ms); relax the SLO "
                "or profile faster segments"]
    best = _best_accuracy_within_latency(system, candidates)
    messages = [f"{system.name}: fastest worst path {worst:.1f} ms of {slo:.0f} ms"]
    if best is not None:
        messages.append(f"{system.name}: highest accuracy reachable within the latency SLO is {best:.3f} "
                        f"(SLO {system.slo.accuracy:.3f})")
    messages.append(f"{system.name}: add GPUs or lower the demand to serve the rest")
    return messages


def _best_accuracy_within_latency(system: SystemSpec, candidates: list[Candidate]) -> float | None:
    options = [[v.name for v in t.variants] for t in system.tasks]
    if math.prod(len(o) for o in options) > MAX_VARIANT_COMBINATIONS:
        return None
    names = [t.name for t in system.tasks]
    best = None
    for combo in itertools.product(*options):
        choice = dict(zip(names, combo))
        fast_enough = all(
            sum(_fastest(candidates, t, choice[t]) for t in path) <= system.slo.latency_ms
            for path in system.paths
        )
        if fast_enough:
            accuracy = min(system.path_accuracy(path, choice) for path in system.paths)
            best = accuracy if best is None else max(best, accuracy)
    return best
