"""Pure decisions about a pool's solves (docs/operator.md, "What it does" step 1): when one starts, is replaced or
runs on, and when a system is too large to plan.

Pools are solved at the same time in worker processes (pool_solves.py runs them); per pool at most one solve runs.
A change of its inputs replaces the running solve, but never two in a row: the solve that replaced a cancelled one
runs to its end, its plan is stored under the inputs it read, and the newer inputs are planned right after. So a
stream of edits faster than a solve cannot keep a pool from ever being planned.

A system exceeds the solver's caps (its memory cap, or its time limit without a plan) on every try when the pool's
solve exceeded them and the system alone did too: it is then left out of the pool's plan (`TooLargeToPlan`) with
its size, tasks x variants, so the other systems of its pool are served, and then the size measured to fit under
the same caps (a solve of its own after the pool's plan is stored). The record is kept with the pool's stored
plan, by spec hash and caps: a changed spec, or other caps, is planned again. Where the pool's solve ran out of
time without a plan and every system alone ended within the caps, none is too large: the pool's solve is tried
once more at twice the time limit (longer_limit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from tessera.operator.api import status as st
from tessera.operator.gpus.discovery import NodeFacts
from tessera.operator.profiling.jobs import in_transition
from tessera.operator.reconcile.decide import about, serves_nothing
from tessera.planner.contract import Infeasible, InvalidInput, Planned, PlannerFailed, TimeLimit
from tessera.planner.model import SystemSpec

Outcome = Planned | TimeLimit | Infeasible | InvalidInput | PlannerFailed


# -- a pool's solve ---------------------------------------------------------------

@dataclass(frozen=True)
class RunningSolve:
    inputs: str
    """The hash of the inputs the solve plans (the one its plan is stored under)."""
    follows_cancel: bool
    """It replaced a cancelled solve: it runs to its end, whatever changes meanwhile."""


class Step(Enum):
    WAIT = "wait"
    """A solve runs: let it run (its inputs are current, or it runs to its end after a cancelled one)."""
    START = "start"
    """No solve runs: start one for the current inputs."""
    REPLACE = "replace"
    """The running solve plans inputs that no longer are: cancel it and start one that runs to its end."""


def next_solve(running: RunningSolve | None, inputs: str) -> Step:
    """What to do with a pool's solve, given the one running (None) and the pool's current inputs."""
    if running is None:
        return Step.START
    if running.inputs == inputs or running.follows_cancel:
        return Step.WAIT
    return Step.REPLACE


# -- a system the planner cannot use -----------------------------------------------

def settling(nodes: Iterable[NodeFacts]) -> list[str]:
    """The pool's nodes tessera asked mig-manager for a layout that it has not answered yet: a solve sees their
    GPUs as Unknown (planner/nodes.py trusts a layout only on `success`) for that while."""
    return sorted(node.name for node in nodes if in_transition(node))


def settling_message(nodes: list[str]) -> str:
    """Why a solve that found the pool short while `nodes` settle judged no system: a failed solve, tried again."""
    return (f"the GPUs of {', '.join(nodes)} are being re-partitioned (their layouts unknown to the solve): no "
            "system is judged on the capacity left meanwhile; solved again after --resync")


def alone_verdict(outcome: Outcome, key: str, settling: list[str]) -> tuple[str, str] | None:
    """A system solved alone on the pool: (reason, why) where the planner refuses its spec, or where it serves
    nothing (SloUnreachable); else None. Never SloUnreachable while nodes of the pool settle (`settling`): alone
    on the capacity left meanwhile says nothing of the pool's, and the verdict, stored by spec hash, would outlast
    it (the inputs hash covers the pool's GPUs, not their layouts: nothing would plan the system again)."""
    if isinstance(outcome, InvalidInput):
        return st.INVALID_SPEC, outcome.reason
    if settling:
        return None
    if isinstance(outcome, Infeasible) and outcome.plan is None:
        return st.SLO_UNREACHABLE, "; ".join([outcome.reason, *about(outcome.diagnosis, key)])
    if isinstance(outcome, (Planned, TimeLimit, Infeasible)) and outcome.plan is not None \
            and serves_nothing(outcome.plan, key):
        return st.SLO_UNREACHABLE, "; ".join(about(outcome.plan.diagnosis, key)) or "no choice meets the SLOs"
    return None


# -- a system too large to plan ---------------------------------------------------

def still_invalid(record: dict[str, str], spec_hash: str | None, caps: str) -> bool:
    """A system's record of being left out (the pool's stored `invalid`) holds while its spec is the one recorded;
    one too large to plan only under the same caps. Who may use a pool is decided afresh every reconcile."""
    if record["hash"] != spec_hash or record["reason"] == st.POOL_NOT_ALLOWED:
        return False
    return record["reason"] != st.TOO_LARGE_TO_PLAN or record.get("caps") == caps


def exceeds_caps(outcome: Outcome) -> bool:
    """The solve ran out of the solver's memory or time without a plan: a worker that died or ran out of its memory
    cap (a planner failure the checker did not find), or a time limit without a plan (HiGHS also stops this way at
    its memory limit)."""
    if isinstance(outcome, PlannerFailed):
        return not outcome.errors
    return isinstance(outcome, TimeLimit) and outcome.plan is None


def fits_caps(outcome: Outcome) -> bool:
    """The solve ended within the solver's caps: a time limit, even with a plan, is not a size that fits."""
    return not isinstance(outcome, TimeLimit) and not exceeds_caps(outcome)


def too_large(pool_solve: Outcome, alone: dict[str, Outcome]) -> set[str]:
    """The systems that exceeded the caps on every try: the pool's solve did, and each of these did alone."""
    if not exceeds_caps(pool_solve):
        return set()
    return {key for key, outcome in alone.items() if exceeds_caps(outcome)}


RETRY_LIMIT_FACTOR = 2.0
"""How much longer the one more try of a pool's solve may run (longer_limit)."""


def longer_limit(pool_solve: Outcome, alone: dict[str, Outcome], limit_s: float) -> float | None:
    """The time limit of one more try of the pool's solve, or None: where it ran out of time without a plan while
    every system alone ended within the caps, no system is too large: the systems together, or a loaded machine
    (the limit is wall-clock time), need more time, and retrying with the same limit at the next resync ran out
    the same way, solve after solve (20 systems on 100 nodes at load 9: bench/README.md, operator_speed)."""
    if not isinstance(pool_solve, TimeLimit) or pool_solve.plan is not None or not alone:
        return None
    return limit_s * RETRY_LIMIT_FACTOR if all(fits_caps(outcome) for outcome in alone.values()) else None


@dataclass(frozen=True, order=True)
class Size:
    tasks: int
    variants: int
    """The most variants of any one task."""

    def __str__(self) -> str:
        return f"{self.tasks} tasks x {self.variants} variants"


def size_of(spec: SystemSpec) -> Size:
    return Size(len(spec.tasks), max(len(t.variants) for t in spec.tasks))


def next_probe(size: Size, tried: dict[Size, bool]) -> Size | None:
    """The next smaller size to solve alone, or None once the size that fits is known (or that none does).

    From its tasks with one variant each, up: the variants double while the size fits; where even one variant each
    does not fit, the tasks halve (one variant each) until a size fits. `tried`: each size solved so far, in order,
    and whether it fit. The system's own size is never tried again: it did not fit.
    """
    if not tried:
        first = Size(size.tasks, 1)
        return first if first != size else _fewer_tasks(size)
    last = list(tried)[-1]
    if tried[last]:
        if last.tasks < size.tasks:
            return None  # tasks were halved: this many fit with one variant each
        bigger = Size(size.tasks, min(2 * last.variants, size.variants))
        return bigger if bigger != size else None
    return None if fitting(tried) is not None else _fewer_tasks(last)


def _fewer_tasks(size: Size) -> Size | None:
    return Size(size.tasks // 2, 1) if size.tasks > 1 else None


def fitting(tried: dict[Size, bool]) -> Size | None:
    """The largest size tried that fit."""
    return max((s for s, fit in tried.items() if fit), default=None)


def cut_to(spec: SystemSpec, size: Size) -> SystemSpec:
    """The spec with its first `size.tasks` tasks and the first `size.variants` variants of each (their edges and
    profiles with them): a smaller system of the same kind, to measure what fits."""
    tasks = [t.model_copy(update={"variants": t.variants[:size.variants]}) for t in spec.tasks[:size.tasks]]
    variants = {t.name: {v.name for v in t.variants} for t in tasks}
    edges = [e.model_copy(update={"factor_by_variant": {v: f for v, f in e.factor_by_variant.items()
                                                        if v in variants[e.source]}})
             for e in spec.edges if e.source in variants and e.target in variants]
    profiles = [p for p in spec.profiles if p.variant in variants.get(p.task, set())]
    return spec.model_copy(update={"tasks": tasks, "edges": edges, "profiles": profiles})


MEASURING = "measuring the size that fits under them"


def awaits_measurement(reason: str, message: str) -> bool:
    """A system left out as too large whose fitting size is not measured yet: the pool's plan is stored without it
    first, and a solve of its own measures the size afterwards (also after a restart: the message is stored)."""
    return reason == st.TOO_LARGE_TO_PLAN and MEASURING in message


def too_large_message(size: Size, tried: dict[Size, bool] | None, caps: str) -> str:
    """What to change: the system's size and the size measured to fit, alone, under the same caps (`tried` None:
    not measured yet)."""
    fits = fitting(tried or {})
    if tried is None:
        told = MEASURING
    elif fits is not None:
        told = (f"{fits} ({fits.tasks * fits.variants} task variants) plans alone under them: split the system or "
                "drop variants to about that size")
    else:
        told = f"not even {min(tried, default=Size(1, 1))} plans alone under them: raise the solver's memory cap"
    return (f"{size} ({size.tasks * size.variants} task variants) exceeds the solver's caps ({caps}) on every try, "
            f"so the pool is planned without it; {told}")
