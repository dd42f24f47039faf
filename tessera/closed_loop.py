"""The closed loop: the operator's own demand decisions and re-plans on a simulated clock, with the serving
simulation as the cluster (issue 31).

What runs is the operator's code, called as the operator calls it, not a copy:

- **Demand.** Every `poll_s` (DemandSettings.poll_s) each system's offered rate over the frontend template's
  window (templates.RATE_WINDOW) is read: a Poisson count of the trace's arrivals in the window, which is what
  the frontend's request counter shows (it counts every outcome, so overload does not lower it). The
  operator's `hysteresis.decide`, with the operator's default Windows, turns the reading into the rate to plan
  for; the rate is rounded as planning.py rounds what status keeps.
- **Re-plan.** When a planned rate moved, the pool re-plans as `Reconciler.solve` does: `resize_replicas` first
  (the replicas-only path of a demand-only change), else `solve_request` on a PlanRequest of the pool's nodes
  with their current layouts and the running plan (the function the planner's worker process runs, here
  in-process). Identical requests are answered from a cache keyed by the request (also on disk, so a rerun
  of a benchmark solves nothing it solved before). The simulated clock charges each re-plan the build and
  solve time the plan reports (the replicas-only path its measured time): the running plan serves meanwhile.
  The solver's wall time is counted apart.
- **Changes**, as docs/operator.md, "Re-partitioning a serving node", makes them: the new plan's replicas on
  nodes whose layout stays serve at once (server start-up is not modelled); nodes that serve nothing are
  partitioned together by mig-manager and serve their new replicas `reconfigure_s` later (the planner's own
  change-cost duration, PlannerOptions.reconfigure_s); then each serving node whose layout changes, at most
  `max_changing_nodes` (OperatorSettings, 1) at a time, once the replacements elsewhere serve: its old replicas
  stop for `reconfigure_s` (the capacity lost), the nodes still queued keep serving their old replicas, and
  the node serves its new ones after. A re-partition records itself in the hysteresis state of the systems
  it stopped (`record_repartition`, as planning.py does when a system's layout leaves Applied), which holds
  their scale-downs for the re-partition window. No re-plan starts while a change is in progress (the
  changing node's GPUs are Unknown to a planner until mig-manager's success); the decisions made meanwhile
  are planned for when it ends.
- **Serving.** The plan that serves (or the mix of old and new replicas during a change) is simulated by the
  serving simulation between two changes, twice: without and with the frontend's early dropping
  (tessera.planner.dropping.doomed). Each such piece starts with empty queues: a backlog does not carry over
  a change. A system the serving plan gives no replica counts every arrival of the piece as late and dropped.
"""

from __future__ import annotations

import hashlib
import pickle
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from tessera.operator.demand import hysteresis as hy
from tessera.operator.demand.settings import DemandSettings
from tessera.operator.demand.templates import RATE_WINDOW
from tessera.operator.reconcile.serving_nodes import Rules
from tessera.operator.reconcile.solve_decide import RETRY_LIMIT_FACTOR
from tessera.planner.catalog import Layout, gpu_product
from tessera.planner.change_cost import nodes_changed, serving_nodes
from tessera.planner.contract import PlanRequest, SystemInput, solve_request
from tessera.planner.features import Features
from tessera.planner.model import SystemSpec
from tessera.planner.nodes import NodePool, NodeState, as_layout, pool_gpus
from tessera.planner.plan import Plan, TaskPlan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.profiles import ProfileStore
from tessera.planner.resize import resize_replicas
from tessera.planner.simulation import engine
from tessera.planner.simulation.entities import build_deployment
from tessera.planner.simulation.metrics import capacity_rps
from tessera.planner.latency import Routing
from tessera.planner.simulation.policies import Balancing, Policies
from tessera.planner.simulation.workloads import RateTrace
from tessera.planner.solve import PlannerOptions

NAMESPACE = "loop"
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
LATENCY_EDGES_S = np.logspace(-3, 2, 251)
"""Latency histogram bins (1 ms to 100 s) of each time bin, for its percentiles."""


def window_seconds(window: str) -> float:
    """A PromQL range ('1m', '30s') in seconds."""
    return float(window[:-1]) * {"s": 1, "m": 60, "h": 3600}[window[-1]]


