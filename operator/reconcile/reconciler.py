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
Deployments go only onto nodes whose layout is applied, or is being applied on
a node that serves nothing and advertises none of the instances they request
(decide.starts_before_layout: their pods wait Pending for the layout).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera.operator import metrics, naming, preflight
from tessera.operator.api import status as st
from tessera.operator.api.systems import SystemObject
from tessera.operator.cluster import Cluster, dumps
from tessera.operator.demand.planning import DemandPlanner
from tessera.operator.gpus.discovery import Pool, grace_left_s
from tessera.operator.gpus.node_plans import Share, place, placed_gpus, share_of
from tessera.operator.gpus.planner_input import AdapterGpus, MigConfigs, lent_of, planner_pool, reserved_of
from tessera.operator.profiling.in_cluster import Profiling
from tessera.operator.reconcile import mig_failures
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.actions import DeletePlan, Json, StorePlan
from tessera.operator.reconcile.adapter_pool_decide import assign_adapter_pools, mig_off_for_servers, reserved_for
from tessera.operator.reconcile.adapter_pools import AdapterPools
from tessera.operator.reconcile.snapshot import observe
from tessera.operator.reconcile.decide import (STATE_FORMAT, PoolOutcome, serves_nothing, assign_to_pools,
                                               decide_children, decide_mig_configs, decide_relabels, decide_status,
                                               desired_mig, free_slots, live_children, no_pool_status,
                                               nodes_to_relabel, planned_children, planned_nodes, profiling_mig,
                                               held_in_place, hosts_without_room_beside_the_old, nodes_left_by_system,
                                               replacements_awaited,
                                               replacements_in_place, reserved_gpus, stored_plan_stands, stored_pool_plan,
                                               system_status, frontend_status, spec_digest)
from tessera.operator.reconcile.node_changes import NodeHold
from tessera.operator.reconcile.running_decide import protection
from tessera.operator.reconcile.pool_access import denied
from tessera.operator.reconcile.pool_solves import PoolSolves
from tessera.operator.reconcile.solve_decide import (RunningSolve, Size, Step, alone_verdict, awaits_measurement,
                                                     cut_to, exceeds_caps, fits_caps, longer_limit, next_probe, next_solve,
                                                     settling, settling_message, size_of, still_invalid, too_large,
                                                     too_large_message)
from tessera.operator.reconcile.quota_transitions import Room, kept_while_stepped, step_children, with_quota_transition
from tessera.operator.reconcile.quotas import instance_quotas, quota_rooms, whole_gpu_quotas
from tessera.planner.quota import InstanceQuota
from tessera.operator.reconcile.serving_nodes import Rules, decide_serving_nodes
from tessera.operator.reconcile.pause import (held_mig_configs, held_nodes, pause_message, paused_status,
                                              paused_systems, planned_hashes, pool_pause, waiting_changes,
                                              without_paused)
from tessera.operator.settings import OperatorSettings
from tessera.operator.testhooks import checkpoint
from tessera.operator.fetcher import FetcherClient
from tessera.operator.vllm import VllmClient
from tessera.planner.contract import (
    Infeasible, InvalidInput, Planned, PlannerFailed, PlanRequest, SystemInput, TimeLimit,
)
from tessera.planner.nodes import NodePool
from tessera.planner.plan import InstancePlan, Plan
from tessera.planner.profiles import ProfileStore
from tessera.planner.worker import SolveCancelled, SolveHandle, start_solve

log = logging.getLogger("tessera.operator")
SOLVE_POLL_S = 0.05
Outcome = Planned | TimeLimit | Infeasible | InvalidInput | PlannerFailed


@dataclass
class ReconcileResult:
    requeue_after: float | None
    writes: int


@dataclass(frozen=True)
class PoolJob:
    """What one pool's solve plans from, read by the reconcile that starts it (the solve's thread reads no more)."""
    pool: Pool
    systems: list[SystemObject]
    candidates: list[SystemObject]
    configs: MigConfigs
    kept: dict[str, Share]
    invalid: dict[str, tuple[str, str]]
    spec_hash: dict[str, str]
    stored_plan: Plan | None
    adapter_gpus: AdapterGpus
    quotas: list[InstanceQuota]
    state: dict[str, str]
    paused: dict[str, str]
    inputs: str
    """The hash of the inputs, as the reconcile that started the solve computed it."""
    measured: ProfileStore | None
    measured_digest: str


