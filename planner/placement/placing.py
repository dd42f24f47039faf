"""Placement of an adapter pool: tessera's, the baselines', the lower bound, the twin check."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from .bound import lower_bound
from .model import GateLog, Placement, PlacementProblem, PlacementReport
from .packing import STRATEGIES, run_strategy
from .replace import replace_adapters
from .server import ServerModel
from .twin_check import check_placement, require_checkable
from .twin_gate import twin_gate

BASELINES = tuple(s for s in STRATEGIES if s != "tessera")


def place(problem: PlacementProblem, strategy: str = "tessera", model: ServerModel | None = None,
          seed: int = 0) -> Placement:
    """One strategy's placement, described by the predictors (no twin check). The pool's server limit
    binds tessera's placement (adapters beyond it are reported unplaced); baselines show how many
    servers they would use."""
    started = time.perf_counter()
    model = model or ServerModel(problem)
    bound = lower_bound(problem, model).servers
    servers = run_strategy(strategy, model, problem, bound, seed).described(model)
    limit = problem.limits.max_servers if strategy == "tessera" else None
    unplaced: tuple[str, ...] = ()
    if limit is not None and len(servers) > limit:
        unplaced = tuple(name for s in servers[limit:] for name in s.adapters)
        servers = servers[:limit]
    return Placement(strategy=strategy, model=model.profile.model, servers=servers, unplaced=unplaced,
                     place_s=time.perf_counter() - started)


def plan_placement(problem: PlacementProblem, twin_check: bool = True, baselines: Sequence[str] = BASELINES,
                   workers: int = 1, seed: int = 0, previous: Placement | None = None,
                   progress: Callable[[str, int, int], None] | None = None, gate: bool = True) -> PlacementReport:
    """tessera's placement (a re-placement of ``previous`` when given), each baseline's in the same
    code path, the lower bound, and (unless ``twin_check`` is off) one simulated hour of every server
    of every placement, then tessera's split and consolidated by the twin (``twin_gate``, unless
    ``gate`` is off or it re-places; what it spent is the report's ``gate``).
    ``progress(strategy, servers_done, servers_total)`` is called as twin checks finish."""
    model = ServerModel(problem)
    gate_log: GateLog | None = None
    replacement = replace_adapters(problem, previous, model) if previous is not None else None
    tessera = replacement.placement if replacement else place(problem, "tessera", model, seed)
    placements = [tessera, *(place(problem, strategy, model, seed) for strategy in baselines)]
    if twin_check:
        for placement in placements:  # every one before any is simulated
            require_checkable(placement, problem.adapters)
        total = sum(p.servers_used for p in placements)
        done = 0

        def advance(strategy: str) -> Callable[[int], None]:
            def step(k: int) -> None:
                nonlocal done
                done += k
                if progress:
                    progress(strategy, done, total)
            return step

        placements = [check_placement(p, problem.adapters, model.profile, problem.bound, seed, workers,
                                      advance(p.strategy)) for p in placements]
        if gate and replacement is None:  # a re-placement keeps its running servers; the gate would renumber them

            def one_more(k: int) -> None:
                nonlocal total
                total += k
                advance("tessera, split and merge")(k)

            placements[0], gate_log = twin_gate(placements[0], problem, model, seed, one_more, workers=workers)
    return PlacementReport(
        problem_name=problem.name, model=model.profile.model, adapters=len(problem.adapters),
        rate_rps=sum(a.rate_rps for a in problem.adapters), placement=placements[0],
        baselines=tuple(placements[1:]), lower_bound=lower_bound(problem, model),
        notes=_notes(problem, model) + _gate_notes(tessera, placements[0], gate_log),
        replacement=dataclasses.replace(replacement, placement=placements[0]) if replacement else None, gate=gate_log)


def _gate_notes(packed: Placement, gated: Placement, log: GateLog | None) -> tuple[str, ...]:
    if log is None:
        return ()
    notes = []
    if gated.servers_used != packed.servers_used:
        notes.append(f"the twin gate changed the predictors' {packed.servers_used} servers to {gated.servers_used}: "
                     f"every server kept passes the twin, whatever the predictors say of it")
    if log.hours_ran_out:
        notes.append(f"the twin gate spent its {log.max_hours} simulated hours: a move or split it did not check "
                     f"was not made, so fewer servers may serve the pool")
    return tuple(notes)


def _notes(problem: PlacementProblem, model: ServerModel) -> tuple[str, ...]:
    notes = []
    if problem.bound.p99_ttft_ms is not None:
        notes.append("the p99 time-to-first-token bound is judged by the twin check only; the predictors do not "
                     "predict latency, so placement does not pack against it")
    if problem.gpu and problem.gpu.lower() != model.profile.gpu.lower():
        notes.append(f"the twin profile {model.profile.model} was measured on {model.profile.gpu}, the pool runs "
                     f"{problem.gpu}: predictions assume that GPU's speed and memory")
    return tuple(notes)