def _demand_windows() -> hy.Windows:
    defaults = DemandSettings()
    return hy.Windows(defaults.stabilization_s, defaults.repartition_window_s, defaults.scale_down_step)


@dataclass(frozen=True)
class LoopSettings:
    """The loop's clock and cluster; every default is the operator's own."""

    poll_s: float = DemandSettings().poll_s
    rate_window_s: float = window_seconds(RATE_WINDOW)
    windows: hy.Windows = field(default_factory=_demand_windows)
    max_changing_nodes: int = Rules().max_changing
    gpus_per_node: int = 1
    bin_s: float = 60.0
    seed: int = 0
    # Counterfactuals for the attribution of violations (bench/closed_loop_sweep.py); the defaults model the operator.
    charge_solve_time: bool = True
    """False: a re-plan's plan serves from the reading that asked for it (what instant solves would give)."""
    change_s: float | None = None
    """Seconds a node's layout change takes; None: the planner's reconfigure_s (0: changes lose no capacity)."""
    start_from_trace: bool = False
    """True: the first plan is for the trace's first rate window, not the specs' rate (no cold start)."""


def latency_model(options: PlannerOptions) -> str:
    """Which latency model the plans use, for every report (issue 24 has not changed the default yet)."""
    if not options.queueing:
        return "no queueing wait (today's default)"
    return (f"queueing wait (--queueing), routing {Routing(options.routing).value}, latency spread "
            f"{options.latency_spread:g}")


def policies_for(options: PlannerOptions) -> Policies:
    """The simulation's routing for the routing the plans assume: per request in proportion to planned load (the
    frontend of "One endpoint per system"), else a plain Service's connections pinned to replicas."""
    if Routing(options.routing) is Routing.PER_REQUEST:
        return Policies(balancing=Balancing.RANDOM)
    return Policies(balancing=Balancing.PER_CONNECTION, connections=options.connections)


# -- the re-plan ----------------------------------------------------------------------

class NoFirstPlan(ValueError):
    """The loop cannot start: no plan for the specs' demand (`answer`: the outcome's kind, e.g. infeasible)."""

    def __init__(self, answer: str) -> None:
        super().__init__(f"no first plan for the specs' demand ({answer})")
        self.answer = answer


@dataclass
class Replan:
    """One re-plan's answer: the plan (None: none, the running plan stays), the seconds the clock charges."""

    plan: Plan | None
    charged_s: float
    kind: str  # "replicas-only", "solve" or "cached solve"
    answer: str  # the outcome's kind


