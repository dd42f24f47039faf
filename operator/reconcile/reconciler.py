"""The level-triggered reconcile: read the cluster -> plan -> desired objects -> diff -> apply.

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
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from tessera.operator import metrics, naming
from tessera.operator.reconcile import builders
from tessera.operator.api import status as st
from tessera.operator.cluster import Cluster, dumps
from tessera.operator.gpus.planner_input import MigConfigs, mig_configs, planner_pool
from tessera.operator.profiling.in_cluster import PlannedNode, Profiling
from tessera.operator.profiling.jobs import in_transition
from tessera.operator.demand.planning import DemandPlanner
from tessera.operator.gpus.node_plans import NodePlan, Placement, PlacedGpu, Share, place, placed_gpus, share_of
from tessera.operator.gpus.discovery import Pool, group_pools, node_facts, node_profile_name
from tessera.operator.settings import OperatorSettings
from tessera.operator.api.systems import SystemObject, read_system
from tessera.operator.testhooks import checkpoint
from tessera.planner.contract import (
    Infeasible, InvalidInput, Planned, PlannerFailed, PlanRequest, SystemInput, TimeLimit,
)
from tessera.planner.nodes import NodePool
from tessera.planner.plan import InstancePlan, Plan
from tessera.planner.worker import SolveCancelled, SolveHandle, start_solve

log = logging.getLogger("tessera.operator")
POOL_ANNOTATION = "tessera.ai/gpu-product"
"""On a system: the GPU product (GFD label value) of the pool to plan it in; default the largest pool."""
MIG_POLL_S = 2.0
SOLVE_POLL_S = 0.05
STATE_FORMAT = 2
"""Of the pool's stored plan: 2 places GPUs by (node, device) as the planner named them."""
Json = dict[str, Any]
"""An object as the API server returns it, or a body tessera writes."""
Outcome = Planned | TimeLimit | Infeasible | InvalidInput | PlannerFailed


@dataclass
class NodeMig:
    """Where a node stands with its planned layout."""

    config: str
    entries: list[Json]
    expected: dict[str, int]
    applied: bool = False
    failed: bool = False
    blocked_by: list[str] = field(default_factory=list)


@dataclass
class PoolOutcome:
    """What one pool reconcile decided, for the status of its systems."""

    plan: Plan | None = None
    placement: Placement = field(default_factory=lambda: Placement({}, {}, {}))
    solve_error: str | None = None
    invalid: dict[str, tuple[str, str]] = field(default_factory=dict)
    """system key -> (reason, message) for systems the planner cannot use."""
    mig: dict[str, NodeMig] = field(default_factory=dict)
    gpus_of: dict[str, list[PlacedGpu]] = field(default_factory=dict)
    deployments: dict[str, list[Json]] = field(default_factory=dict)
    """system key -> the Deployments its plan wants (applied or waiting for MIG)."""
    live: dict[tuple[str, str, str], Json] = field(default_factory=dict)
    requeue_after: float | None = None


@dataclass
class ReconcileResult:
    requeue_after: float | None
    writes: int


