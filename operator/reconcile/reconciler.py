"""The level-triggered reconcile: observe (snapshot.py) -> plan (the solve, here) -> decide (decide.py) -> act (act.py).

One path for create, resume, update, delete and the periodic resync: every
run reads the whole state it needs back from the cluster (systems, nodes,
the mig-parted ConfigMap, the pool's stored plan, tessera's children) and
never assumes a previous step ran. What it writes only where the cluster
differs from the desired state: an unchanged cluster gets no write.

Per pool, all its systems are solved together. The pool's plan is stored in
a ConfigMap with the hash of its inputs, so a restarted operator, and a
resync, reuse it rather than solve again. A failed or timed-out solve keeps
the stored plan: running servers are never deleted because a solve failed.

MIG (part 1: nodes that serve nothing yet): tessera's configs go into the
ConfigMap the ClusterPolicy names, under content-addressed names; a node is
relabelled only once the config has had time to reach mig-manager, in one
patch that also removes the state label, and its layout counts as applied
only on a later `success` whose advertised profile counts match the plan.
Deployments go only onto nodes whose layout is applied.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from tessera.operator import metrics, naming, preflight
from tessera.operator.api import status as st
from tessera.operator.api.systems import SystemObject
from tessera.operator.cluster import Cluster, dumps
from tessera.operator.demand.planning import DemandPlanner
from tessera.operator.gpus.discovery import Pool, grace_left_s
from tessera.operator.gpus.node_plans import Share, place, placed_gpus, share_of
from tessera.operator.gpus.planner_input import MigConfigs, planner_pool
from tessera.operator.profiling.in_cluster import Profiling
from tessera.operator.reconcile import mig_failures
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.actions import DeletePlan, Json, StorePlan
from tessera.operator.reconcile.adapter_pool_decide import assign_adapter_pools
from tessera.operator.reconcile.adapter_pools import AdapterPools
from tessera.operator.reconcile.snapshot import observe
from tessera.operator.reconcile.decide import (STATE_FORMAT, PoolOutcome, about, serves_nothing, assign_to_pools,
                                               decide_children, decide_mig_configs, decide_relabels, decide_status,
                                               desired_mig, free_slots, live_children, no_pool_status,
                                               nodes_to_relabel, planned_children, planned_nodes, profiling_mig,
                                               replacements_awaited, replacements_in_place, reserved_gpus,
                                               stored_plan_stands, stored_pool_plan, system_status, frontend_status,
                                               spec_digest)
from tessera.operator.reconcile.node_changes import NodeHold
from tessera.operator.reconcile.running_decide import protection
from tessera.operator.reconcile.pool_access import denied
from tessera.operator.reconcile.quotas import instance_quotas, whole_gpu_quotas
from tessera.planner.quota import InstanceQuota
from tessera.operator.reconcile.serving_nodes import Rules, decide_serving_nodes
from tessera.operator.reconcile.pause import (held_mig_configs, held_nodes, pause_message, paused_status,
                                              paused_systems, planned_hashes, pool_pause, waiting_changes,
                                              without_paused)
from tessera.operator.settings import OperatorSettings
from tessera.operator.testhooks import checkpoint
from tessera.operator.vllm import VllmClient
from tessera.planner.contract import (
    Infeasible, InvalidInput, Planned, PlannerFailed, PlanRequest, SystemInput, TimeLimit,
)
from tessera.planner.nodes import NodePool
from tessera.planner.plan import InstancePlan, Plan
from tessera.planner.worker import SolveCancelled, SolveHandle, start_solve

log = logging.getLogger("tessera.operator")
SOLVE_POLL_S = 0.05
Outcome = Planned | TimeLimit | Infeasible | InvalidInput | PlannerFailed


@dataclass
class ReconcileResult:
    requeue_after: float | None
    writes: int


def quota_list(quotas: list[InstanceQuota]) -> list[tuple[list[str], str, int]]:
    return [(sorted(q.systems), q.mig_profile, q.limit) for q in quotas]


def quota_key(quotas: list[InstanceQuota]) -> dict[str, list[tuple[list[str], str, str]]]:
    """The quotas' hard limits as part of the pool's hash: absent where there are none (the hash stays the one from
    before quotas). Their hard limits (in `source`), not the room they leave: the room moves for a moment with each
    pod of tessera's the API server admits before its Deployment's status counts it, and must not re-plan then."""
    return {"quotas": [(sorted(q.systems), q.mig_profile, q.source) for q in quotas]} if quotas else {}


class Reconciler:
    def __init__(self, cluster: Cluster, settings: OperatorSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self.cancel = threading.Event()
        self.actor = Actor(cluster, VllmClient(settings.adapter_server_timeout_s))
        self.profiling = Profiling(cluster, settings)
        self.demand = DemandPlanner(settings.demand)
        self.adapter_pools = AdapterPools(self.actor, settings)
        self.preflight = preflight.Reporter()

    # -- the whole cluster -----------------------------------------------------
    def reconcile(self) -> ReconcileResult:
        writes_before = self.cluster.writes
        self.cancel.clear()  # a trigger from here on means this reconcile read a world that no longer is
        seen = observe(self.cluster, self.settings, self.demand)
        found = preflight.findings(seen.prerequisites, self.settings, preflight.expected_crds())
        self.preflight.report(found)
        prerequisites = preflight.condition(found)
        systems, pools, children, configs = list(seen.systems), list(seen.pools), list(seen.children), seen.mig_configs
        self.actor.apply(list(mig_failures.decide_failure_records(seen.pool_nodes, seen.at)))
        members = assign_to_pools(systems, pools)
        adapter_members = assign_adapter_pools(list(seen.adapter_pools), pools, children)
        self.profiling.collect()
        outcomes = {}
        pool_paused = {pool.key: pool_pause(seen.pool_annotations[pool.key],
                                            f"{self.settings.state_namespace}/{self.cluster.pool_state_name(pool.key)}")
                       for pool in pools}
        paused = {pool.key: paused_systems(members.get(pool.key, []), pool_paused[pool.key]) for pool in pools}
        adapter_servers, adapter_gpus = {}, {}
        gpu_quotas = whole_gpu_quotas(seen.resource_quotas, {o.ref.namespace for o in seen.adapter_pools}, children)
        for pool in pools:
            outcome = outcomes[pool.key] = PoolOutcome()
            self.profiling.prepare(pool, members.get(pool.key, []))
            # AdapterPools first, on whole GPUs the compound solve then leaves alone (adapter_pool_decide.py)
            servers = adapter_servers[pool.key] = self.adapter_pools.plan(
                pool, adapter_members.get(pool.key, []), children, seen.pool_states[pool.key], gpu_quotas)
            adapter_gpus[pool.key] = self.adapter_pools.reserved(servers, children)
            self.plan_pool(pool, members.get(pool.key, []), outcome, configs, seen.pool_states[pool.key],
                           paused[pool.key], pool_paused[pool.key] is not None, adapter_gpus[pool.key],
                           denied(members.get(pool.key, []), pool.key, seen.pool_access),
                           instance_quotas(seen.resource_quotas, members.get(pool.key, []), children))
            outcome.mig = desired_mig(pool, outcome.placement)
            for node_name, node_plan in self.profiling.launch(pool, outcome.plan, members.get(pool.key, []),
                                                              self.settings.planner.batches,
                                                              planned_nodes(pool, outcome)).items():
                mig = profiling_mig(pool, node_name, node_plan)
                if mig is not None:
                    outcome.mig[node_name] = mig
        # One ConfigMap serves every pool: its configs are decided for all pools at once.
        wanted: dict[str, list[Json]] = {}
        for key, outcome in outcomes.items():
            wanted.update(held_mig_configs(outcome.mig, set(configs)) if pool_paused[key] is not None
                          else {mig.config: mig.entries for mig in outcome.mig.values()})
        write, written = decide_mig_configs(wanted, self.settings.gpu_operator_namespace, seen.mig_configmap,
                                            seen.configmap, set(seen.configs_in_use), time.time())
        # Without the GPU Operator's namespace there is nowhere to write MIG configs: no node is relabelled
        # for one, and the systems' PrerequisitesMet says why (a failing write would hold back their status).
        mig_writable = seen.prerequisites.namespaces.get(self.settings.gpu_operator_namespace) is not False
        if write is not None and mig_writable:
            self.actor.apply([write])
        requeue: list[float] = []
        adapter_pools_acted = []
        for pool in pools:
            outcome = outcomes[pool.key]
            held = held_nodes(paused[pool.key], outcome, [n.name for n in pool.nodes], pool_paused[pool.key])
            outcome.failed_nodes = mig_failures.in_backoff(pool.nodes, seen.at, self.settings.mig_failure_backoff_s)
            requeue.extend(mig_failures.backoff_requeue(outcome.failed_nodes, time.time()))
            # a NotReady node leaves its pool when its grace ends: be there to plan without it
            requeue.extend(left + 0.5 for node in pool.nodes
                           if (left := grace_left_s(node, seen.at, self.settings.node_not_ready_grace_s)) is not None)
            if mig_writable:
                self.relabel_nodes(pool, members.get(pool.key, []), children, outcome, written,
                                   NodeHold.of(held, self.settings.maintenance_window))
            self.reconcile_children(pool, members.get(pool.key, []), children, outcome, paused[pool.key])
            adapter_pools_acted += self.adapter_pools.act(pool, adapter_servers[pool.key], children, outcome)
            state = seen.pool_states[pool.key]
            pool_changed = (pool_paused[pool.key] is not None
                            and state.get("pool") != self.pool_hash(pool, adapter_gpus[pool.key], outcome.quotas))
            for system in members.get(pool.key, []):
                why = paused[pool.key].get(system.ref.key)
                phase, conditions, summary = (
                    system_status(system, outcome) if why is None else paused_status(system, outcome, pause_message(
                        why, waiting_changes(system, spec_digest(system), state, pool_changed))))
                profiled = self.profiling.condition(system, pool) if summary is not None else []
                self.write_status(system, outcome, *self.demand.decorate(system, phase, [*conditions, *profiled,
                                                                                        prerequisites], summary))
            metrics.record_pool(pool.key, outcome.plan, pool.gpus, [
                layout for node, node_plan in outcome.placement.nodes.items()
                if outcome.mig.get(node) and outcome.mig[node].applied for layout in node_plan.layouts.values()])
            if outcome.requeue_after is not None:
                requeue.append(outcome.requeue_after)
        for system in members.get(None, []):
            phase, conditions, summary = no_pool_status(system, pools)
            self.write_status(system, PoolOutcome(), phase, [*conditions, prerequisites], summary)
        self.adapter_pools.without_pool(adapter_members.get(None, []), children)
        adapter_decided = [d for servers in adapter_servers.values() for d in servers]
        loading = self.adapter_pools.keep_loaded(adapter_decided, list(seen.adapter_server_pods),
                                                 list(seen.route_slices))
        routes = self.adapter_pools.keep_routes(adapter_decided, seen, loading)
        # after the loads, so a pool's status says which adapters failed on its servers this very reconcile
        self.adapter_pools.write_statuses(adapter_pools_acted, loading, routes)
        if loading.requeue is not None:
            requeue.append(loading.requeue)
        if self.demand.watching(systems):
            requeue.append(self.settings.demand.poll_s)
        return ReconcileResult(min(requeue, default=None), self.cluster.writes - writes_before)

    # -- one pool's plan ---------------------------------------------------------
    def plan_pool(self, pool: Pool, systems: list[SystemObject], outcome: PoolOutcome, configs: MigConfigs,
                  state: Mapping[str, str], paused: Mapping[str, str], pool_paused: bool,
                  adapter_gpus: set[tuple[str, int]], not_allowed: Mapping[str, tuple[str, str]],
                  quotas: list[InstanceQuota]) -> None:
        """The pool's plan: the stored one while its inputs are unchanged or the pool is paused, else a new solve.
        Paused systems keep their last plan's share (pause.py); `adapter_gpus`, the AdapterPools' servers' GPUs,
        are left out of it; `not_allowed` systems (pool_access.py) are invalid here, whatever their spec; the plan
        keeps within the namespaces' `quotas` (quotas.py)."""
        stored_plan = stored_pool_plan(state)
        kept = {k: Share.model_validate(v) for k, v in json.loads(state.get("kept", "{}")).items()}
        known_invalid = json.loads(state.get("invalid", "{}"))
        previous_gpus = placed_gpus(stored_plan) if stored_plan else []

        spec_hash = {s.ref.key: spec_digest(s) for s in systems if s.spec is not None}
        invalid = {key: (entry["reason"], entry["message"]) for key, entry in known_invalid.items()
                   if spec_hash.get(key) == entry["hash"] and entry["reason"] != st.POOL_NOT_ALLOWED}
        invalid.update(not_allowed)
        candidates = [s for s in systems if s.valid and s.ref.key not in invalid and s.ref.key not in paused]

        def keep_last_good(keys: set[str]) -> None:
            """Systems left out keep their last good share; systems fixed or deleted give theirs back."""
            for key in keys - kept.keys():
                if stored_plan and any(t.system == key for t in stored_plan.tasks):
                    kept[key] = share_of(key, stored_plan.tasks, previous_gpus)
            for key in set(kept) - keys:
                del kept[key]

        keep_last_good({s.ref.key for s in systems} - {s.ref.key for s in candidates})
        plan = stored_plan
        if pool_paused:
            pass  # nothing is solved, stored or deleted: the plan that runs is the one shown
        elif not candidates and not kept:
            plan = None
            if state:
                self.actor.apply([DeletePlan(pool.key, reason="no system plans on the pool any more")])
        elif state.get("inputs") != self.inputs_hash(pool, candidates, spec_hash, kept, adapter_gpus, quotas):
            while candidates:
                if stored_plan_stands(state, self.pool_hash(pool, adapter_gpus, quotas), candidates, spec_hash,
                                      {s.ref.key for s in systems}):
                    plan = stored_plan  # only systems that turned invalid left it
                    break
                protect = protection(stored_plan, json.loads(state.get("systems", "{}")), candidates, spec_hash)
                node_pool = planner_pool(pool, configs, reserved=reserved_gpus(kept) | adapter_gpus,
                                         kept_for=protect.kept_for)
                plan, found = self.solve(pool.key, candidates, node_pool, stored_plan, outcome, quotas, protect.floors)
                if not found:
                    break
                invalid.update(found)  # left out, with their last good share: solve again without them
                candidates = [s for s in candidates if s.ref.key not in found]
                keep_last_good({s.ref.key for s in systems} - {s.ref.key for s in candidates})
            if outcome.solve_error is not None:
                plan = stored_plan  # a failed solve keeps what runs
            else:
                if not candidates:
                    plan = None
                checkpoint("after-solve")
                self.actor.apply([StorePlan(pool.key, reason="the pool's inputs changed", data={
                    "inputs": self.inputs_hash(pool, candidates, spec_hash, kept, adapter_gpus, quotas),
                    "pool": self.pool_hash(pool, adapter_gpus, quotas),
                    "systems": dumps({s.ref.key: spec_hash[s.ref.key] for s in candidates}),
                    "plan": plan.model_dump_json() if plan else "",
                    "format": str(STATE_FORMAT),
                    "kept": dumps({k: v.model_dump(mode="json") for k, v in kept.items()}),
                    "paused": dumps({k: h for k, h in planned_hashes(state).items() if k in paused}),
                    "invalid": dumps({key: {"hash": spec_hash[key], "reason": reason, "message": message}
                                      for key, (reason, message) in invalid.items() if key in spec_hash}),
                })])
        outcome.plan, outcome.invalid, outcome.quotas = plan, invalid, quotas
        outcome.priorities = {s.ref.key: s.spec.pool_priority for s in candidates if s.spec is not None}
        outcome.pool_gpus = len(pool.slots())
        node_names = {n.name for n in pool.nodes}
        planned_for = {s.ref.key for s in candidates}
        gpus = [g for g in (placed_gpus(plan) if plan else []) if g.node in node_names]
        # Kept shares hold the instances of systems the plan was also made for (a plan that still stands).
        gpus = [g.model_copy(update={"instances": [i if i.system in planned_for else InstancePlan(mig_profile=i.mig_profile)
                                                   for i in g.instances]}) for g in gpus]
        gpus += [g for share in kept.values() for g in share.gpus if g.node in node_names]
        tasks = [t for t in (plan.tasks if plan else []) if t.system in planned_for]
        tasks += [t for share in kept.values() for t in share.tasks]
        outcome.placement = place(gpus, tasks, {n.name: n.gpu_count for n in pool.nodes})
        for gpu in gpus:
            for system in {i.system for i in gpu.instances if i.system}:
                outcome.gpus_of.setdefault(system, []).append(gpu)

    def pool_hash(self, pool: Pool, adapter_gpus: set[tuple[str, int]], quotas: list[InstanceQuota]) -> str:
        """The GPUs a plan is made on: the pool's, less the AdapterPools', and the quotas it keeps within (a stored
        plan stands only on the same: a lowered quota re-plans though no spec changed)."""
        return naming.digest({"format": STATE_FORMAT, "gpu": pool.gpu.name,
                              "slots": [(n.name, i) for n, i in pool.slots() if (n.name, i) not in adapter_gpus],
                              "options": self.settings.planner.model_dump(mode="json"),
                              "measured": self.profiling.digest(pool.key), **quota_key(quotas)})

    def inputs_hash(self, pool: Pool, candidates: list[SystemObject], spec_hash: dict[str, str],
                    kept: dict[str, Share], adapter_gpus: set[tuple[str, int]], quotas: list[InstanceQuota]) -> str:
        """Everything the plan depends on: equal hash, the stored plan stands."""
        return naming.digest({
            "format": STATE_FORMAT, "gpu": pool.gpu.name,
            "free": [slot for slot in free_slots(pool, kept) if slot not in adapter_gpus],
            "systems": sorted((s.ref.key, spec_hash[s.ref.key]) for s in candidates),
            "quotas": quota_list(quotas),
            "options": self.settings.planner.model_dump(mode="json"), "measured": self.profiling.digest(pool.key)})

    def solve(self, pool_key: str, candidates: list[SystemObject], node_pool: NodePool, current: Plan | None,
              outcome: PoolOutcome, quotas: list[InstanceQuota], running: dict[str, float]
              ) -> tuple[Plan | None, dict[str, tuple[str, str]]]:
        """(the plan, {}) or (None, the systems the planner cannot use); failures go to `outcome.solve_error`.

        The planner serves as much demand as it can, so a system whose SLO no
        choice reaches may still get a plan, serving nothing; it is
        unplannable (Invalid) only when it serves nothing even alone on the
        pool, else the pool is too small (Degraded). A time limit with a
        checked plan is a plan; one without, or a planner failure, keeps
        what runs and retries. Each system is checked alone without its namespace's quotas: a quota that
        leaves it nothing holds it back, it does not make its spec unplannable.
        """
        # replicas-only re-sizing knows no quotas: with any, a demand move re-plans in full
        resized = None if quotas else self.demand.replicas_only(current, candidates, node_pool, self.settings.planner,
                                                                 self.profiling.store(pool_key))
        if resized is not None:
            return resized, {}
        result = self.run_solver(pool_key, candidates, node_pool, current, quotas, running)
        node_pool = node_pool.without_kept()  # a system is unplannable alone on the pool, whatever runs there
        if isinstance(result, (Planned, TimeLimit, Infeasible)) and result.plan is not None:
            starved = [s for s in candidates if serves_nothing(result.plan, s.ref.key)]
            culprits = self.find_unplannable(pool_key, starved, node_pool) if starved else {}
            return (None, culprits) if culprits else (result.plan, {})
        if isinstance(result, InvalidInput):
            # The system the planner names is checked alone first: in a joint solve one spec's bad profile
            # can surface under another system's name, and no good system may be held back by a bad one.
            named = [s for s in candidates if s.ref.key == result.system]
            culprits = self.find_unplannable(pool_key, named, node_pool) if named else {}
            if culprits:
                return None, culprits
        if isinstance(result, (Infeasible, InvalidInput)):
            culprits = self.find_unplannable(pool_key, candidates, node_pool)
            if culprits:
                return None, culprits
        outcome.solve_error = result.reason if not isinstance(result, Planned) else "no plan"
        return None, {}

    def find_unplannable(self, pool_key: str, systems: list[SystemObject],
                         node_pool: NodePool) -> dict[str, tuple[str, str]]:
        """Each system alone on the pool: those the planner refuses or that serve nothing, with the planner's why."""
        found = {}
        for system in systems:
            key = system.ref.key
            result = self.run_solver(pool_key, [system], node_pool, None)
            if isinstance(result, InvalidInput):
                found[key] = (st.INVALID_SPEC, result.reason)
            elif isinstance(result, Infeasible) and result.plan is None:
                found[key] = (st.SLO_UNREACHABLE, "; ".join([result.reason, *about(result.diagnosis, key)]))
            elif isinstance(result, (Planned, TimeLimit, Infeasible)) and result.plan is not None \
                    and serves_nothing(result.plan, key):
                found[key] = (st.SLO_UNREACHABLE, "; ".join(about(result.plan.diagnosis, key))
                              or "no choice meets the SLOs")
        return found

    def run_solver(self, pool_key: str, systems: list[SystemObject], node_pool: NodePool,
                   current: Plan | None, quotas: list[InstanceQuota] | None = None,
                   running: dict[str, float] | None = None) -> Outcome:
        """One solve in the planner's worker process; the reconcile thread waits, a trigger cancels it."""
        request = PlanRequest(
            systems=[SystemInput(namespace=s.ref.namespace, name=s.ref.name, spec=s.spec) for s in systems],
            pool=node_pool, options=self.settings.planner, current=current,
            measured=self.profiling.store(pool_key), quotas=quotas or [], running=running or {})
        started = time.perf_counter()
        with metrics.SOLVE_SECONDS.labels(pool_key).time():
            handle = start_solve(request, memory_limit_mb=self.settings.solve_memory_mb)
            try:
                result = self._wait(handle)
            finally:
                if not handle.done():
                    handle.cancel()
        plannable = sum(len(n.plannable_devices()) for n in node_pool.nodes)
        log.info("pool %s: solve of %d system(s) on %d GPUs: %s %s (%.1f s)", pool_key, len(systems), plannable,
                 result.kind, getattr(result, "reason", ""), time.perf_counter() - started)
        return result

    def _wait(self, handle: SolveHandle) -> Outcome:
        while True:
            if self.cancel.is_set():
                handle.cancel()
                raise SolveCancelled("inputs changed during the solve")
            checkpoint("mid-solve")
            try:
                outcome: Outcome = handle.result(timeout=SOLVE_POLL_S)
            except TimeoutError:
                continue
            return outcome

    # -- MIG -------------------------------------------------------------------
    def relabel_nodes(self, pool: Pool, systems: list[SystemObject], children: list[Json], outcome: PoolOutcome,
                      written: dict[str, float], hold: NodeHold) -> None:
        """Reads the GPU pods of the nodes to re-partition, decides the relabels (less those `hold` holds back) and
        the steps of re-partitioning serving nodes (serving_nodes.py), applies them."""
        pods = {name: self.cluster.gpu_pods_on(name) for name in nodes_to_relabel(pool, outcome.mig)}
        outcome.mig, relabels, requeue = decide_relabels(pool, outcome.mig, written,
                                                         {name: list(found) for name, found in pods.items()},
                                                         time.time(), self.settings.mig_config_propagation_s,
                                                         self.settings.mig_poll_s, hold)
        planned, _ = planned_children(pool, systems, outcome, self.settings, self.profiling.store(pool.key))
        outcome.mig, changes = decide_serving_nodes(
            pool, outcome.mig, pods, live_children(children, systems), [body for body, _ in planned.values()],
            Rules(self.settings.max_changing_nodes, self.settings.without_replacement))
        self.actor.apply([*relabels, *changes])
        if any(m.serving_change for m in outcome.mig.values()):
            requeue.append(self.settings.mig_poll_s)  # pods terminating and replicas starting elsewhere are looked at
        if outcome.requeue_after is not None:
            requeue.append(outcome.requeue_after)
        outcome.requeue_after = min(requeue, default=None)

    # -- Deployments and Services ---------------------------------------------
    def reconcile_children(self, pool: Pool, systems: list[SystemObject], children: list[dict[str, object]],
                           outcome: PoolOutcome, paused: Mapping[str, str]) -> None:
        planned, outcome.deployments = planned_children(pool, systems, outcome, self.settings,
                                                        self.profiling.store(pool.key))
        outcome.live = live_children(children, systems)
        outcome.awaited = replacements_awaited(planned, outcome.live, outcome)
        outcome.in_place = replacements_in_place(planned, outcome.live, outcome)
        outcome.without_replacement = self.settings.without_replacement
        self.actor.apply(without_paused(decide_children(planned, systems, outcome.live, outcome), paused))

    # -- status ----------------------------------------------------------------
    def write_status(self, system: SystemObject, outcome: PoolOutcome, phase: str, conditions: list[st.Condition],
                     summary: dict[str, object] | None) -> None:
        now = st.now_rfc3339()
        new = st.build_status(system.ref.generation, phase, conditions, summary, system.status, now,
                              self.demand.status_of(system, conditions), frontend_status(system, self.settings, outcome))
        self.actor.apply(decide_status(system, new, now))