class Replanner:
    """The operator's re-plan of a pool: replicas-only first, then the full solve; identical requests once."""

    def __init__(self, options: PlannerOptions, features: Features, cache_dir: Path | None = None) -> None:
        self.options, self.features, self.cache_dir = options, features, cache_dir
        self.cache: dict[str, tuple[Plan | None, float, str]] = {}
        self.stores: dict[str, tuple[ProfileStore, float]] = {}
        self.solver_wall_s = 0.0
        self.solves = 0
        self.cache_hits = 0

    def replan(self, specs: list[SystemSpec], pool: NodePool, current: Plan | None, demand_moved: bool) -> Replan:
        if current is not None and demand_moved:
            store, build_s = self.profile_store(specs, pool.gpu)
            started = time.perf_counter()
            resized = resize_replicas(current, specs, pool, store, self.features, self.options)
            spent = time.perf_counter() - started
            self.solver_wall_s += spent
            if resized is not None:
                return Replan(resized, build_s + spent, "replicas-only", "planned")
        request = PlanRequest(systems=[SystemInput(namespace=NAMESPACE, name=s.name.split("/")[-1],
                                                   spec=s.model_copy(update={"name": s.name.split("/")[-1]}))
                                       for s in specs],
                              pool=pool, options=self.options, features=self.features, current=current)
        # the running plan's solver report (its timings) is no input of the solve: equal requests without it
        key = hashlib.sha256(request.model_dump_json(exclude={"current": {"solver"}}).encode()).hexdigest()
        cached = self.cache.get(key) or self._from_disk(key)
        if cached is not None:
            self.cache_hits += 1
            plan, charged, answer = cached
            return Replan(plan, charged, "cached solve", answer)
        started = time.perf_counter()
        outcome = solve_request(request)
        self.solver_wall_s += time.perf_counter() - started
        self.solves += 1
        plan = getattr(outcome, "plan", None)
        # The plan's own report; a solve without a plan took its time limit (a failure, at least that).
        charged = plan.solver.build_s + plan.solver.solve_s if plan is not None else self.options.time_limit_s
        self.cache[key] = (plan, charged, outcome.kind)
        self._to_disk(key, self.cache[key])
        return Replan(plan, charged, "solve", outcome.kind)

    def profile_store(self, specs: list[SystemSpec], gpu: str) -> tuple[ProfileStore, float]:
        """The profiles the replicas-only path resizes with, as planning.py builds them at every demand change, and
        the seconds the build took. Demand is no input of the profiles: the store is built once per systems (a
        simulated day re-plans hundreds of times, each build about a second here) and each re-plan is still
        charged the build's time, as the operator spends it."""
        key = hashlib.sha256("".join([gpu, *(s.model_dump_json(exclude={"demand_rps"}) for s in specs)]).encode()
                              ).hexdigest()
        if key not in self.stores:
            started = time.perf_counter()
            store = build_profile_store(specs, gpu, None, batches=self.options.batches)
            self.stores[key] = (store, time.perf_counter() - started)
            self.solver_wall_s += self.stores[key][1]
        return self.stores[key]

    def _from_disk(self, key: str) -> tuple[Plan | None, float, str] | None:
        path = self.cache_dir / f"{key}.pickle" if self.cache_dir else None
        if path is None or not path.exists():
            return None
        found: tuple[Plan | None, float, str] = pickle.loads(path.read_bytes())
        self.cache[key] = found
        return found

    def _to_disk(self, key: str, value: tuple[Plan | None, float, str]) -> None:
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            (self.cache_dir / f"{key}.pickle").write_bytes(pickle.dumps(value))


# -- what serves while nodes change ---------------------------------------------------

def node_layouts(plan: Plan) -> dict[tuple[str, int], dict[str, int]]:
    """(node, device) -> the layout the plan gives the GPU."""
    return {(g.node or "", g.device or 0): dict(g.layout) for g in plan.gpus}


def replicas_on(plan: Plan, nodes: set[str]) -> list[TaskPlan]:
    """The plan's tasks with only their replicas on `nodes` (each configuration's load in proportion)."""
    counts: Counter[tuple[str, str, int]] = Counter(
        (i.system, i.task, i.config) for g in plan.gpus if g.node in nodes for i in g.instances
        if i.system is not None and i.task is not None and i.config is not None)
    tasks = []
    for task in plan.tasks:
        configs = []
        for index, config in enumerate(task.configs):
            kept = counts[(task.system, task.task, index)]
            if kept:
                configs.append(config.model_copy(update={"replicas": kept,
                                                         "load_rps": config.load_rps * kept / config.replicas}))
        tasks.append(task.model_copy(update={"configs": configs}))
    return tasks


def serving_mix(new: Plan, new_nodes: set[str], old: Plan, old_nodes: set[str], steady: set[str]) -> Plan:
    """What serves while a change is under way, as one plan to simulate: the new plan's replicas on `new_nodes`
    (those done), the old plan's on `old_nodes` (queued, still on their old layout), and, make before break,
    the old replicas on the `steady` nodes (layout unchanged) of every task whose new replicas are not all up
    yet: their Deployments no plan wants keep serving until the task's planned ones are available.

    Two approximations: on a steady node the old and new replicas of different tasks are not checked against
    its instances (the operator lets the old one go first where they would not both fit: less capacity than
    counted here); a task whose old replicas run another variant than its new ones keeps only the new ones
    (the simulation runs one variant per task: less capacity than there is)."""
    waiting = {(t.system, t.task) for t in replicas_on(new, {g.node or "" for g in new.gpus} - new_nodes)
               if t.configs}
    old_tasks = {(t.system, t.task): t for t in replicas_on(old, old_nodes)}
    kept_tasks = {(t.system, t.task): t for t in replicas_on(old, steady) if (t.system, t.task) in waiting}
    tasks = []
    for task in replicas_on(new, new_nodes):
        for before in (old_tasks.get((task.system, task.task)), kept_tasks.get((task.system, task.task))):
            if before is None or not before.configs:
                continue
            if before.variant == task.variant:
                task = task.model_copy(update={"configs": task.configs + before.configs})
            elif not task.configs:
                task = before
        tasks.append(task)
    return new.model_copy(update={"tasks": tasks})