class Reconciler:
    def __init__(self, cluster: Cluster, settings: OperatorSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self.cancel = threading.Event()
        self.profiling = Profiling(cluster, settings)
        self.demand = DemandPlanner(settings.demand)

    # -- the whole cluster -----------------------------------------------------
    def reconcile(self) -> ReconcileResult:
        writes_before = self.cluster.writes
        self.cancel.clear()  # a trigger from here on means this reconcile read a world that no longer is
        systems = [read_system(obj) for obj in self.cluster.list_systems()]
        facts = [f for f in (node_facts(n, naming.MIG_CONFIG_REQUESTED) for n in self.cluster.list_nodes()) if f]
        pools, _unknown = group_pools(facts)
        children = self.cluster.list_children()
        systems = self.demand.apply(systems, children)
        members = assign_to_pools(systems, pools)
        mig_configmap = self.cluster.mig_configmap_name()
        configmap = self.cluster.read_configmap(self.settings.gpu_operator_namespace, mig_configmap)
        # NVIDIA's defaults (all-disabled: a fresh node) mean the same in every mig-parted file, even one not written yet.
        configs = {**builders.NVIDIA_DEFAULT_CONFIGS,
                   **mig_configs(((configmap or {}).get("data") or {}).get(builders.MIG_PARTED_KEY))}
        self.profiling.collect()
        outcomes = {}
        for pool in pools:
            outcome = outcomes[pool.key] = PoolOutcome()
            self.profiling.prepare(pool, members.get(pool.key, []))
            self.plan_pool(pool, members.get(pool.key, []), outcome, configs)
            self.desired_mig(pool, outcome)
            for node_name, node_plan in self.profiling.launch(pool, outcome.plan, members.get(pool.key, []),
                                                              self.settings.planner.batches,
                                                              planned_nodes(pool, outcome)).items():
                self.profiling_mig(pool, outcome, node_name, node_plan)
        # One ConfigMap serves every pool: its configs are decided for all pools at once.
        written = self.write_mig_configs(list(outcomes.values()), mig_configmap, configmap, in_use=self.cluster.mig_configs_in_use())
        requeue: list[float] = []
        for pool in pools:
            outcome = outcomes[pool.key]
            self.relabel_nodes(pool, outcome, written)
            self.reconcile_children(pool, members.get(pool.key, []), children, outcome)
            for system in members.get(pool.key, []):
                phase, conditions, summary = system_status(system, outcome)
                profiled = self.profiling.condition(system, pool) if summary is not None else []
                self.write_status(system, *self.demand.decorate(system, phase, conditions + profiled, summary))
            metrics.record_pool(pool.key, outcome.plan, pool.gpus, [
                layout for node, node_plan in outcome.placement.nodes.items()
                if outcome.mig.get(node) and outcome.mig[node].applied for layout in node_plan.layouts.values()])
            if outcome.requeue_after is not None:
                requeue.append(outcome.requeue_after)
        for system in members.get(None, []):
            self.write_status(system, *no_pool_status(system, pools))
        if self.demand.watching(systems):
            requeue.append(self.settings.demand.poll_s)
        return ReconcileResult(min(requeue, default=None), self.cluster.writes - writes_before)

    # -- one pool's plan ---------------------------------------------------------
    def plan_pool(self, pool: Pool, systems: list[SystemObject], outcome: PoolOutcome, configs: MigConfigs) -> None:
        """The pool's plan: the stored one while its inputs are unchanged, else a new solve."""
        state = self.cluster.read_pool_state(pool.key)
        stored_plan = stored_pool_plan(state)
        kept = {k: Share.model_validate(v) for k, v in json.loads(state.get("kept", "{}")).items()}
        known_invalid = json.loads(state.get("invalid", "{}"))
        previous_gpus = placed_gpus(stored_plan) if stored_plan else []

        spec_hash = {s.ref.key: naming.digest(s.spec.model_dump(mode="json")) for s in systems if s.spec is not None}
        invalid = {key: (entry["reason"], entry["message"]) for key, entry in known_invalid.items()
                   if spec_hash.get(key) == entry["hash"]}
        candidates = [s for s in systems if s.valid and s.ref.key not in invalid]

        def keep_last_good(keys: set[str]) -> None:
            """Systems left out keep their last good share; systems fixed or deleted give theirs back."""
            for key in keys - kept.keys():
                if stored_plan and any(t.system == key for t in stored_plan.tasks):
                    kept[key] = share_of(key, stored_plan.tasks, previous_gpus)
            for key in set(kept) - keys:
                del kept[key]

        keep_last_good({s.ref.key for s in systems} - {s.ref.key for s in candidates})
        plan = stored_plan
        if not candidates and not kept:
            plan = None
            if state:
                self.cluster.delete_pool_state(pool.key)
        elif state.get("inputs") != self.inputs_hash(pool, candidates, spec_hash, kept):
            while candidates:
                if stored_plan_stands(state, self.pool_hash(pool), candidates, spec_hash):
                    plan = stored_plan  # only systems that turned invalid left it
                    break
                node_pool = planner_pool(pool, configs, reserved=reserved_gpus(kept))
                plan, found = self.solve(pool.key, candidates, node_pool, stored_plan, outcome)
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
                self.cluster.write_pool_state(pool.key, {
                    "inputs": self.inputs_hash(pool, candidates, spec_hash, kept),
                    "pool": self.pool_hash(pool),
                    "systems": dumps({s.ref.key: spec_hash[s.ref.key] for s in candidates}),
                    "plan": plan.model_dump_json() if plan else "",
                    "format": str(STATE_FORMAT),
                    "kept": dumps({k: v.model_dump(mode="json") for k, v in kept.items()}),
                    "invalid": dumps({key: {"hash": spec_hash[key], "reason": reason, "message": message}
                                      for key, (reason, message) in invalid.items() if key in spec_hash}),
                })
                checkpoint("after-plan-stored")
        outcome.plan, outcome.invalid = plan, invalid
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

    def pool_hash(self, pool: Pool) -> str:
        return naming.digest({"format": STATE_FORMAT, "gpu": pool.gpu.name, "slots": [(n.name, i) for n, i in pool.slots()],
                              "options": self.settings.planner.model_dump(mode="json"),
                              "measured": self.profiling.digest(pool.key)})

    def inputs_hash(self, pool: Pool, candidates: list[SystemObject], spec_hash: dict[str, str],
                    kept: dict[str, Share]) -> str:
        """Everything the plan depends on: equal hash, the stored plan stands."""
        return naming.digest({
            "format": STATE_FORMAT, "gpu": pool.gpu.name, "free": free_slots(pool, kept),
            "systems": sorted((s.ref.key, spec_hash[s.ref.key]) for s in candidates),
            "options": self.settings.planner.model_dump(mode="json"), "measured": self.profiling.digest(pool.key)})

    def solve(self, pool_key: str, candidates: list[SystemObject], node_pool: NodePool, current: Plan | None,
              outcome: PoolOutcome) -> tuple[Plan | None, dict[str, tuple[str, str]]]:
        """(the plan, {}) or (None, the systems the planner cannot use); failures go to `outcome.solve_error`.

        The planner serves as much demand as it can, so a system whose SLO no
        choice reaches may still get a plan, serving nothing; it is
        unplannable (Invalid) only when it serves nothing even alone on the
        pool, else the pool is too small (Degraded). A time limit with a
        checked plan is a plan; one without, or a planner failure, keeps
        what runs and retries.
        """
        resized = self.demand.replicas_only(current, candidates, node_pool, self.settings.planner,
                                            self.profiling.store(pool_key))
        if resized is not None:
            return resized, {}
        result = self.run_solver(pool_key, candidates, node_pool, current)
        if isinstance(result, (Planned, TimeLimit, Infeasible)) and result.plan is not None:
            starved = [s for s in candidates if _serves_nothing(result.plan, s.ref.key)]
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
                found[key] = (st.SLO_UNREACHABLE, "; ".join([result.reason, *_about(result.diagnosis, key)]))
            elif isinstance(result, (Planned, TimeLimit, Infeasible)) and result.plan is not None \
                    and _serves_nothing(result.plan, key):
                found[key] = (st.SLO_UNREACHABLE, "; ".join(_about(result.plan.diagnosis, key))
                              or "no choice meets the SLOs")
        return found

    def run_solver(self, pool_key: str, systems: list[SystemObject], node_pool: NodePool,
                   current: Plan | None) -> Outcome:
        """One solve in the planner's worker process; the reconcile thread waits, a trigger cancels it."""
        request = PlanRequest(
            systems=[SystemInput(namespace=s.ref.namespace, name=s.ref.name, spec=s.spec) for s in systems],
            pool=node_pool, options=self.settings.planner, current=current,
            measured=self.profiling.store(pool_key))
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
    def desired_mig(self, pool: Pool, outcome: PoolOutcome) -> None:
        """Per planned node: its mig-parted config (content-addressed) and the profile counts it will advertise."""
        for node_name, node_plan in sorted(outcome.placement.nodes.items()):
            node = pool.node(node_name)
            names = {p.name: node_profile_name(p, node.advertised) for p in pool.gpu.profiles}
            entries = builders.mig_parted_entries(node_plan, names)
            outcome.mig[node_name] = NodeMig(naming.mig_config_name(entries), entries,
                                             builders.advertised_counts_expected(node_plan, names))

    def profiling_mig(self, pool: Pool, outcome: PoolOutcome, node_name: str, node_plan: NodePlan) -> None:
        """A free node's layout for profiling, through the same ConfigMap and relabel as a plan's layouts.

        A node mig-manager has not answered for yet keeps the config it was asked for.
        """
        node = pool.node(node_name)
        names = {p.name: node_profile_name(p, node.advertised) for p in pool.gpu.profiles}
        entries = builders.mig_parted_entries(node_plan, names)
        mig = NodeMig(naming.mig_config_name(entries), entries, builders.advertised_counts_expected(node_plan, names))
        if in_transition(node) and node.mig_config != mig.config:
            return
        outcome.mig[node_name] = mig

    def write_mig_configs(self, outcomes: list[PoolOutcome], name: str, configmap: Json | None,
                          in_use: set[str]) -> dict[str, float]:
        """Adds every wanted config to the ConfigMap `name` (the ClusterPolicy's); returns when each was written."""
        namespace = self.settings.gpu_operator_namespace
        annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
        text = ((configmap or {}).get("data") or {}).get(builders.MIG_PARTED_KEY)
        wanted = {mig.config: mig.entries for outcome in outcomes for mig in outcome.mig.values()}
        if configmap is None and not wanted:
            return {}
        new_text = builders.mig_parted_text(text, wanted, keep=in_use)
        prefix = naming.MIG_CONFIG_WRITTEN_PREFIX
        written = {key.removeprefix(prefix): float(value) for key, value in annotations.items()
                   if key.startswith(prefix)}
        now = time.time()
        missing = {config: now for config in wanted if config not in written}
        kept_configs = set(yaml.safe_load(new_text)["mig-configs"])
        dropped = {config for config in written if config not in kept_configs}
        if new_text != text or missing or dropped:
            stamps = {prefix + config: f"{stamp:.0f}" for config, stamp in missing.items()}
            stamps.update({prefix + config: None for config in dropped})
            self.cluster.write_configmap(namespace, name, {builders.MIG_PARTED_KEY: new_text}, stamps,
                                         exists=configmap is not None)
            written.update(missing)
            checkpoint("after-mig-configmap")
        return written

    def relabel_nodes(self, pool: Pool, outcome: PoolOutcome, written: dict[str, float]) -> None:
        """Part 1: nodes whose GPUs no pod holds get their planned layout; applied counts only on a later success."""
        now = time.time()
        requeue = []
        for node_name, mig in sorted(outcome.mig.items()):
            node = pool.node(node_name)
            if node.mig_config == mig.config:
                mig.applied = node.mig_state == "success" and node.advertised_counts() == mig.expected
                mig.failed = node.mig_state == "failed"
                if not (mig.applied or mig.failed):
                    requeue.append(MIG_POLL_S)
                continue
            mig.blocked_by = self.cluster.gpu_pods_on(node_name)
            if mig.blocked_by:
                continue  # re-partitioning a serving node (cordon, move, relabel) is not done yet
            wait = written.get(mig.config, now) + self.settings.mig_config_propagation_s - now
            if wait > 0:
                requeue.append(wait)
                continue
            self.cluster.patch_node(node_name, builders.node_relabel_patch(mig.config))
            log.info("node %s: asked mig-manager for MIG config %s", node_name, mig.config)
            checkpoint("after-node-relabel")
            requeue.append(MIG_POLL_S)
        if outcome.requeue_after is not None:
            requeue.append(outcome.requeue_after)
        outcome.requeue_after = min(requeue, default=None)

    # -- Deployments and Services ---------------------------------------------
    def reconcile_children(self, pool: Pool, systems: list[SystemObject], children: list[Json],
                           outcome: PoolOutcome) -> None:
        planned = self.planned_children(pool, systems, outcome)
        by_key = {s.ref.key: s for s in systems}
        live = {(c["kind"], c["metadata"]["namespace"], c["metadata"]["name"]): c for c in children
                if owner_key(c) in by_key}
        outcome.live = live
        for key, (body, ready_to_apply) in sorted(planned.items(), key=lambda item: (item[0][0] != "Service", item[0])):
            current = live.get(key)
            if not ready_to_apply or (current is not None and builders.applied_hash(current) == builders.applied_hash(body)):
                continue
            if key[0] == "Deployment":
                checkpoint("after-mig-success")
            self.cluster.apply(body)
            checkpoint(f"after-{key[0].lower()}")
        if outcome.solve_error is not None:
            return  # a failed solve never deletes running servers
        for key, child in sorted(live.items()):
            owner = by_key[owner_key(child) or ""]
            if key in planned or not owner.valid or owner.ref.key in outcome.invalid:
                continue  # planned, or an invalid system's last good plan, which keeps running
            self.cluster.delete_child(child)
            checkpoint("after-stale-delete")

    def planned_children(self, pool: Pool, systems: list[SystemObject],
                         outcome: PoolOutcome) -> dict[tuple[str, str, str], tuple[Json, bool]]:
        """Every child the placement wants -> (body, whether to apply it now: its node's layout is applied)."""
        placement = outcome.placement
        planned: dict[tuple[str, str, str], tuple[Json, bool]] = {}
        for system in systems:
            if system.spec is None or system.ref.key in outcome.invalid:
                continue  # an invalid system's children stay exactly as its last good plan made them
            for system_key, task_name in sorted(placement.tasks):
                if system_key != system.ref.key:
                    continue
                body = builders.service(system.ref, task_name, self.settings.server_port)
                planned[("Service", system.ref.namespace, body["metadata"]["name"])] = (body, True)
            for key, replicas in sorted(placement.servers_of(system.ref.key).items()):
                node = pool.node(key.node)
                task = placement.tasks[(key.system, key.task)]
                profile = node_profile_name(pool.gpu.profile(task.configs[key.config].segment.mig_profile),
                                            node.advertised)
                body = builders.deployment(system.ref, system.spec, key, task, replicas, node.hostname, profile,
                                           self.settings)
                mig = outcome.mig.get(key.node)
                planned[("Deployment", system.ref.namespace, body["metadata"]["name"])] = (
                    body, mig is not None and mig.applied)
                outcome.deployments.setdefault(system.ref.key, []).append(body)
        return planned

    # -- status ----------------------------------------------------------------
    def write_status(self, system: SystemObject, phase: str, conditions: list[st.Condition],
                     summary: Json | None) -> None:
        now = st.now_rfc3339()
        new = st.build_status(system.ref.generation, phase, conditions, summary, system.status, now,
                              self.demand.status_of(system, conditions))
        if not st.status_changed(system.status, new):
            return
        self.cluster.patch_system_status(system.ref.namespace, system.ref.name, new)
        checkpoint("after-status")
        for event in st.events_for(system.status, new):
            self.cluster.post_event(st.event_body(system.ref, event, now))
            checkpoint("after-event")


def assign_to_pools(systems: list[SystemObject], pools: list[Pool]) -> dict[str | None, list[SystemObject]]:
    """Each system to the pool its annotation names, else to the pool with the most GPUs."""
    default = max(pools, key=lambda p: (p.gpus, p.key)).key if pools else None
    known = {p.key for p in pools}
    members: dict[str | None, list[SystemObject]] = {}
    for system in systems:
        wanted = system.annotations.get(POOL_ANNOTATION)
        key = wanted if wanted in known else (None if wanted else default)
        members.setdefault(key, []).append(system)
    return members


def stored_plan_stands(state: dict[str, str], pool_hash: str, candidates: list[SystemObject],
                       spec_hash: dict[str, str]) -> bool:
    """The stored plan still serves these systems: same pool, each of them planned with its current spec.

    Systems it was made for that are no longer candidates have turned
    invalid (a deletion changes the pool's inputs otherwise: the pool plans again).
    """
    if not state.get("plan") or state.get("pool") != pool_hash:
        return False
    planned = json.loads(state.get("systems", "{}"))
    return all(planned.get(s.ref.key) == spec_hash[s.ref.key] for s in candidates)


def stored_pool_plan(state: dict[str, str]) -> Plan | None:
    """The pool's stored plan; None for none or one of an older format (the pool plans again)."""
    if not state.get("plan") or state.get("format") != str(STATE_FORMAT):
        return None
    return Plan.model_validate_json(state["plan"])


def reserved_gpus(kept: dict[str, Share]) -> set[tuple[str, int]]:
    """(node, GPU) held by the last good plans of invalid systems: left out of the solve."""
    return {(g.node, g.gpu) for share in kept.values() for g in share.gpus}


def _about(diagnosis: list[str], key: str) -> list[str]:
    return [line.removeprefix(f"{key}: ") for line in diagnosis]


def _serves_nothing(plan: Plan, system: str) -> bool:
    summary = next((s for s in plan.systems if s.system == system), None)
    return summary is not None and summary.demand_rps > 0 and summary.served_rps <= 0


def free_slots(pool: Pool, kept: dict[str, Share]) -> list[tuple[str, int]]:
    """The pool's GPUs that no kept share holds, in the pool's slot order."""
    reserved = reserved_gpus(kept)
    return [(node.name, index) for node, index in pool.slots() if (node.name, index) not in reserved]


def owner_key(child: Json) -> str | None:
    """`namespace/name` of the CompoundInferenceSystem that controls a child."""
    for owner in child["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == "CompoundInferenceSystem" and owner.get("controller"):
            return f"{child['metadata']['namespace']}/{owner['name']}"
    return None


# -- what a system's status says ----------------------------------------------

Verdict = tuple[str, list[st.Condition], Json | None]
"""(phase, conditions, plan summary or None to keep the last one)."""


def no_pool_status(system: SystemObject, pools: list[Pool]) -> Verdict:
    if not system.valid:
        return invalid_status(system, st.INVALID_SPEC, system.error or "", kept=False)
    wanted = system.annotations.get(POOL_ANNOTATION)
    message = (f"no schedulable nodes of GPU product {wanted!r} (annotation {POOL_ANNOTATION})" if wanted
               else "no schedulable GPU nodes with GPU feature discovery labels of a product tessera knows")
    return st.PHASE_PENDING, [
        st.Condition(st.READY, False, st.NO_GPU_POOL, message),
        st.Condition(st.PLANNED, False, st.NO_GPU_POOL, message),
        st.Condition(st.INVALID, False, st.SPEC_VALID, "the spec is valid"),
    ], None


def invalid_status(system: SystemObject, reason: str, message: str, kept: bool) -> Verdict:
    planned = (st.Condition(st.PLANNED, True, st.LAST_GOOD_PLAN,
                            "the last good plan keeps running until the spec is fixed or the system deleted")
               if kept else st.Condition(st.PLANNED, False, reason, "left out of the pool's plan until fixed"))
    return st.PHASE_INVALID, [
        st.Condition(st.READY, False, reason, message),
        planned,
        st.Condition(st.INVALID, True, reason, message),
    ], None


def system_status(system: SystemObject, outcome: PoolOutcome) -> Verdict:
    key = system.ref.key
    kept = any(k.system == key for k in outcome.placement.servers)
    if not system.valid:
        return invalid_status(system, st.INVALID_SPEC, system.error or "", kept)
    if key in outcome.invalid:
        return invalid_status(system, *outcome.invalid[key], kept)
    valid = st.Condition(st.INVALID, False, st.SPEC_VALID, "the spec is valid and the planner can use it")
    plan = outcome.plan
    if plan is None or not any(s.system == key for s in plan.systems):
        reason, message = ((st.SOLVE_FAILED, f"the pool's solve failed: {outcome.solve_error}; retrying")
                           if outcome.solve_error else (st.PLANNING, "planning the pool"))
        return st.PHASE_PENDING, [st.Condition(st.READY, False, reason, message),
                                  st.Condition(st.PLANNED, False, reason, message),
                                  st.Condition(st.PROGRESSING, True, reason, message), valid], None

    gpus = outcome.gpus_of.get(key, [])
    summary = st.plan_summary(plan, key, gpus=len(gpus), slices=_slices(plan, gpus, key))
    conditions = [valid, _planned(plan, summary, outcome), _degraded(plan, key, summary),
                  _profiles_estimated(summary)]
    mig = _mig_condition(outcome, key)
    servers = _servers_condition(system, outcome)
    conditions.append(mig)
    ready = mig.status and servers.status
    if ready:
        conditions.append(st.Condition(st.READY, True, st.SERVERS_READY, servers.message))
        conditions.append(st.Condition(st.PROGRESSING, False, st.RECONCILED, "the cluster matches the plan"))
        degraded = not _serves_all(summary)
        return (st.PHASE_DEGRADED if degraded else st.PHASE_READY), conditions, summary
    blocker = servers if mig.status else mig
    conditions.append(st.Condition(st.READY, False, blocker.reason, blocker.message))
    stuck = blocker.reason in (st.MIG_FAILED, st.NODE_IN_USE)
    conditions.append(st.Condition(st.PROGRESSING, not stuck, blocker.reason, blocker.message))
    return st.PHASE_DEPLOYING, conditions, summary


def _planned(plan: Plan, summary: Json, outcome: PoolOutcome) -> st.Condition:
    gap = plan.solver.mip_gap
    text = (f"{summary['slices']} compute slices on {summary['gpus']} GPU(s) of {plan.gpu}; solver "
            f"{plan.solver.status}, MIP gap {f'{100 * gap:.2f}%' if math.isfinite(gap) else 'unknown'}")
    if outcome.solve_error:
        return st.Condition(st.PLANNED, True, st.LAST_GOOD_PLAN,
                            f"the last plan keeps running ({text}); the re-plan failed: {outcome.solve_error}")
    return st.Condition(st.PLANNED, True, st.PLAN_FOUND, text)


def _served_fraction(summary: Json) -> float:
    demand = summary["demandRequestsPerSecond"]
    return summary["servedRequestsPerSecond"] / demand if demand > 0 else 1.0


def _serves_all(summary: Json) -> bool:
    return _served_fraction(summary) >= 1 - 1e-5


def _degraded(plan: Plan, key: str, summary: Json) -> st.Condition:
    if _serves_all(summary):
        return st.Condition(st.DEGRADED, False, st.DEMAND_SERVED, "the plan serves all demand within the SLOs")
    why = "; ".join(line.removeprefix(f"{key}: ") for line in plan.diagnosis if line.startswith(f"{key}:"))
    return st.Condition(st.DEGRADED, True, st.INSUFFICIENT_CAPACITY,
                        f"the pool serves {100 * _served_fraction(summary):.0f}% of the demand "
                        f"({summary['servedRequestsPerSecond']:g} of {summary['demandRequestsPerSecond']:g} "
                        "requests/s)"
                        + (f": {why}" if why else "") + "; add GPU nodes to the pool")


def _profiles_estimated(summary: Json) -> st.Condition:
    sources = summary["profileSources"]
    estimated = sources.get("estimated", 0)
    if estimated:
        return st.Condition(st.PROFILES_ESTIMATED, True, st.ESTIMATED,
                            f"{estimated} of {sum(sources.values())} replicas are planned on the built-in "
                            "estimate; profiler Jobs (operator --profiler-image) or profiles in the spec replace it")
    return st.Condition(st.PROFILES_ESTIMATED, False, st.MEASURED_OR_GIVEN, "every replica rests on a "
                        "measured or given profile")


def planned_nodes(pool: Pool, outcome: PoolOutcome) -> dict[str, PlannedNode]:
    """The plan's nodes for profiling: whether each advertises its planned layout, and the instances servers take."""
    used: dict[str, dict[str, int]] = {}
    seen: set[tuple[str, int]] = set()
    for gpus in outcome.gpus_of.values():
        for gpu in gpus:
            if (gpu.node, gpu.gpu) in seen:
                continue
            seen.add((gpu.node, gpu.gpu))
            for instance in gpu.instances:
                if instance.system:
                    counts = used.setdefault(gpu.node, {})
                    counts[instance.mig_profile] = counts.get(instance.mig_profile, 0) + 1
    found = {}
    for name, mig in outcome.mig.items():
        node = pool.node(name)
        applied = node.mig_config == mig.config and node.mig_state == "success" and node.advertised_counts() == mig.expected
        found[name] = PlannedNode(applied=applied, used=used.get(name, {}))
    return found


def _mig_condition(outcome: PoolOutcome, key: str) -> st.Condition:
    nodes = sorted({k.node for k in outcome.placement.servers_of(key)})
    states = {node: outcome.mig[node] for node in nodes if node in outcome.mig}
    failed = [n for n, m in states.items() if m.failed]
    blocked = [n for n, m in states.items() if m.blocked_by and not m.applied]
    pending = [n for n, m in states.items() if not m.applied]
    if failed:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.MIG_FAILED,
                            f"mig-manager reported failed on {', '.join(failed)}; see its logs on those nodes")
    if blocked:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.NODE_IN_USE,
                            f"nodes {', '.join(blocked)} need a new MIG layout but pods hold their GPUs "
                            f"(e.g. {outcome.mig[blocked[0]].blocked_by[0]}); re-partitioning serving nodes "
                            "is not supported yet")
    if pending:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.MIG_PENDING,
                            f"waiting for mig-manager on {len(pending)} of {len(nodes)} node(s): {', '.join(pending[:5])}")
    return st.Condition(st.MIG_LAYOUT_APPLIED, True, st.MIG_APPLIED,
                        f"the planned MIG layouts are applied on {len(nodes)} node(s)")


