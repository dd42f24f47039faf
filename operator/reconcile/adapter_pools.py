"""The AdapterPools' part of a reconcile: place (before the compound solve), then act (after it).

The decisions are adapter_pool_decide.py's; this module runs the placement
(`tessera place`'s, by the predictors: the twin check costs seconds a server
and is not run in the reconcile yet; a re-placement against what the servers'
Deployments record, `choose_placement`) and applies what was decided. The
placement is deterministic in what the reconcile read, so it is computed again
after a restart; it is cached for the process while the pool's problem, free
GPUs and recorded servers are unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone

from tessera.operator.api import status as st
from tessera.operator.api.adapter_pools import AdapterPoolObject
from tessera.operator.api.v1alpha1 import RouteNames
from tessera.operator.demand import hysteresis as hy
from tessera.operator.demand.prometheus import Reading, Reason, client_of, unknown
from tessera.operator.gpus.discovery import Pool
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.actions import Json, LoadAdapter
from tessera.operator.reconcile.adapter_loading import (LOAD_RETRY_S, Listed, Placed, Retry, ServerKey, Weights, decide_loads,
                                                        decide_readiness, decide_unloads, held_copies, loading_requeue,
                                                        placed_adapters, placed_weights, pod_name, record_failures,
                                                        server_loads,
                                                        server_of, server_url, serving, unplaced_listed)
from tessera.operator.reconcile.adapter_pool_decide import (Chosen, PoolServers, ServerLoad, Slot, choose_placement,
                                                            choose_slots, compound_holders, decide_placement_record,
                                                            decide_pool_status, decide_servers, gpus_allowed, higher_holders,
                                                            outranking, owned_by, yields_to_compound,
                                                            kept_placement, placed_compound_gpus, placed_rates,
                                                            planned_servers,
                                                            placing_order, pool_status, previous_placement,
                                                            running_servers, server_slots, with_rates, within)
from tessera.operator.reconcile.adapter_pool_demand import (AdapterReadings, PoolWindows, RatesDecision,
                                                            adapter_readings, decide_rates, demand_query, demand_status,
                                                            metrics_condition, windows_from_status)
from tessera.operator.reconcile.adapter_weights import FETCHER_PORT
from tessera.operator.reconcile.adapter_routes import (decide_inference_pools, decide_routes, route_summaries,
                                                       routed_pods)
from tessera.operator.reconcile.decide import PoolOutcome
from tessera.operator.reconcile.quotas import WholeGpuQuota
from tessera.operator.reconcile.snapshot import Snapshot
from tessera.operator.settings import OperatorSettings
from tessera.operator.fetcher import WAIT_S as FETCH_WAIT_S
from tessera.operator.fetcher import StillFetching
from tessera.operator.vllm import ServerError
from tessera.planner.placement import Placement, PlacementProblem

log = logging.getLogger("tessera.operator")

SERVERS_AT_ONCE = 16
"""Servers asked, or loaded, at once: a server that does not answer costs a reconcile one timeout, not one per pod."""


@dataclass(frozen=True)
class Acted:
    """One AdapterPool's servers as applied, for its status once its pods are loaded."""

    servers: PoolServers
    planned: list[tuple[Json, bool]]
    live: list[Json]


@dataclass(frozen=True)
class Loading:
    """What keep_loaded left: the seconds until a pod is looked at again, and what each server's pods hold."""

    requeue: float | None
    servers: dict[ServerKey, ServerLoad]
    held: dict[str, dict[str, str]]
    """Pod uid -> the placed adapters its server lists -> the source of that copy (adapter_loading.held_copies)."""