@dataclass
class Change:
    """One step of a change: from `start_s` the pool serves `serving`; `stopped`: the serving nodes it stops."""

    start_s: float
    serving: Plan
    stopped: list[str] = field(default_factory=list)
    lost_slices: int = 0


def change_steps(old: Plan, new: Plan, layouts: dict[tuple[str, int], dict[str, int]], pool: NodePool,
                 at_s: float, reconfigure_s: float, max_changing: int) -> tuple[list[Change], list[str], list[str]]:
    """The steps from `old` to `new` applied at `at_s` (docs/operator.md, part 2); the free nodes partitioned and
    the serving nodes re-partitioned."""
    wanted = {**layouts, **node_layouts(new)}
    nodes = {n.name for n in pool.nodes}
    moved = {node for (node, device), layout in wanted.items() if layouts.get((node, device), {}) != layout}
    serving = serving_nodes(old)
    chosen: dict[tuple[str | None, int | None], Layout] = {
        (node, device): as_layout(layout) for (node, device), layout in wanted.items()}
    repartitioned, _ = nodes_changed(pool_gpus(pool), chosen, serving)
    free = sorted(moved - set(repartitioned))
    steady = nodes - moved
    steps = [Change(at_s, serving_mix(new, steady, old, set(repartitioned), steady))]
    start = at_s + (reconfigure_s if free else 0.0)
    done = steady | set(free)
    if free:
        steps.append(Change(start, serving_mix(new, done, old, set(repartitioned), steady)))
    product = gpu_product(new.gpu)
    for first in range(0, len(repartitioned), max(1, max_changing)):
        group = repartitioned[first:first + max(1, max_changing)]
        queued = set(repartitioned[first + len(group):])
        lost = sum(product.profile(i.mig_profile).compute_slices for g in old.gpus if g.node in group
                   for i in g.instances if i.system is not None)
        steps.append(Change(start, serving_mix(new, done, old, queued, steady), group, lost))
        start += reconfigure_s
        done |= set(group)
    if repartitioned:
        steps.append(Change(start, new))
    return steps, free, repartitioned


# -- measurements -----------------------------------------------------------------------

class SystemTotals(BaseModel):
    system: str
    requests: int = 0
    late: int = 0
    dropped: int = 0
    late_with_dropping: int = 0
    unserved: int = 0

    @property
    def violation_pct(self) -> float:
        return 100 * self.late / max(self.requests, 1)

    @property
    def drop_pct(self) -> float:
        return 100 * self.dropped / max(self.requests, 1)


class Event(BaseModel):
    at_s: float
    what: str  # "re-plan", "partition" (free nodes) or "re-partition" (serving nodes)
    detail: str
    charged_s: float = 0.0  # of a re-plan: the seconds the clock charged it
    answer: str = ""  # of a re-plan: how it was answered and the outcome's kind ("solve: time-limit")


