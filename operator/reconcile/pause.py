"""Pause: what runs for a paused system, or on a paused pool, stays exactly as it is, while its status keeps reporting.

A system is paused by its annotation `tessera.ai/paused: "true"`; a pool (the
nodes of one GPU product) by the same annotation on its plan's ConfigMap
`tessera-pool-<product>` in the state namespace, the one object a pool has.
An annotation, not a spec field: pausing is an operator's hold on the
cluster, not a change of what the system wants, so it neither bumps
`metadata.generation` nor changes the spec's hash (pausing alone re-plans
nothing), and a pool has no spec to put it in.

While paused, no Deployment, Service or frontend ConfigMap of the system is
created, changed or deleted, none of its nodes is relabelled (node_changes.py),
and, for a paused pool, no MIG config is written and no re-plan is solved or
stored: the plan a user sees is the one that runs. A paused system in a pool
that is not paused keeps its last plan's share (as an invalid system does) and
the pool's other systems plan around it. The status says what waits; unpausing
lets the next reconcile plan and apply it.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.api.systems import SystemObject
from tessera.operator.reconcile import builders
from tessera.operator.reconcile.actions import Action, ApplyChild, DeleteChild, Json
from tessera.operator.reconcile.decide import NodeMig, PoolOutcome, Verdict, owner_key

CARRIED = (st.PLANNED, st.DEGRADED, st.MIG_LAYOUT_APPLIED, st.PROFILES_ESTIMATED, st.PROFILING_COMPLETE, st.INVALID)
"""Conditions a paused system keeps as the last reconcile before the pause wrote them: they describe what runs."""


def is_paused(annotations: Mapping[str, str]) -> bool:
    return annotations.get(naming.PAUSED, "").strip().lower() == "true"


def pool_pause(pool_annotations: Mapping[str, str], pool_configmap: str) -> str | None:
    """What pauses the pool (its plan ConfigMap's annotation); None: it is not paused."""
    return f"the pool is paused ({naming.PAUSED} on ConfigMap {pool_configmap})" if is_paused(pool_annotations) else None


def paused_systems(systems: list[SystemObject], pool_paused: str | None) -> dict[str, str]:
    """System key -> what pauses it: its pool's pause, else its own. An unreadable spec is not paused: its last
    good plan runs on anyway, and its status must say what is wrong with it."""
    if pool_paused is not None:
        return {s.ref.key: pool_paused for s in systems if s.valid}
    return {s.ref.key: f"paused ({naming.PAUSED} on the system)" for s in systems if s.valid and is_paused(s.annotations)}


def planned_hashes(state: Mapping[str, str]) -> dict[str, str]:
    """System key -> the hash of the spec its running plan was made from (paused systems' too)."""
    return {**json.loads(state.get("systems") or "{}"), **json.loads(state.get("paused") or "{}")}


def waiting_changes(system: SystemObject, spec_hash: str, state: Mapping[str, str],
                    pool_changed: bool) -> list[str]:
    """What a re-plan would change that the pause holds back: the system's spec (its demand named), its pool."""
    changes = []
    planned = planned_hashes(state).get(system.ref.key)
    if planned is None:
        changes.append("its first plan")
    elif planned != spec_hash:
        before = (system.status.get("plan") or {}).get("demandRequestsPerSecond")
        now = system.spec.demand_rps if system.spec is not None else None
        changes.append(f"demand {before:g} -> {now:g}" if before is not None and now is not None and before != now
                       else "an edit of its spec")
    if pool_changed:
        changes.append("the pool changed (its nodes, the planner's options or measured profiles)")
    return changes


def pause_message(why: str, changes: list[str]) -> str:
    if not changes:
        return f"{why}: nothing waits; what runs stays as it is until the pause is lifted"
    return f"{why}: a re-plan waits: {'; '.join(changes)}"


def held_nodes(paused: Mapping[str, str], outcome: PoolOutcome, node_names: list[str],
               pool_paused: str | None) -> dict[str, str]:
    """Node -> why it keeps its layout: every node of a paused pool, else the nodes paused systems' servers run on."""
    if pool_paused is not None:
        return {name: pool_paused for name in node_names}
    held: dict[str, str] = {}
    for key, why in sorted(paused.items()):
        for server in outcome.placement.servers_of(key):
            held.setdefault(server.node, f"{key} is {why}")
    return held


def held_mig_configs(mig: Mapping[str, NodeMig], known: set[str]) -> dict[str, list[Json]]:
    """The configs a paused pool's plan wants that the ConfigMap has already: kept (not dropped), none added."""
    return {m.config: m.entries for m in mig.values() if m.config in known}


def without_paused(actions: list[Action], paused: Mapping[str, str]) -> list[Action]:
    """The actions less every write to a paused system's children (Deployments and their budgets, Services, frontend
    ConfigMaps)."""
    def owned_by_paused(action: Action) -> bool:
        if isinstance(action, ApplyChild):
            return owner_key(action.body) in paused
        if isinstance(action, DeleteChild):
            return owner_key(action.child) in paused
        return False
    return [a for a in actions if not owned_by_paused(a)]


def paused_status(system: SystemObject, outcome: PoolOutcome, message: str) -> Verdict:
    """What runs, as the last reconcile before the pause described it, with Ready read from the live servers now,
    and Progressing=False, reason Paused, naming what waits. The plan summary stays the one that runs."""
    previous = {c.get("type"): c for c in system.status.get("conditions") or []}
    carried = [st.Condition(c["type"], c.get("status") == "True", c.get("reason", ""), c.get("message", ""))
               for t, c in previous.items() if t in CARRIED]
    servers = live_servers_condition(system, outcome.live)
    phase = system.status.get("phase") or st.PHASE_PENDING
    if not servers.status and phase in (st.PHASE_READY, st.PHASE_DEGRADED):
        phase = st.PHASE_DEPLOYING
    return phase, [*carried, servers, st.Condition(st.PROGRESSING, False, st.PAUSED, message)], None


def live_servers_condition(system: SystemObject, live: Mapping[tuple[str, str, str], Json]) -> st.Condition:
    """Ready from the system's model-server Deployments as they run (a paused system's plan is what runs)."""
    servers = [c for (kind, _ns, _name), c in sorted(live.items()) if kind == "Deployment"
               and owner_key(c) == system.ref.key
               and (c["metadata"].get("labels") or {}).get(naming.CHILD_KIND_LABEL) == builders.MODEL_SERVER]
    available = sum(1 for c in servers if _available(c))
    message = f"{available} of {len(servers)} model-server Deployments available"
    if servers and available == len(servers):
        return st.Condition(st.READY, True, st.SERVERS_READY, message)
    return st.Condition(st.READY, False, st.SERVERS_UNAVAILABLE, message)


def _available(deployment: Json) -> bool:
    status = deployment.get("status") or {}
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    return ((status.get("observedGeneration") or 0) >= (deployment["metadata"].get("generation") or 0)
            and (status.get("availableReplicas") or 0) >= wanted)