@dataclass(frozen=True)
class PoolSolve:
    """A finished solve of a pool: the ConfigMap data to store, or (data None) why it failed."""
    inputs: str
    data: dict[str, str] | None
    error: str | None
    at: float


def keep_last_good(kept: dict[str, Share], keys: set[str], stored_plan: Plan | None) -> None:
    """Systems left out (`keys`) keep their last good share; systems fixed or deleted give theirs back."""
    previous_gpus = placed_gpus(stored_plan) if stored_plan else []
    for key in keys - kept.keys():
        if stored_plan and any(t.system == key for t in stored_plan.tasks):
            kept[key] = share_of(key, stored_plan.tasks, previous_gpus)
    for key in set(kept) - keys:
        del kept[key]


def wait_for_outcome(handle: SolveHandle, cancel: threading.Event) -> Outcome:
    """The worker's outcome; `cancel` set stops the worker and raises SolveCancelled."""
    while True:
        if cancel.is_set():
            handle.cancel()
            raise SolveCancelled("inputs changed during the solve")
        checkpoint("mid-solve")
        try:
            outcome: Outcome = handle.result(timeout=SOLVE_POLL_S)
        except TimeoutError:
            continue
        return outcome


def solve_split(result: Outcome) -> str:
    """Where a solve's time went, for the log: how the plan was made, the models' building (pyomo) and HiGHS's seconds.
    The rest of the solve's time is mostly loading each model into HiGHS (highs_driver.load_model: about a tenth of a
    part's time in bench/decompose_phases.py's profile, a fifth with pyomo's appsi before), then the profiles, the
    placement, the check and the worker's start."""
    plan = getattr(result, "plan", None)
    if plan is None:
        return ""
    report = plan.solver
    reused = f", {len(report.reused)} parts reused from identical systems" if report.reused else ""
    return f" [{report.method}: building the models {report.build_s:.1f} s, HiGHS {report.solve_s:.1f} s{reused}]"


def quota_list(quotas: list[InstanceQuota]) -> list[tuple[list[str], str, int]]:
    return [(sorted(q.systems), q.mig_profile, q.limit) for q in quotas]


def quota_key(quotas: list[InstanceQuota]) -> dict[str, list[tuple[list[str], str, str]]]:
    """The quotas' hard limits as part of the pool's hash: absent where there are none (the hash stays the one from
    before quotas). Their hard limits (in `source`), not the room they leave: the room moves for a moment with each
    pod of tessera's the API server admits before its Deployment's status counts it, and must not re-plan then."""
    return {"quotas": [(sorted(q.systems), q.mig_profile, q.source) for q in quotas]} if quotas else {}


def lent_key(adapter_gpus: AdapterGpus) -> dict[str, list[tuple[str, int, int]]]:
    """The AdapterPools' GPUs lent only to systems above a poolPriority, as part of the pool's hashes: absent where
    there are none (the hashes stay the ones from before lending)."""
    lent = lent_of(adapter_gpus)
    return {"lent": sorted((node, index, above) for (node, index), above in lent.items())} if lent else {}