class LoopResult(BaseModel):
    trace: str
    features: str
    latency_model: str
    duration_s: float
    pool_gpus: int
    pool_slices: int
    systems: list[SystemTotals]
    replans: int
    solves: int
    cache_hits: int
    repartitions: int
    free_partitions: int
    lost_slice_s: float
    allocated_slice_s: float
    busy_slice_s: float
    solver_wall_s: float
    charged_solve_s: float
    simulation_wall_s: float
    events: list[Event]
    bin_s: float
    # per time bin, per system (the systems' order)
    demand_rps: list[list[float]]
    capacity_rps: list[list[float]]
    p50_ms: list[list[float]]
    p99_ms: list[list[float]]
    violation_pct: list[list[float]]
    drop_pct: list[list[float]]
    allocated_slices: list[float]
    # slice-seconds allocated to each system's replicas (the systems' order; they sum to allocated_slice_s)
    system_slice_s: list[float]

    def totals(self, systems: list[str] | None = None) -> SystemTotals:
        chosen = [s for s in self.systems if systems is None or s.system in systems]
        return SystemTotals(system="+".join(s.system for s in chosen),
                            **{f: sum(getattr(s, f) for s in chosen)
                               for f in ("requests", "late", "dropped", "late_with_dropping", "unserved")})

    @property
    def slice_use_pct(self) -> float:
        """Allocated slices over the pool's, averaged over time."""
        return 100 * self.allocated_slice_s / (self.pool_slices * self.duration_s)

    def slice_use_pct_of(self, systems: list[str]) -> float:
        """The slices these systems' replicas hold over the pool's, averaged over time: slice use at equal served
        demand, where feature sets serve different systems."""
        held = sum(s for t, s in zip(self.systems, self.system_slice_s) if t.system in systems)
        return 100 * held / (self.pool_slices * self.duration_s)

    @property
    def busy_of_allocated_pct(self) -> float:
        return 100 * self.busy_slice_s / max(self.allocated_slice_s, 1e-9)

    @property
    def lost_pct(self) -> float:
        """Slice-time lost to re-partitioning, of the slice-time allocated."""
        return 100 * self.lost_slice_s / max(self.allocated_slice_s, 1e-9)


