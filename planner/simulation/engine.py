"""Run a deployment under a demand trace: stage by stage, in task-graph order.

Stages interact only through the requests one hands the next (every replica
is its own GPU segment with its own queue), so the simulation runs a whole
stage at a time, parents before children: a stage's arrivals are its
parents' completion times, fanned out. Within a stage the compiled kernel
(replica_kernel) walks each replica's arrivals in time order. This is the
same event order a global event queue would give, at array speed.

Fan-out: a request finishing a stage sends a Poisson-distributed number of
requests (mean: the edge's planned factor) to each child stage. A source
request ends when the last request it caused ends; it is dropped when any
of them is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, cast

import numpy as np

from tessera.planner.dropping import doomed, least_time_after, needed_s
from tessera.planner.simulation.entities import Deployment, SystemRoutes
from tessera.planner.simulation.policies import Batcher, Dispatch, Policies, assign_replicas
from tessera.planner.simulation.replica_kernel import fold_latest, run_replicas, seed_kernel
from tessera.planner.simulation.workloads import RateTrace, poisson_arrivals


@dataclass
class StageRecord:
    """Every request one stage saw: its source request, arrival and completion (NaN: dropped)."""

    stage: int
    origin: np.ndarray
    arrival: np.ndarray
    done: np.ndarray


@dataclass
class SystemRun:
    routes: SystemRoutes
    source_arrival: np.ndarray
    finish: np.ndarray  # when the source request's last descendant finished; NaN if any was dropped
    stages: list[StageRecord]

    @property
    def latency(self) -> np.ndarray:
        return cast(np.ndarray, self.finish - self.source_arrival)


@dataclass
class RunOutput:
    deployment: Deployment
    trace: RateTrace
    policies: Policies
    systems: list[SystemRun]
    busy_s: np.ndarray  # per replica: process-seconds spent running batches


def run(deployment: Deployment, trace: RateTrace, policies: Policies = Policies(),
        progress: Callable[[int], None] | None = None,
        source_arrivals: dict[str, np.ndarray] | None = None) -> RunOutput:
    """Simulate the deployment under the trace; `progress(stages_done)` after each stage.

    `source_arrivals` replaces a system's Poisson arrivals by given (sorted)
    times, as when replaying what a load generator sent to a real server.
    """
    rng = np.random.default_rng(policies.seed)
    seed_kernel(policies.seed)
    busy_s = np.zeros(len(deployment.batch))
    runs = []
    for routes in deployment.systems:
        given = (source_arrivals or {}).get(routes.name)
        arrivals = given if given is not None else poisson_arrivals(trace, routes.demand_rps, rng)
        runs.append(_run_system(deployment, routes, arrivals, policies, rng, busy_s, progress))
    return RunOutput(deployment, trace, policies, runs, busy_s)


def _run_system(deployment: Deployment, routes: SystemRoutes, source_arrival: np.ndarray, policies: Policies,
                rng: np.random.Generator, busy_s: np.ndarray, progress: Callable[[int], None] | None) -> SystemRun:
    everyone = np.arange(source_arrival.size, dtype=np.int64)
    pending: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {s: [] for s in routes.stages}
    finish = source_arrival.copy()
    records = []
    hop_s = policies.hop_ms * 1e-3
    after = least_time_after(routes.stages, {s: [c for c, _ in deployment.stages[s].children] for s in routes.stages},
                             {s: deployment.stages[s].single_s for s in routes.stages}, hop_s)
    for position in routes.stages:
        stage = deployment.stages[position]
        if stage.is_source:
            origin, arrival = everyone, source_arrival
        else:
            origin, arrival = _gather(pending.pop(position))
        deadline = (source_arrival[origin] + routes.slo_s if policies.early_dropping
                    else np.full(arrival.size, np.inf))
        done = _run_stage(deployment, stage.replicas, stage.weights, arrival, deadline, after[position], policies,
                          rng, busy_s)
        fold_latest(origin, done, finish)
        records.append(StageRecord(position, origin, arrival, done))
        finished = ~np.isnan(done)
        for child, factor in stage.children:
            copies = rng.poisson(factor, int(finished.sum()))
            pending[child].append((np.repeat(origin[finished], copies), np.repeat(done[finished], copies)))
        if progress:
            progress(1)
    return SystemRun(routes, source_arrival, finish, records)


def _gather(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    origin = np.concatenate([o for o, _ in parts])
    arrival = np.concatenate([a for _, a in parts])
    order = np.argsort(arrival, kind="stable")
    return origin[order], arrival[order]


def _run_stage(deployment: Deployment, replicas: np.ndarray, weights: np.ndarray, arrival: np.ndarray,
               deadline: np.ndarray, after_s: float, policies: Policies, rng: np.random.Generator,
               busy_s: np.ndarray) -> np.ndarray:
    """Completion times of a stage's requests (sorted by arrival), NaN where dropped.

    `deadline`: the source requests' arrival + SLO (inf without early
    dropping); `after_s`: the least time the stages after this one need.
    """
    local = assign_replicas(arrival.size, weights, policies, rng)
    hop_s = policies.hop_ms * 1e-3
    # On arrival, before the hop: the frontend's rule at the frontend's point (tessera.frontend).
    dropped = np.asarray(doomed(deadline - arrival, needed_s(deployment.latency_s[replicas[local], 1], after_s, hop_s),
                                policies.drop_margin_ms * 1e-3))
    by_replica = np.argsort(local, kind="stable")  # keeps arrival order within a replica
    counts = np.bincount(local, minlength=len(replicas))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    grouped_done = np.empty(arrival.size)
    at_batcher = arrival + hop_s
    run_replicas(at_batcher[by_replica], (deadline - after_s)[by_replica], dropped[by_replica], offsets,
                 replicas.astype(np.int64),
                 deployment.batch, deployment.processes, deployment.batching_delay_s, deployment.latency_s,
                 policies.sigma, policies.dispatch is Dispatch.ROUND_ROBIN,
                 policies.batcher is Batcher.WHEN_FREE, grouped_done, busy_s)
    done = np.empty(arrival.size)
    done[by_replica] = grouped_done
    return done