def _servers_condition(system: SystemObject, outcome: PoolOutcome) -> st.Condition:
    wanted = outcome.deployments.get(system.ref.key, [])
    ready = 0
    for body in wanted:
        live = outcome.live.get(("Deployment", body["metadata"]["namespace"], body["metadata"]["name"]))
        if live is not None and _available(live, body):
            ready += 1
    message = f"{ready} of {len(wanted)} model-server Deployments available"
    if ready == len(wanted):
        return st.Condition(st.READY, True, st.SERVERS_READY, message)
    was_ready = any(c.get("type") == st.READY and c.get("status") == "True"
                    for c in system.status.get("conditions") or [])
    return st.Condition(st.READY, False, st.SERVERS_UNAVAILABLE if was_ready else st.SERVERS_STARTING, message)


def _available(live: Json, body: Json) -> bool:
    status = live.get("status") or {}
    replicas = body["spec"]["replicas"]
    return (builders.applied_hash(live) == builders.applied_hash(body)
            and (status.get("observedGeneration") or 0) >= (live["metadata"].get("generation") or 0)
            and (status.get("availableReplicas") or 0) >= replicas
            and (status.get("updatedReplicas") or 0) >= replicas)


def _slices(plan: Plan, gpus: list[PlacedGpu], key: str) -> int:
    from tessera.planner.catalog import gpu_product

    product = gpu_product(plan.gpu)
    return sum(product.profile(i.mig_profile).compute_slices for g in gpus for i in g.instances if i.system == key)