class _Record:
    """Per time bin and system: arrivals, late, dropped, a latency histogram; the serving capacity over time."""

    def __init__(self, systems: list[str], duration_s: float, bin_s: float) -> None:
        self.systems, self.bin_s = systems, bin_s
        self.bins = int(np.ceil(duration_s / bin_s))
        shape = (len(systems), self.bins)
        self.arrivals, self.late, self.dropped = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        self.histogram = np.zeros((len(systems), self.bins, len(LATENCY_EDGES_S) + 1))
        self.capacity_s = np.zeros(shape)  # capacity (source req/s) x seconds
        self.slices_s = np.zeros(self.bins)
        self.system_slices_s = np.zeros(len(systems))
        self.totals = [SystemTotals(system=s) for s in systems]

    def bin_of(self, times_s: np.ndarray) -> np.ndarray:
        return np.minimum((times_s // self.bin_s).astype(np.int64), self.bins - 1)

    def spread(self, start_s: float, end_s: float) -> np.ndarray:
        """Seconds of [start, end) in each time bin."""
        edges = np.arange(self.bins + 1) * self.bin_s
        return np.clip(np.minimum(edges[1:], end_s) - np.maximum(edges[:-1], start_s), 0, None)

    def add_plain(self, k: int, offset_s: float, arrival: np.ndarray, latency: np.ndarray, slo_s: float) -> None:
        which = self.bin_of(arrival + offset_s)
        late = latency > slo_s
        self.arrivals[k] += np.bincount(which, minlength=self.bins)
        self.late[k] += np.bincount(which, weights=late, minlength=self.bins)
        self.histogram[k] += self.counts_by_bin_and_bucket(which, np.searchsorted(LATENCY_EDGES_S, latency))
        self.totals[k].requests += int(latency.size)
        self.totals[k].late += int(late.sum())

    def counts_by_bin_and_bucket(self, which: np.ndarray, bucket: np.ndarray) -> np.ndarray:
        """Requests per (time bin, latency bucket), as one bincount over the flattened pair (np.add.at took 5% of
        a simulated day's serving time; bench/README.md)."""
        buckets = len(LATENCY_EDGES_S) + 1
        return np.bincount(which * buckets + bucket, minlength=self.bins * buckets).reshape(self.bins, buckets)

    def add_dropping(self, k: int, offset_s: float, arrival: np.ndarray, latency: np.ndarray, slo_s: float) -> None:
        which = self.bin_of(arrival + offset_s)
        dropped = np.isnan(latency)
        self.dropped[k] += np.bincount(which, weights=dropped, minlength=self.bins)
        self.totals[k].dropped += int(dropped.sum())
        self.totals[k].late_with_dropping += int((latency > slo_s).sum())

    def add_unserved(self, k: int, offset_s: float, arrivals: np.ndarray, bin_s: float) -> None:
        """Arrivals per trace bin from `offset_s` that no replica serves: late and dropped, all of them."""
        which = self.bin_of(offset_s + np.arange(arrivals.size) * bin_s)
        counts = np.bincount(which, weights=arrivals, minlength=self.bins)
        for table in (self.arrivals, self.late, self.dropped):
            table[k] += counts
        self.histogram[k, :, -1] += counts
        count = int(arrivals.sum())
        t = self.totals[k]
        t.requests, t.late, t.dropped, t.late_with_dropping, t.unserved = (
            t.requests + count, t.late + count, t.dropped + count, t.late_with_dropping + count, t.unserved + count)

    def percentile_ms(self, q: float) -> list[list[float]]:
        cumulative = np.cumsum(self.histogram, axis=2)
        total = cumulative[:, :, -1:]
        index = (cumulative < q / 100 * np.maximum(total, 1)).sum(axis=2)
        upper = np.append(LATENCY_EDGES_S, np.inf)[np.minimum(index, len(LATENCY_EDGES_S))]
        return np.where(total[:, :, 0] > 0, 1e3 * upper, np.nan).tolist()


# -- the loop ---------------------------------------------------------------------------

def keyed(systems: list[SystemSpec]) -> list[SystemSpec]:
    """The specs under the names the planner's contract gives them (namespace/name), as plans name them."""
    return [s.model_copy(update={"name": f"{NAMESPACE}/{s.name}"}) for s in systems]


def node_pool(gpu: str, layouts: dict[tuple[str, int], dict[str, int]], gpus: int, per_node: int) -> NodePool:
    names = [f"node-{n}" for n in range((gpus + per_node - 1) // per_node)]
    return NodePool(gpu=gpu, nodes=[
        NodeState(name=name, gpus=[layouts.get((name, d), {}) for d in range(min(per_node, gpus - n * per_node))])
        for n, name in enumerate(names)])


class ClosedLoop:
    """One run: systems under a trace on a pool, the operator deciding, the simulation serving."""

    def __init__(self, systems: list[SystemSpec], gpu: str, gpus: int, trace: RateTrace, options: PlannerOptions,
                 features: Features = Features(), settings: LoopSettings = LoopSettings(),
                 policies: Policies | None = None, cache_dir: Path | None = None) -> None:
        self.base = keyed(systems)
        self.gpu, self.gpus, self.trace = gpu, gpus, trace
        self.options, self.features, self.settings = options, features, settings
        self.policies = policies or policies_for(options)
        self.replanner = Replanner(options, features, cache_dir)
        self.store: ProfileStore = build_profile_store(self.base, gpu, None, options.batches, max_mps=options.max_mps)
        self.record = _Record([s.name for s in self.base], trace.duration_s, settings.bin_s)
        # readings draw from their own stream, so what is served (unserved arrivals draw too) cannot change them
        self.readings = np.random.default_rng(settings.seed)
        self.rng = np.random.default_rng(settings.seed + 1)
        self.layouts: dict[tuple[str, int], dict[str, int]] = {}
        self.events: list[Event] = []
        self.pieces = 0
        self.simulation_wall_s = 0.0
        self.busy_slice_s = 0.0
        self.charged_s = 0.0
        self.lost_slice_s = 0.0
        self.replans = self.repartitions = self.free_partitions = 0

    def pool(self) -> NodePool:
        return node_pool(self.gpu, self.layouts, self.gpus, self.settings.gpus_per_node)

    def specs_for(self, rates: dict[str, float]) -> list[SystemSpec]:
        return [s.model_copy(update={"demand_rps": rates[s.name]}) for s in self.base]

    def start_rates(self) -> dict[str, float]:
        """The specs' rates, or (start_from_trace) their mean over the trace's first rate window, rounded as
        status keeps a planned rate."""
        if not self.settings.start_from_trace:
            return {s.name: s.demand_rps for s in self.base}
        first = self.trace.multiplier[:max(1, int(self.settings.rate_window_s / self.trace.bin_s))]
        return {s.name: round(s.demand_rps * float(first.mean()), 3) for s in self.base}

    @property
    def change_s(self) -> float:
        return self.options.reconfigure_s if self.settings.change_s is None else self.settings.change_s

    def reading(self, system: SystemSpec, now_s: float) -> float:
        """The frontend counter's rate over the template's window ending now (Poisson arrivals of the trace)."""
        start = max(0.0, now_s - self.settings.rate_window_s)
        first, last = int(start // self.trace.bin_s), int(now_s // self.trace.bin_s)
        expected = system.demand_rps * float(self.trace.multiplier[first:last].sum()) * self.trace.bin_s
        return float(self.readings.poisson(expected)) / max(now_s - start, 1e-9)

    def run(self) -> LoopResult:
        settings, duration = self.settings, self.trace.duration_s
        rates = self.start_rates()  # what is planned for until a first reading
        states = {name: hy.DemandState(rate) for name, rate in rates.items()}
        running, planned_for = self.first_plan(rates), dict(rates)
        before = running  # the plan a change in progress leaves
        self.layouts.update(node_layouts(running))
        serving, serving_since = running, 0.0
        pending: list[Change] = []  # steps of the change in progress, in time order
        busy_until = 0.0
        now = settings.poll_s
        while True:
            while pending and pending[0].start_s <= min(now, duration):
                step = pending.pop(0)
                self.serve(serving, serving_since, step.start_s)
                serving, serving_since = step.serving, step.start_s
                if step.stopped:
                    self.lost_slice_s += step.lost_slices * self.change_s
                    self.events.append(Event(at_s=step.start_s, what="re-partition",
                                             detail=f"{', '.join(step.stopped)}: {step.lost_slices} slices stop"))
                    stopped = {i.system for g in before.gpus if g.node in step.stopped for i in g.instances if i.system}
                    for name in stopped:
                        states[name] = hy.record_repartition(states[name], EPOCH + timedelta(seconds=step.start_s))
            if now >= duration:
                break
            moment = EPOCH + timedelta(seconds=now)
            for system in self.base:
                decision = hy.decide(states[system.name], self.reading(system, now), moment, settings.windows)
                # status keeps the planned rate rounded (planning.py): the next reconcile reads the same back
                states[system.name] = replace(decision.state, planned_rps=round(decision.state.planned_rps, 3))
            wanted = {name: state.planned_rps for name, state in states.items()}
            if wanted != planned_for and now >= busy_until:
                answer = self.replanner.replan(self.specs_for(wanted), self.pool(), running, demand_moved=True)
                self.replans += 1
                charged = answer.charged_s if settings.charge_solve_time else 0.0
                self.charged_s += charged
                planned_for = wanted  # a failed re-plan is retried when demand moves again
                at = now + charged
                detail = f"{answer.kind} ({answer.answer}, {answer.charged_s:.1f} s) for " + ", ".join(
                    f"{name.split('/')[-1]} {rate:g}" for name, rate in wanted.items())
                self.events.append(Event(at_s=now, what="re-plan", detail=detail, charged_s=charged,
                                         answer=f"{answer.kind.removeprefix('cached ')}: {answer.answer}"))
                if answer.plan is not None:
                    steps, free, changed = change_steps(running, answer.plan, self.layouts, self.pool(), at,
                                                        self.change_s, settings.max_changing_nodes)
                    self.free_partitions += len(free)
                    if free:
                        self.events.append(Event(at_s=at, what="partition", detail=f"{', '.join(free)}: free, "
                                                 f"serve their new replicas from {at + self.change_s:g} s"))
                    self.repartitions += len(changed)
                    pending = steps
                    busy_until = steps[-1].start_s
                    before, running = running, answer.plan
                    self.layouts.update(node_layouts(running))
            now = min(now + settings.poll_s, duration)
        self.serve(serving, serving_since, duration)
        return self.result()

    def first_plan(self, rates: dict[str, float]) -> Plan:
        """The plan the loop starts from. It is not on the loop's clock, so a first solve the time limit cut short
        without a plan (on a loaded machine the limit may not suffice) is tried once more with a longer limit, by the
        operator's factor (solve_decide.longer_limit)."""
        specs, pool = self.specs_for(rates), self.pool()
        first = self.replanner.replan(specs, pool, None, demand_moved=False)
        if first.plan is None and first.answer == "time-limit":
            longer = self.options.model_copy(update={"time_limit_s": RETRY_LIMIT_FACTOR * self.options.time_limit_s})
            retry = Replanner(longer, self.features, self.replanner.cache_dir)
            first = retry.replan(specs, pool, None, demand_moved=False)
            self.replanner.solver_wall_s += retry.solver_wall_s
        if first.plan is None:
            raise NoFirstPlan(first.answer)
        return first.plan

    def serve(self, plan: Plan, start_s: float, end_s: float) -> None:
        """Simulate `plan` serving the trace's arrivals in [start, end), without and with early dropping."""
        first, last = int(round(start_s / self.trace.bin_s)), int(round(end_s / self.trace.bin_s))
        if last <= first:
            return
        offset = first * self.trace.bin_s
        piece = RateTrace(self.trace.name, self.trace.multiplier[first:last], self.trace.bin_s)
        started = time.perf_counter()
        deployment = build_deployment(plan, self.base, self.store)
        seed = self.settings.seed * 1_000_003 + self.pieces
        self.pieces += 1
        runs = {dropping: engine.run(deployment, piece, self.policies.model_copy(
            update={"early_dropping": dropping, "seed": seed})) for dropping in (False, True)}
        served = {run.routes.name: (run, runs[True].systems[i]) for i, run in enumerate(runs[False].systems)}
        seconds = self.record.spread(offset, offset + piece.duration_s)
        for k, system in enumerate(self.base):
            if system.name not in served:  # no replica in this piece: its arrivals are all late (and dropped)
                self.record.add_unserved(k, offset, self.rng.poisson(system.demand_rps * piece.multiplier * piece.bin_s),
                                         piece.bin_s)
                continue
            without, early = served[system.name]
            slo_s = without.routes.slo_s
            self.record.add_plain(k, offset, without.source_arrival, without.latency, slo_s)
            self.record.add_dropping(k, offset, early.source_arrival, early.latency, slo_s)
            self.record.capacity_s[k] += capacity_rps(runs[False], without) * seconds
        self.record.slices_s += deployment.allocated_slices * seconds
        for stage in deployment.stages:
            self.record.system_slices_s[self.record.systems.index(stage.system)] += (
                deployment.slices[stage.replicas].sum() * piece.duration_s)
        self.busy_slice_s += float((runs[False].busy_s * deployment.slices / deployment.processes).sum())
        self.simulation_wall_s += time.perf_counter() - started

    def result(self) -> LoopResult:
        record, bin_s = self.record, self.settings.bin_s
        seconds = record.spread(0.0, self.trace.duration_s)
        width = np.maximum(seconds, 1e-9)
        share = np.maximum(record.arrivals, 1)
        product = gpu_product(self.gpu)
        return LoopResult(
            trace=self.trace.name, features=self.features.label, latency_model=latency_model(self.options),
            duration_s=self.trace.duration_s, pool_gpus=self.gpus,
            pool_slices=self.gpus * product.whole_gpu_profile.compute_slices, systems=record.totals,
            replans=self.replans, solves=self.replanner.solves, cache_hits=self.replanner.cache_hits,
            repartitions=self.repartitions, free_partitions=self.free_partitions, lost_slice_s=self.lost_slice_s,
            allocated_slice_s=float(record.slices_s.sum()), busy_slice_s=self.busy_slice_s,
            solver_wall_s=self.replanner.solver_wall_s, charged_solve_s=self.charged_s,
            simulation_wall_s=self.simulation_wall_s, events=self.events, bin_s=bin_s,
            demand_rps=(record.arrivals / width).tolist(), capacity_rps=(record.capacity_s / width).tolist(),
            p50_ms=record.percentile_ms(50), p99_ms=record.percentile_ms(99),
            violation_pct=(100 * record.late / share).tolist(), drop_pct=(100 * record.dropped / share).tolist(),
            allocated_slices=(record.slices_s / width).tolist(), system_slice_s=record.system_slices_s.tolist())