class AdapterPools:
    def __init__(self, actor: Actor, settings: OperatorSettings) -> None:
        self.actor = actor
        self.settings = settings
        self.servers = actor.servers
        self.at_once = SERVERS_AT_ONCE
        self._placements: dict[str, dict[tuple[PlacementProblem, Placement | None], Chosen]] = {}
        """GPU pool key -> the placements its AdapterPools' current problems and recorded servers give."""
        self.prometheus = client_of(settings.demand)
        demand = settings.demand
        self.windows = hy.Windows(demand.stabilization_s, demand.repartition_window_s, demand.scale_down_step)
        self.demand_windows: dict[str, PoolWindows] = {}
        """Pool key -> the last decision's windows (status shows a reading only once it moved: demand/shown.py)."""
        self.watching: dict[str, bool] = {}
        """GPU pool key -> some AdapterPool of it has a demandSource: the reconcile comes back every --demand-poll."""

    def plan(self, pool: Pool, objects: list[AdapterPoolObject], children: list[Json],
             state: Mapping[str, str], quotas: dict[str, WholeGpuQuota],
             priorities: Mapping[str, int] | None = None) -> list[PoolServers]:
        """Each AdapterPool's servers and GPUs on this GPU pool, in `placing_order`; a running server keeps its GPU
        unless another pool's server, or a compound system that outranks the pool, holds it. `quotas` (namespace ->
        what its quota on whole GPUs leaves) is updated as servers take GPUs: it holds for the namespace's
        AdapterPools of every GPU pool together. `priorities`: the spec.poolPriority of the pool's valid compound
        systems (adapter_pool_decide.outranking, yields_to_compound)."""
        priorities = priorities or {}
        held = {obj.ref.key: server_slots(children, obj.ref) for obj in objects}
        holders = compound_holders(state)
        in_pool = {(node.name, index) for node, index in pool.slots()}
        taken: set[Slot] = set()
        decided = []
        known, self._placements[pool.key] = self._placements.get(pool.key, {}), {}
        self.watching[pool.key] = any(o.spec is not None and o.spec.demand_source is not None for o in objects)
        for obj in placing_order(objects):
            priority = obj.spec.pool_priority if obj.spec else 0
            outranked = outranking(holders, priorities, priority)
            busy = set(holders) - set(outranked)
            others = {slot for key, slots in held.items() if key != obj.ref.key for slot in slots.values()}
            blocked = taken | others | set(outranked)
            free = len(in_pool - blocked)
            namespace = obj.ref.namespace
            if obj.problem is None:
                holds = {i: slot for i, slot in held[obj.ref.key].items() if slot in in_pool - taken}
                kept = kept_placement(obj, children, holds)
                outcome = PoolServers(obj, kept, [holds[s.index] for s in kept.servers] if kept else [],
                                      held=sorted(set(holds.values())), free=free,
                                      running=running_servers(children, obj.ref))
            else:
                allowed, quota = gpus_allowed(free, quotas.get(namespace))
                demand = self.rates(obj, children)
                problem = within(obj.problem if demand is None else with_rates(obj.problem, demand.rates), allowed)
                running = running_servers(children, obj.ref)
                key = (problem, previous_placement(children, obj.ref, running, problem.model))
                chosen = known.get(key) or choose_placement(*key)
                self._placements[pool.key][key] = chosen
                slots = choose_slots(pool, [s.index for s in chosen.placement.servers], held[obj.ref.key], blocked,
                                     busy)
                outcome = PoolServers(obj, chosen.placement, slots, free=free, quota=quota, running=running,
                                      moves=chosen.moves, demand=demand,
                                      outranked_by=higher_holders(outranked, priorities, priority),
                                      yields=yields_to_compound(priority, list(priorities.values())))
            taken |= outcome.gpus
            if namespace in quotas:
                left = quotas[namespace]
                quotas[namespace] = dataclasses.replace(left, limit=max(0, left.limit - len(outcome.gpus)))
            decided.append(outcome)
        return decided

    def rates(self, obj: AdapterPoolObject, children: list[Json]) -> RatesDecision | None:
        """A pool with a demandSource: the rates to place for after reading it (adapter_pool_demand.py); None: the
        spec's rates."""
        spec = obj.spec
        if spec is None or spec.demand_source is None:
            return None
        now = datetime.now(timezone.utc)
        key = obj.ref.key
        windows = self.demand_windows.get(key) or windows_from_status(obj.status)
        decision = decide_rates(placed_rates(children, obj.ref), {a.name: a.rate_rps for a in spec.adapters},
                                self.read(obj), windows, now, self.windows)
        if decision.move in (hy.Move.UP, hy.Move.DOWN):
            log.info("adapter pool %s: %s", key, decision.message)
        self.demand_windows[key] = decision.windows
        return decision

    def read(self, obj: AdapterPoolObject) -> AdapterReadings:
        """Observe: the pool's demandSource, confined to its namespace, as per-adapter rates."""
        assert obj.spec is not None and obj.spec.demand_source is not None
        if self.prometheus is None:
            return AdapterReadings({}, unknown(Reason.NOT_CONFIGURED, "the operator has no Prometheus address "
                                                                      "(--prometheus-url)"))
        query = demand_query(obj.spec.demand_source, obj.ref.name, obj.ref.namespace, self.settings.demand.templates)
        if isinstance(query, Reading):
            return AdapterReadings({}, query)
        return adapter_readings(self.prometheus.answer(query), obj.spec.demand_source.adapter_label,
                                {a.name for a in obj.spec.adapters})

    @staticmethod
    def reserved(decided: list[PoolServers], children: list[Json]) -> dict[Slot, int | None]:
        """The AdapterPools' GPUs as the compound solve gets them: their planned servers', and those their live
        servers hold until they are gone -> None, left alone; or, for a pool some compound system outranks
        (`yields`), its spec.poolPriority: lent only to the systems above it, which may take them, and its server
        waits, or moves, before a compound server starts there (the node's re-partitioning waits for every pod
        holding its GPUs). A GPU two pools name (a server moving) is left alone where one keeps it, else lent
        above the higher priority."""
        found: dict[Slot, int | None] = {}
        for d in decided:
            above = (d.pool.spec.pool_priority if d.pool.spec else 0) if d.yields else None
            for slot in set(server_slots(children, d.pool.ref).values()) | d.gpus:
                before = found.get(slot, above)
                found[slot] = None if before is None or above is None else max(before, above)
        return found

    def act(self, pool: Pool, decided: list[PoolServers], children: list[Json], outcome: PoolOutcome) -> list[Acted]:
        """After the compound solve: each AdapterPool's servers where the compound plan in force leaves their GPU
        free (their status is written after the loads, by write_statuses)."""
        compound = placed_compound_gpus(outcome.placement)
        acted = []
        for servers in decided:
            planned = planned_servers(pool, servers, self.settings, compound, outcome.mig, outcome.first_plan_solving)
            live = owned_by(children, servers.pool.ref)
            self.actor.apply(decide_placement_record(servers, live) + decide_servers(planned, live, servers.pool.valid))
            acted.append(Acted(servers, planned, live))
        return acted

    def write_statuses(self, acted: list[Acted], loading: Loading,
                       routes: Mapping[tuple[str, str], RouteNames]) -> None:
        """Each acted AdapterPool's status, with what its servers' pods hold after this reconcile's loads and its
        routes' names."""
        for pool in acted:
            ref = pool.servers.pool.ref
            phase, conditions, summary = pool_status(pool.servers.pool, pool.servers, pool.planned, pool.live,
                                                     loading.servers, routes.get((ref.namespace, ref.name)))
            decision = pool.servers.demand
            if decision is None:
                self.write_status(pool.servers.pool, phase, conditions, summary)
                continue
            self.write_status(pool.servers.pool, phase, [*conditions, metrics_condition(decision)], summary,
                              demand_status(decision, pool.servers.pool.status, datetime.now(timezone.utc),
                                            self.windows))

    def keep_loaded(self, decided: list[PoolServers], pods: list[Json], slices: list[Json]) -> Loading:
        """Unload what the pods' servers list but is no longer placed on them (once its route, `slices` as read, no
        longer lists the pod); load what they do not list (but failed adapters still waiting for their next try),
        record the failed loads, then set each pod's readiness gate from what its server lists after the loads."""
        retry = Retry(self.settings.adapter_load_failures, self.settings.adapter_load_backoff_max_s, time.time())
        placed = placed_adapters(decided)
        pods = [pod for pod in pods if serving(pod) and server_of(pod) in placed]
        listed = self.list_servers(pods)
        unloads_left = self.unload_unplaced(pods, placed, listed, routed_pods(slices))
        errors = self.load_missing(pods, placed, listed, retry, placed_weights(decided))
        listed.update(self.list_servers([pod for pod in pods if pod_name(pod) in errors]))
        records = record_failures(pods, placed, errors, listed, retry)
        held = held_copies(pods, placed, listed, errors)
        self.actor.apply(decide_readiness(pods, placed, listed, st.now_rfc3339(), records, retry, held))
        requeue = [w for w in (loading_requeue(pods, placed, listed, records, retry),
                               LOAD_RETRY_S if unloads_left else None) if w is not None]
        if any(self.watching.values()):
            requeue.append(self.settings.demand.poll_s)  # the next reading of the pools' demandSource
        return Loading(min(requeue, default=None), server_loads(pods, placed, listed, records, retry), held)

    def unload_unplaced(self, pods: list[Json], placed: Placed, listed: Mapping[str, Listed],
                        routed: set[tuple[str, str]]) -> int:
        """The unloads decided, `at_once` at a time; how many unplaced adapters stay listed (waiting for their route
        to leave the pod, or refused), to be looked at again after LOAD_RETRY_S."""
        unloads = decide_unloads(pods, placed, listed, routed)
        with ThreadPoolExecutor(self.at_once) as workers:
            done = sum(1 for error in workers.map(self.actor.unload, unloads) if error is None)
        return len(unplaced_listed(pods, placed, listed)) - done

    def load_missing(self, pods: list[Json], placed: Placed, listed: Mapping[str, Listed],
                     retry: Retry, weights: Weights) -> dict[str, dict[str, str | None]]:
        """The loads decided, `at_once` servers at a time (one pod's loads in order); by pod, each adapter tried
        and the engine's error (None: loaded), for each pod with a load."""
        by_pod: dict[str, list[LoadAdapter]] = {}
        for load in decide_loads(pods, placed, listed, retry, weights):
            by_pod.setdefault(load.pod, []).append(load)
        with ThreadPoolExecutor(self.at_once) as workers:
            tried = list(workers.map(self.load_in_order, by_pod.values()))
        return dict(zip(by_pod, tried))

    def load_in_order(self, loads: list[LoadAdapter]) -> dict[str, str | None]:
        """Each adapter loaded (None) or refused (the engine's error); a load the server did not answer, or whose
        files are still being fetched, is left out: it says nothing about the adapter, so it does not count towards
        marking it failed. Once one adapter's fetch outlasts the sidecar's wait, the pod's other fetches are only
        started (no wait): a pod of many slow fetches costs the reconcile one wait, not one per adapter."""
        tried: dict[str, str | None] = {}
        wait_s = FETCH_WAIT_S
        for load in loads:
            error = self.actor.load(load, wait_s)
            if isinstance(error, StillFetching):
                wait_s = 0.0
            if error is None or error.status is not None:
                tried[load.adapter] = None if error is None else str(error)
        return tried

    def keep_routes(self, decided: list[PoolServers], seen: Snapshot,
                    loading: Loading) -> dict[tuple[str, str], RouteNames]:
        """Each adapter's Service and EndpointSlice: exactly the Ready pods holding it, as the loads left them; each
        pool's InferencePool where the cluster serves the kind. Returns each pool's routes' names, for its status."""
        port = self.settings.server_port
        self.actor.apply(decide_routes(decided, list(seen.adapter_server_pods), placed_adapters(decided),
                                       loading.held, list(seen.route_services), list(seen.route_slices), port))
        self.actor.apply(decide_inference_pools(decided, seen.inference_pools_served, list(seen.inference_pools), port))
        return route_summaries(decided, list(seen.route_services))

    def list_servers(self, pods: list[Json]) -> dict[str, Listed]:
        """Observe: what each pod's server lists (`GET /v1/models`), by pod uid, `at_once` servers at a time."""
        with ThreadPoolExecutor(self.at_once) as workers:
            return dict(zip((pod["metadata"]["uid"] for pod in pods), workers.map(self.list_server, pods)))

    def list_server(self, pod: Json) -> Listed:
        url = server_url(self.settings.adapter_server_url, pod, self.settings.server_port)
        fetch_url = server_url(self.settings.adapter_fetcher_url, pod, FETCHER_PORT)
        try:
            return Listed(url, adapters=self.servers.loaded_adapters(url), fetch_url=fetch_url)
        except ServerError as error:
            return Listed(url, error=str(error), fetch_url=fetch_url)

    def without_pool(self, objects: list[AdapterPoolObject], children: list[Json]) -> None:
        """AdapterPools no GPU pool takes: Pending (or Invalid), their running servers left as they are."""
        for obj in objects:
            self.write_status(obj, *pool_status(obj, None, [], owned_by(children, obj.ref)))

    def write_status(self, obj: AdapterPoolObject, phase: str, conditions: list[st.Condition],
                     summary: Json | None, demand: Json | None = None) -> None:
        now = st.now_rfc3339()
        new = st.build_status(obj.ref.generation, phase, conditions, summary, obj.status, now, demand)
        self.actor.apply(decide_pool_status(obj, new, now))