class Reconciler:
    def __init__(self, cluster: Cluster, settings: OperatorSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self.solves: PoolSolves[PoolSolve] = PoolSolves(settings.solve_workers)
        self.failed: dict[str, PoolSolve] = {}
        """The last failed solve of each pool (tried again after a resync, or at once for other inputs)."""
        self.actor = Actor(cluster, VllmClient(settings.adapter_server_timeout_s),
                           FetcherClient(settings.adapter_server_timeout_s))
        self.profiling = Profiling(cluster, settings)
        self.demand = DemandPlanner(settings.demand)
        self.adapter_pools = AdapterPools(self.actor, settings)
        self.preflight = preflight.Reporter()

    def stop(self) -> None:
        """Cancel the running solves (their worker processes end)."""
        self.solves.stop()

    # -- the whole cluster -----------------------------------------------------
    def reconcile(self) -> ReconcileResult:
        writes_before = self.cluster.writes
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
            outcome = outcomes[pool.key] = PoolOutcome(cordoned_up={n.name: n.hostname for n in seen.cordoned_up})
            self.profiling.prepare(pool, members.get(pool.key, []))
            # AdapterPools first, on whole GPUs the compound solve then leaves alone unless every compound system
            # outranks them; never on GPUs the plan in force holds for a system of their priority or higher
            # (adapter_pool_decide.py)
            servers = adapter_servers[pool.key] = self.adapter_pools.plan(
                pool, adapter_members.get(pool.key, []), children, seen.pool_states[pool.key], gpu_quotas,
                {s.ref.key: s.spec.pool_priority for s in members.get(pool.key, []) if s.valid and s.spec is not None})
            adapter_gpus[pool.key] = self.adapter_pools.reserved(servers, children)
            outcome.adapter_pools = reserved_for(servers)
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
            for node_name, mig in mig_off_for_servers(pool, servers, outcome.placement).items():
                outcome.mig.setdefault(node_name, mig)  # a profiling Job's layout first: the server waits for it
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
            namespaces = {s.ref.namespace for s in members.get(pool.key, [])}
            transitions = self.reconcile_children(pool, members.get(pool.key, []), children, outcome, paused[pool.key],
                                                  quota_rooms(seen.resource_quotas, namespaces, children))
            adapter_pools_acted += self.adapter_pools.act(pool, adapter_servers[pool.key], children, outcome)
            state = seen.pool_states[pool.key]
            pool_changed = (pool_paused[pool.key] is not None
                            and state.get("pool") != self.pool_hash(pool, adapter_gpus[pool.key], outcome.quotas,
                                                                 self.profiling.digest(pool.key)))
            for system in members.get(pool.key, []):
                why = paused[pool.key].get(system.ref.key)
                phase, conditions, summary = (
                    system_status(system, outcome) if why is None else paused_status(system, outcome, pause_message(
                        why, waiting_changes(system, spec_digest(system), state, pool_changed))))
                profiled = self.profiling.condition(system, pool) if summary is not None else []
                conditions = with_quota_transition(conditions, transitions.get(system.ref.key))
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
                  adapter_gpus: AdapterGpus, not_allowed: Mapping[str, tuple[str, str]],
                  quotas: list[InstanceQuota]) -> None:
        """The pool's plan: the stored one while its inputs are unchanged or the pool is paused, else a new solve,
        started here and taken by a later reconcile (pool_solves.py): the stored plan is shown meanwhile.
        Paused systems keep their last plan's share (pause.py); `adapter_gpus`, the AdapterPools' servers' GPUs,
        are left out of it or lent only to the systems that outrank them; `not_allowed` systems (pool_access.py) are invalid here, whatever their spec; the plan
        keeps within the namespaces' `quotas` (quotas.py)."""
        finished = self.solves.take(pool.key)
        if finished is not None and not pool_paused:
            if finished.data is None:
                self.failed[pool.key] = finished
            else:
                self.failed.pop(pool.key, None)
                checkpoint("after-solve")
                self.actor.apply([StorePlan(pool.key, reason="the pool's solve finished", data=finished.data)])
                state = finished.data  # what the ConfigMap holds now
        stored_plan = stored_pool_plan(state)
        kept = {k: Share.model_validate(v) for k, v in json.loads(state.get("kept", "{}")).items()}
        measured = self.profiling.digest(pool.key)

        spec_hash = {s.ref.key: spec_digest(s) for s in systems if s.spec is not None}
        invalid = {key: (entry["reason"], entry["message"]) for key, entry in json.loads(state.get("invalid", "{}")).items()
                   if still_invalid(entry, spec_hash.get(key), self.caps())}
        invalid.update(not_allowed)
        candidates = [s for s in systems if s.valid and s.ref.key not in invalid and s.ref.key not in paused]
        keep_last_good(kept, {s.ref.key for s in systems} - {s.ref.key for s in candidates}, stored_plan)
        inputs = self.inputs_hash(pool, candidates, spec_hash, kept, adapter_gpus, quotas, measured)
        plan = stored_plan
        if pool_paused:
            pass  # nothing is solved, stored or deleted: the plan that runs is the one shown
        elif not candidates and not kept:
            plan = None
            self.solves.cancel(pool.key)
            if state:
                self.actor.apply([DeletePlan(pool.key, reason="no system plans on the pool any more")])
        elif state.get("inputs") == inputs:
            unmeasured = [s for s in systems if awaits_measurement(*invalid.get(s.ref.key, ("", "")))]
            if unmeasured and self.solves.running(pool.key) is None:
                job = PoolJob(pool, systems, candidates, configs, kept, invalid, spec_hash, stored_plan, adapter_gpus,
                              quotas, dict(state), dict(paused), inputs, self.profiling.store(pool.key), measured)
                # a change of the pool's inputs replaces it: measuring never holds a plan back
                self.solves.start(pool.key, RunningSolve(inputs, follows_cancel=False),
                                  lambda cancel: self.measure_pool(job, unmeasured, cancel))
        else:
            job = PoolJob(pool, systems, candidates, configs, kept, invalid, spec_hash, stored_plan, adapter_gpus,
                          quotas, dict(state), dict(paused), inputs, self.profiling.store(pool.key), measured)
            solved, new_plan = self.plan_without_solve(job)
            if solved:
                plan = new_plan
                checkpoint("after-solve")
                self.actor.apply([StorePlan(pool.key, reason="the pool's inputs changed", data=self.plan_data(job, plan))])
            else:
                self.schedule_solve(job, outcome)
        outcome.plan, outcome.invalid, outcome.quotas = plan, invalid, quotas
        outcome.first_plan_solving = plan is None and self.solves.running(pool.key) is not None
        outcome.priorities = {s.ref.key: s.spec.pool_priority for s in candidates if s.spec is not None}
        outcome.pool_gpus = len(pool.slots())
        node_names = {n.name for n in pool.nodes}
        planned_for = {s.ref.key for s in candidates}
        placed = placed_gpus(plan) if plan else []
        gpus = [g for g in placed if g.node in node_names]
        outcome.left_nodes = nodes_left_by_system(placed, node_names, planned_for)
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

    def plan_without_solve(self, job: PoolJob) -> tuple[bool, Plan | None]:
        """(True, the plan) where the changed inputs need no solve: no system left to plan (only the kept shares of
        those left out), a stored plan that still stands (only systems that turned invalid left it), or the running
        plan re-sized for a demand-only change; else (False, None)."""
        if not job.candidates:
            return True, None
        present = {s.ref.key for s in job.systems}
        if stored_plan_stands(job.state, self.pool_hash(job.pool, job.adapter_gpus, job.quotas, job.measured_digest),
                              job.candidates, job.spec_hash, present):
            return True, job.stored_plan
        if job.quotas:
            return False, None  # replicas-only re-sizing knows no quotas: with any, a demand move re-plans in full
        resized = self.demand.replicas_only(
            job.stored_plan, job.candidates,
            planner_pool(job.pool, job.configs, reserved=reserved_gpus(job.kept), adapters=job.adapter_gpus),
            self.settings.planner, job.measured)
        return resized is not None, resized

    def schedule_solve(self, job: PoolJob, outcome: PoolOutcome) -> None:
        """Starts the pool's solve unless one runs that may (solve_decide.next_solve); a solve that failed for these
        very inputs is tried again after a resync's time, and its error shows until then and while it runs."""
        failed = self.failed.get(job.pool.key)
        if failed is not None and failed.inputs == job.inputs:
            outcome.solve_error = failed.error
            retry_in = failed.at + self.settings.resync_s - time.time()
            if retry_in > 0:
                outcome.requeue_after = retry_in
                return
        step = next_solve(self.solves.running(job.pool.key), job.inputs)
        if step is not Step.WAIT:
            self.solves.start(job.pool.key, RunningSolve(job.inputs, follows_cancel=step is Step.REPLACE),
                              lambda cancel: self.solve_pool(job, cancel))

    def solve_pool(self, job: PoolJob, cancel: threading.Event) -> PoolSolve:
        """The pool's solve (in a thread of `self.solves`): the systems the planner cannot use, or that exceed its
        caps on every try, are left out with their last good share, and the rest solved again without them. The
        size that fits of a system too large to plan is measured afterwards (measure_pool), so the pool's other
        systems do not wait for it."""
        candidates, kept, invalid = list(job.candidates), dict(job.kept), dict(job.invalid)
        present = {s.ref.key for s in job.systems}
        plan, error = job.stored_plan, None
        while candidates:
            protect = protection(job.stored_plan, json.loads(job.state.get("systems", "{}")), candidates, job.spec_hash)
            node_pool = planner_pool(job.pool, job.configs, reserved=reserved_gpus(kept), kept_for=protect.kept_for,
                                     adapters=job.adapter_gpus)
            plan, found, error = self.solve(job, candidates, node_pool, cancel, protect.floors)
            if not found:
                break
            invalid.update(found)  # left out, with their last good share: solve again without them
            candidates = [s for s in candidates if s.ref.key not in found]
            keep_last_good(kept, present - {s.ref.key for s in candidates}, job.stored_plan)
            if stored_plan_stands(job.state, self.pool_hash(job.pool, job.adapter_gpus, job.quotas, job.measured_digest),
                                  candidates, job.spec_hash, present):
                plan = job.stored_plan  # only systems that turned invalid left it
                break
        if error is not None:
            return PoolSolve(job.inputs, None, error, time.time())
        done = replace(job, candidates=candidates, kept=kept, invalid=invalid)
        return PoolSolve(job.inputs, self.plan_data(done, plan if candidates else None), None, time.time())

    def measure_pool(self, job: PoolJob, systems: list[SystemObject], cancel: threading.Event) -> PoolSolve:
        """The pool's stored plan again, the TooLargeToPlan messages of `systems` with the size measured to fit."""
        whole = planner_pool(job.pool, job.configs, adapters=job.adapter_gpus)
        invalid = {**job.invalid, **{s.ref.key: (st.TOO_LARGE_TO_PLAN, self.measure_fit(job, s, whole, cancel))
                                     for s in systems}}
        return PoolSolve(job.inputs, self.plan_data(replace(job, invalid=invalid), job.stored_plan), None, time.time())

    def plan_data(self, job: PoolJob, plan: Plan | None) -> dict[str, str]:
        """The pool's ConfigMap data for `plan`, made for `job.candidates` (stored_pool_plan reads it back)."""
        return {
            "inputs": self.inputs_hash(job.pool, job.candidates, job.spec_hash, job.kept, job.adapter_gpus, job.quotas,
                                       job.measured_digest),
            "pool": self.pool_hash(job.pool, job.adapter_gpus, job.quotas, job.measured_digest),
            "systems": dumps({s.ref.key: job.spec_hash[s.ref.key] for s in job.candidates}),
            "plan": plan.model_dump_json() if plan else "",
            "format": str(STATE_FORMAT),
            "kept": dumps({k: v.model_dump(mode="json") for k, v in job.kept.items()}),
            "paused": dumps({k: h for k, h in planned_hashes(job.state).items() if k in job.paused}),
            "invalid": dumps({key: {"hash": job.spec_hash[key], "reason": reason, "message": message,
                                    "caps": self.caps()}
                              for key, (reason, message) in job.invalid.items() if key in job.spec_hash}),
        }

    def caps(self) -> str:
        """The solver's caps, as a too-large system's record names them (other caps plan it again)."""
        return (f"memory cap {self.settings.solve_memory_mb} MiB, "
                f"time limit {self.settings.planner.time_limit_s:g} s")

    def pool_hash(self, pool: Pool, adapter_gpus: AdapterGpus, quotas: list[InstanceQuota],
                  measured: str) -> str:
        """The GPUs a plan is made on: the pool's, less the AdapterPools', and the quotas it keeps within (a stored
        plan stands only on the same: a lowered quota re-plans though no spec changed); `measured`, the digest of
        the pool's measured profiles."""
        return naming.digest({"format": STATE_FORMAT, "gpu": pool.gpu.name,
                              "slots": [(n.name, i) for n, i in pool.slots() if (n.name, i) not in reserved_of(adapter_gpus)],
                              **lent_key(adapter_gpus),
                              "options": self.settings.planner.model_dump(mode="json"),
                              "measured": measured, **quota_key(quotas)})

    def inputs_hash(self, pool: Pool, candidates: list[SystemObject], spec_hash: dict[str, str],
                    kept: dict[str, Share], adapter_gpus: AdapterGpus, quotas: list[InstanceQuota],
                    measured: str) -> str:
        """Everything the plan depends on: equal hash, the stored plan stands."""
        return naming.digest({
            "format": STATE_FORMAT, "gpu": pool.gpu.name,
            "free": [slot for slot in free_slots(pool, kept) if slot not in reserved_of(adapter_gpus)],
            **lent_key(adapter_gpus),
            "systems": sorted((s.ref.key, spec_hash[s.ref.key]) for s in candidates),
            "quotas": quota_list(quotas),
            "options": self.settings.planner.model_dump(mode="json"), "measured": measured})

    def solve(self, job: PoolJob, candidates: list[SystemObject], node_pool: NodePool, cancel: threading.Event,
              running: dict[str, float], time_limit_s: float | None = None,
              ) -> tuple[Plan | None, dict[str, tuple[str, str]], str | None]:
        """(the plan, {}, None), (None, the systems the planner cannot use, None) or (None, {}, why it failed).

        The planner serves as much demand as it can, so a system whose SLO no
        choice reaches may still get a plan, serving nothing; it is
        unplannable (Invalid) only when it serves nothing even alone on the
        pool, else the pool is too small (Degraded). A time limit with a
        checked plan is a plan; one without, or a planner failure, keeps
        what runs and retries, unless a system exceeds the solver's caps on
        every try (solve_decide.too_large): that one is left out; where none
        does, the pool's solve is tried once more with a longer time limit
        (solve_decide.longer_limit). Each system is checked alone without its
        namespace's quotas: a quota that leaves it nothing holds it back, it
        does not make its spec unplannable.
        """
        result = self.run_solver(job, candidates, node_pool, job.stored_plan, cancel, job.quotas, running,
                                 time_limit_s)
        node_pool = node_pool.without_kept()  # a system is unplannable alone on the pool, whatever runs there
        nodes_settling = settling(job.pool.nodes)
        if isinstance(result, (Planned, TimeLimit, Infeasible)) and result.plan is not None:
            starved = [s for s in candidates if serves_nothing(result.plan, s.ref.key)]
            if starved and nodes_settling:
                return None, {}, settling_message(nodes_settling)  # short of GPUs that are being re-partitioned
            culprits = self.find_unplannable(job, starved, node_pool, cancel) if starved else {}
            return (None, culprits, None) if culprits else (result.plan, {}, None)
        if isinstance(result, Infeasible) and nodes_settling:
            return None, {}, settling_message(nodes_settling)
        if isinstance(result, InvalidInput):
            # The system the planner names is checked alone first: in a joint solve one spec's bad profile
            # can surface under another system's name, and no good system may be held back by a bad one.
            named = [s for s in candidates if s.ref.key == result.system]
            culprits = self.find_unplannable(job, named, node_pool, cancel, nodes_settling) if named else {}
            if culprits:
                return None, culprits, None
        if isinstance(result, (Infeasible, InvalidInput)):
            culprits = self.find_unplannable(job, candidates, node_pool, cancel, nodes_settling)
            if culprits:
                return None, culprits, None
        if exceeds_caps(result) and time_limit_s is None:
            alone = self.each_alone(job, candidates, node_pool, cancel)
            culprits = {s.ref.key: (st.TOO_LARGE_TO_PLAN, too_large_message(size_of(s.spec), None, self.caps()))
                        for s in candidates if s.spec is not None and s.ref.key in too_large(result, alone)}
            if culprits:
                return None, culprits, None
            longer = longer_limit(result, alone, self.settings.planner.time_limit_s)
            if longer is not None and not cancel.is_set():
                return self.solve(job, candidates, node_pool, cancel, running, longer)
        return None, {}, result.reason if not isinstance(result, Planned) else "no plan"

    def run_solver(self, job: PoolJob, systems: list[SystemObject], node_pool: NodePool, current: Plan | None,
                   cancel: threading.Event, quotas: list[InstanceQuota] | None = None,
                   running: dict[str, float] | None = None, time_limit_s: float | None = None) -> Outcome:
        """One solve in the planner's worker process (at the settings' time limit unless `time_limit_s`); the
        solve's thread waits, `cancel` stops it."""
        options = self.settings.planner if time_limit_s is None else \
            self.settings.planner.model_copy(update={"time_limit_s": time_limit_s})
        request = PlanRequest(
            systems=[SystemInput(namespace=s.ref.namespace, name=s.ref.name, spec=s.spec) for s in systems],
            pool=node_pool, options=options, current=current, measured=job.measured,
            quotas=quotas or [], running=running or {})
        started = time.perf_counter()
        with metrics.SOLVE_SECONDS.labels(job.pool.key).time():
            handle = start_solve(request, memory_limit_mb=self.settings.solve_memory_mb)
            try:
                result = wait_for_outcome(handle, cancel)
            finally:
                if not handle.done():
                    handle.cancel()
        plannable = sum(len(n.plannable_devices()) for n in node_pool.nodes)
        log.info("pool %s: solve of %d system(s) on %d GPUs: %s %s (%.1f s)%s", job.pool.key, len(systems), plannable,
                 result.kind, getattr(result, "reason", ""), time.perf_counter() - started, solve_split(result))
        return result

    def find_unplannable(self, job: PoolJob, systems: list[SystemObject], node_pool: NodePool,
                         cancel: threading.Event, nodes_settling: list[str] | None = None) -> dict[str, tuple[str, str]]:
        """Each system alone on the pool: those the planner refuses or that serve nothing, with the planner's why
        (solve_decide.alone_verdict; none serves nothing while `nodes_settling`)."""
        found = {}
        for system in systems:
            verdict = alone_verdict(self.run_solver(job, [system], node_pool, None, cancel), system.ref.key,
                                    nodes_settling or [])
            if verdict is not None:
                found[system.ref.key] = verdict
        return found

    def each_alone(self, job: PoolJob, systems: list[SystemObject], node_pool: NodePool,
                   cancel: threading.Event) -> dict[str, Outcome]:
        """Each system's solve alone on the pool, after the pool's exceeded the solver's caps."""
        return {s.ref.key: self.run_solver(job, [s], node_pool, None, cancel) for s in systems}

    def measure_fit(self, job: PoolJob, system: SystemObject, node_pool: NodePool, cancel: threading.Event) -> str:
        """The TooLargeToPlan message with the size measured to fit: smaller cuts of the system, each solved alone
        under the same caps (solve_decide.next_probe)."""
        assert system.spec is not None
        size, tried = size_of(system.spec), dict[Size, bool]()
        while (probe := next_probe(size, tried)) is not None:
            smaller = replace(system, spec=cut_to(system.spec, probe))
            tried[probe] = fits_caps(self.run_solver(job, [smaller], node_pool, None, cancel))
        message = too_large_message(size, tried, self.caps())
        log.warning("pool %s: %s: %s", job.pool.key, system.ref.key, message)
        return message

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
                           outcome: PoolOutcome, paused: Mapping[str, str],
                           rooms: Mapping[tuple[str, str], Room]) -> dict[str, str]:
        """The plan's children applied and those it no longer wants deleted, make before break; a change a
        namespace's quota does not fit beside the old pods moves one replica at a time (quota_transitions.py):
        returns each stepped system's key -> the step's message."""
        planned, outcome.deployments = planned_children(pool, systems, outcome, self.settings,
                                                        self.profiling.store(pool.key))
        outcome.live = live_children(children, systems)
        outcome.awaited = replacements_awaited(planned, outcome.live, outcome)
        outcome.in_place = replacements_in_place(planned, outcome.live, outcome)
        outcome.without_replacement = self.settings.without_replacement
        breaks = {*outcome.in_place, *(("Deployment", *held) for held in held_in_place(outcome))}
        stepped, steps, transitions, holding = step_children(
            planned, outcome.live, rooms, systems, set(paused), breaks, st.now_rfc3339(),
            hosts_without_room_beside_the_old(planned, outcome.live, outcome))
        decided = kept_while_stepped(decide_children(stepped, systems, outcome.live, outcome), holding)
        self.actor.apply(without_paused([*decided, *steps], paused))
        return transitions

    # -- status ----------------------------------------------------------------
    def write_status(self, system: SystemObject, outcome: PoolOutcome, phase: str, conditions: list[st.Condition],
                     summary: dict[str, object] | None) -> None:
        now = st.now_rfc3339()
        new = st.build_status(system.ref.generation, phase, conditions, summary, system.status, now,
                              self.demand.status_of(system, conditions), frontend_status(system, self.settings, outcome))
        self.actor.apply(decide_status(system, new, now))



