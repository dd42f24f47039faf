"""Decide: what one reconcile writes, from what it read, as plain actions (actions.py), each with its reason.

Pure: plain data in (the systems, the pool's nodes, tessera's children, the
mig-parted ConfigMap, the pool's outcome), plain actions out. No Kubernetes
client, no kopf, no clock: the time is an argument. act.py applies the
actions; the reconciler (reconciler.py) reads the cluster and runs the solve.
Each rule here has its unit test (tests/tessera_operator/test_decide.py; the
table in docs/operator.md maps the documented invariants to them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import yaml

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.api.systems import SystemObject
from tessera.operator.gpus.discovery import MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, NodeFacts, Pool, node_profile_name
from tessera.operator.gpus.node_plans import NodePlan, Placement, PlacedGpu, ServerKey, Share
from tessera.operator.profiling.jobs import PlannedNode, in_transition
from tessera.operator.reconcile import builders, frontend_children, mig_failures
from tessera.operator.reconcile.node_changes import NO_HOLD, NodeHold
from tessera.operator.reconcile.actions import (Action, ApplyChild, DeleteChild, Json, LabelNode, PatchStatus,
                                                PostEvent, WriteMigConfigs)
from tessera.operator.settings import OperatorSettings
from tessera.planner.catalog import COMPUTE_SLICES, gpu_product
from tessera.planner.plan import InstancePlan, Plan
from tessera.planner.profiles import ProfileStore
from tessera.planner.quota import InstanceQuota, holding_back, instances_under

POOL_ANNOTATION = "tessera.ai/gpu-product"
"""On a system: the GPU product (GFD label value) of the pool to plan it in; default the largest pool."""
STATE_FORMAT = 2
"""Of the pool's stored plan: 2 places GPUs by (node, device) as the planner named them."""
ChildKey = tuple[str, str, str]
"""(kind, namespace, name) of a child."""
BUDGET = "PodDisruptionBudget"
"""The kind of a model-server Deployment's budget: named as its Deployment (builders.disruption_budget)."""
SERVED_BEFORE_QUOTA = "servedBeforeQuotaRequestsPerSecond"
SERVED_TOLERANCE_RPS = 0.001
"""status.plan rounds rates to 3 decimals: a smaller difference is no loss."""


@dataclass
class NodeMig:
    """Where a node stands with its planned layout."""

    config: str
    entries: list[Json]
    expected: dict[str, int]
    hostname: str
    """The node's `kubernetes.io/hostname`, which its Deployments are pinned to."""
    applied: bool = False
    failed: bool = False
    blocked_by: list[str] = field(default_factory=list)
    waiting: str | None = None
    """Why the node's change is held back (a pause, the maintenance window: node_changes.py); None: not held."""
    serving_change: tuple[str, str] | None = None
    """(reason, message): where the re-partition of this serving node stands (serving_nodes.py); None: none."""
    changing: bool = False
    """mig-manager is asked for this layout and has not applied it: the node names its config (tessera relabelled
    it when no pod held its GPUs) or this reconcile relabels it (decide_relabels)."""
    propagating: bool = False
    """The node is relabelled for this layout as soon as its config has reached mig-manager: no pod holds its
    GPUs and nothing holds the change back (decide_relabels)."""


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
    awaited: dict[ChildKey, list[str]] = field(default_factory=dict)
    """Stale model-server Deployments kept serving -> the replacements they wait for (replacements_awaited)."""
    in_place: dict[ChildKey, list[str]] = field(default_factory=dict)
    """Stale model-server Deployments -> their replacements that need the instances they hold (replacements_in_place)."""
    without_replacement: str = "change"
    """--without-replacement: what a replacement in place does, `wait` (the old one is held) or `change`."""
    requeue_after: float | None = None
    failed_nodes: dict[str, mig_failures.NodeFailure] = field(default_factory=dict)
    """The pool's nodes whose mig-manager `failed` is inside its back-off (mig_failures.py)."""
    quotas: list[InstanceQuota] = field(default_factory=list)
    """The namespaces' quotas on MIG instances the plan was kept within (quotas.py)."""
    priorities: dict[str, int] = field(default_factory=dict)
    """system key -> its spec.poolPriority, for the systems planned on the pool."""
    adapter_pools: dict[str, tuple[int, int]] = field(default_factory=dict)
    """AdapterPool key -> (its spec.poolPriority, the whole GPUs reserved for it against the compound solve)."""
    pool_gpus: int = 0
    """GPUs of the whole pool (its systems' shares are of these)."""
    first_plan_solving: bool = False
    """The pool has no plan in force and its first solve runs: AdapterPool servers wait for its layouts."""
    left_nodes: dict[str, list[str]] = field(default_factory=dict)
    """system key -> the nodes the plan in force puts its instances on that are no longer in the pool (they left,
    or a mig-manager failure's back-off ended): the plan shown while the pool's re-plan runs, not one it serves."""
    cordoned_up: dict[str, str] = field(default_factory=dict)
    """Node name -> hostname of the nodes an admin cordoned while they are up: out of the pool, their pods serve on
    (discovery.NodeFacts.cordoned_up), so the Deployments pinned there wait for the re-plan (awaits_replan)."""


# -- MIG ------------------------------------------------------------------------

def node_mig(pool: Pool, node_name: str, node_plan: NodePlan) -> NodeMig:
    """A node's planned layout as mig-parted entries (content-addressed config) and the counts it will advertise.

    The one record of a node's MIG layout: a plan's layouts and a profiling Job's layout are both this.
    """
    node = pool.node(node_name)
    names = {p.name: node_profile_name(p, node.advertised) for p in pool.gpu.profiles}
    entries = builders.mig_parted_entries(node_plan, names)
    return NodeMig(naming.mig_config_name(entries), entries, builders.advertised_counts_expected(node_plan, names),
                   node.hostname)


def layout_applied(pool: Pool, node_name: str, mig: NodeMig) -> bool:
    """A layout counts as applied only on mig-manager's `success` for its config with the planned counts advertised."""
    node = pool.node(node_name)
    return node.mig_config == mig.config and node.mig_state == "success" and node.advertised_counts() == mig.expected


def desired_mig(pool: Pool, placement: Placement) -> dict[str, NodeMig]:
    """Per planned node: its mig-parted config and the profile counts it will advertise."""
    return {name: node_mig(pool, name, node_plan) for name, node_plan in sorted(placement.nodes.items())}


def profiling_mig(pool: Pool, node_name: str, node_plan: NodePlan) -> NodeMig | None:
    """A free node's layout for profiling; None while mig-manager has not answered for the config it was asked."""
    mig = node_mig(pool, node_name, node_plan)
    node = pool.node(node_name)
    if in_transition(node) and node.mig_config != mig.config:
        return None
    return mig


def decide_mig_configs(wanted: dict[str, list[Json]], namespace: str, name: str, configmap: Json | None,
                       in_use: set[str], now: float) -> tuple[WriteMigConfigs | None, dict[str, float]]:
    """The write that adds every wanted config to the ConfigMap `name`, if any; and when each config was written.

    Configs no node names and no plan wants are dropped; each config carries
    the time it was first written (an annotation), from which its node's
    relabel waits for the ConfigMap to reach mig-manager.
    """
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    text = ((configmap or {}).get("data") or {}).get(builders.MIG_PARTED_KEY)
    if configmap is None and not wanted:
        return None, {}
    new_text = builders.mig_parted_text(text, wanted, keep=in_use)
    prefix = naming.MIG_CONFIG_WRITTEN_PREFIX
    written = {key.removeprefix(prefix): float(value) for key, value in annotations.items() if key.startswith(prefix)}
    missing = {config: now for config in wanted if config not in written}
    kept_configs = set(yaml.safe_load(new_text)["mig-configs"])
    dropped = {config for config in written if config not in kept_configs}
    if not (new_text != text or missing or dropped):
        return None, written
    stamps: dict[str, str | None] = {prefix + config: f"{stamp:.0f}" for config, stamp in missing.items()}
    stamps.update({prefix + config: None for config in dropped})
    reason = (f"add MIG configs {', '.join(sorted(missing))}" if missing else "drop MIG configs no node or plan names")
    return (WriteMigConfigs(namespace, name, {builders.MIG_PARTED_KEY: new_text}, stamps, exists=configmap is not None,
                            reason=reason),
            {**written, **missing})


def nodes_to_relabel(pool: Pool, mig: dict[str, NodeMig]) -> list[str]:
    """The planned nodes whose current config is not their planned one (their GPU pods are read for these)."""
    return [name for name, m in sorted(mig.items()) if pool.node(name).mig_config != m.config]


def decide_relabels(pool: Pool, mig: dict[str, NodeMig], written: dict[str, float], gpu_pods: dict[str, list[str]],
                    now: float, propagation_s: float, poll_s: float, hold: NodeHold = NO_HOLD
                    ) -> tuple[dict[str, NodeMig], list[LabelNode], list[float]]:
    """Part 1 of MIG: nodes whose GPUs no pod holds get their planned layout, once its config had time to reach
    mig-manager, unless `hold` holds the change back. Returns each node's MIG state, the relabels, and when to
    look again."""
    states: dict[str, NodeMig] = {}
    relabels: list[LabelNode] = []
    requeue: list[float] = []
    for node_name, planned in sorted(mig.items()):
        node = pool.node(node_name)
        if node.mig_config == planned.config:
            applied, failed = layout_applied(pool, node_name, planned), node.mig_state == "failed"
            state = replace(planned, applied=applied, failed=failed, changing=not (applied or failed))
            states[node_name] = state
            if not (state.applied or state.failed):
                requeue.append(poll_s)
            continue
        blocked_by = list(gpu_pods.get(node_name, []))
        waits = hold.waits(node, planned.config, serving=bool(blocked_by), now=now)
        states[node_name] = replace(planned, blocked_by=blocked_by, waiting=waits)
        if waits or blocked_by:
            continue  # held back; or a serving node, whose re-partitioning (cordon, move, relabel) is not done yet
        wait = written.get(planned.config, now) + propagation_s - now
        if wait > 0:
            states[node_name] = replace(states[node_name], propagating=True)
            requeue.append(wait)
            continue
        relabels.append(LabelNode(node_name, planned.config, builders.node_relabel_patch(planned.config),
                                  reason=f"planned layout {planned.config}; no pod holds the node's GPUs"))
        states[node_name] = replace(states[node_name], changing=True)
        requeue.append(poll_s)
    return states, relabels, requeue


# -- Deployments and Services -------------------------------------------------

def planned_children(pool: Pool, systems: list[SystemObject], outcome: PoolOutcome, settings: OperatorSettings,
                     store: ProfileStore | None = None
                     ) -> tuple[dict[ChildKey, tuple[Json, bool]], dict[str, list[Json]]]:
    """Every child the placement wants -> (body, whether to apply it now: its node's layout is applied, or is being
    applied on a node that serves nothing and advertises none of its instances: starts_before_layout); and the
    Deployments each system's plan wants (applied or waiting for MIG). A system with spec.frontend also gets its
    frontend (frontend_children.py), configured from the plan; `store` (the measured profiles the plan was made
    with) gives the frontend a batch of one's latency."""
    placement = outcome.placement
    planned: dict[ChildKey, tuple[Json, bool]] = {}
    deployments: dict[str, list[Json]] = {}
    for system in systems:
        if system.spec is None or system.ref.key in outcome.invalid:
            continue  # an invalid system's children stay exactly as its last good plan made them
        if plan_older_than_spec(system, outcome):
            continue  # its children stay as they are until the plan for its edited spec is stored
        for system_key, task_name in sorted(placement.tasks):
            if system_key != system.ref.key:
                continue
            body = builders.service(system.ref, task_name, settings.server_port)
            planned[("Service", system.ref.namespace, body["metadata"]["name"])] = (body, True)
        for key, replicas in sorted(placement.servers_of(system.ref.key).items()):
            node = pool.node(key.node)
            task = placement.tasks[(key.system, key.task)]
            profile = node_profile_name(pool.gpu.profile(task.configs[key.config].segment.mig_profile),
                                        node.advertised)
            body = builders.deployment(system.ref, system.spec, key, task, replicas, node.hostname, profile, settings)
            mig = outcome.mig.get(key.node)
            applied = mig is not None and (mig.applied or starts_before_layout(node, mig, profile))
            planned[("Deployment", system.ref.namespace, body["metadata"]["name"])] = (body, applied)
            planned[(BUDGET, system.ref.namespace, body["metadata"]["name"])] = (builders.disruption_budget(body),
                                                                                applied)
            deployments.setdefault(system.ref.key, []).append(body)
        if outcome.plan is not None:
            for body in frontend_children.children(system.ref, system.spec, outcome.plan, store, settings):
                planned[(body["kind"], system.ref.namespace, body["metadata"]["name"])] = (body, True)
    return planned, deployments


def starts_before_layout(node: NodeFacts, mig: NodeMig, profile: str) -> bool:
    """Whether a model server of MIG profile `profile` (as the node names it) goes onto `node` while mig-manager
    applies its planned layout, or while the layout's config reaches mig-manager before the relabel, rather than
    once it is applied: so the controller-manager creates its pods (5-6 a second at its default client rate) while
    the config propagates and the layout changes, and they start when it lands.

    Only where no pod can take an instance about to change: the node serves
    nothing (tessera relabels it, or did, or will once its config has
    propagated, because no pod held its GPUs; not
    a serving node's re-partition, which keeps its own order:
    serving_nodes.py, tessera's cordon) and advertises no instance of the
    profile, by its labels nor by the device plugin's allocatable, so the
    server's pods, pinned to the node, stay Pending until the new layout's
    instances appear. The system is Ready only once the layout is applied
    (_mig_condition), whatever its pods do.
    """
    resource = builders.gpu_resource(profile, whole_gpu=False)
    return ((mig.changing or mig.propagating) and mig.serving_change is None and node.cordoned_for is None
            and not node.advertised_counts().get(profile) and not node.gpu_allocatable.get(resource))


def plan_older_than_spec(system: SystemObject, outcome: PoolOutcome) -> bool:
    """Whether the plan in force names a task or variant the system's spec no longer has: the spec was edited
    (a variant renamed or removed) and the solve for it has not been stored yet. Its children are then neither
    rebuilt (a child built from the old plan and the new spec would mix the two, or name what is gone) nor
    deleted: they serve until the new plan replaces them."""
    if system.spec is None:
        return False
    variants = {task.name: {variant.name for variant in task.variants} for task in system.spec.tasks}
    return any(task.variant not in variants.get(task_name, set())
               for (key, task_name), task in outcome.placement.tasks.items() if key == system.ref.key)


def decide_children(planned: dict[ChildKey, tuple[Json, bool]], systems: list[SystemObject],
                    live: dict[ChildKey, Json], outcome: PoolOutcome) -> list[Action]:
    """Services first, then ConfigMaps and the Deployments `planned` marks to apply now (their node's layout applied,
    or being applied where none of their pods can start before it: starts_before_layout; a frontend's ConfigMap
    before the Deployment that mounts it), each only when it differs from the live one;
    then the deletion of children no plan wants, unless the solve failed, their system is invalid, or (a model
    server) it keeps serving until its replacements are available (replacements_awaited). A model server's
    PodDisruptionBudget is applied with it and goes with it: kept while its Deployment stays, also one no plan
    wants, deleted in the reconcile that deletes the Deployment (or once the Deployment is gone)."""
    actions: list[Action] = []
    held = held_in_place(outcome)
    for key, (body, ready_to_apply) in sorted(planned.items(), key=lambda item: (item[0][0] != "Service", item[0])):
        current = live.get(key)
        if not ready_to_apply or key[1:] in held or (current is not None and builders.applied_hash(current) == builders.applied_hash(body)):
            continue
        actions.append(ApplyChild(body, reason="not there yet" if current is None else "differs from the plan"))
    if outcome.solve_error is not None:
        return actions  # a failed solve never deletes running servers
    for key in sorted(withdrawn_after_a_failed_layout(planned, live, outcome)):
        if key in live:  # the Deployment, then its budget
            actions.append(DeleteChild(live[key], reason="applied while its node's MIG layout changed, which "
                                                         "mig-manager failed before it served"))
    by_key = {s.ref.key: s for s in systems}
    outdated = {s.ref.key for s in systems if plan_older_than_spec(s, outcome)}
    awaited = replacements_awaited(planned, live, outcome)
    changing = {m.hostname for m in outcome.mig.values() if m.blocked_by}
    deleting: set[ChildKey] = set()
    # Budgets last: each follows its Deployment, whose deletion is decided before it.
    for key, child in sorted(live.items(), key=lambda item: (item[0][0] == BUDGET, item[0])):
        owner = by_key[owner_key(child) or ""]
        if key in planned or not owner.valid or owner.ref.key in outcome.invalid or owner.ref.key in outdated:
            continue  # planned, or an invalid system's last good plan or one older than its spec: it keeps running
        guarded = ("Deployment", *key[1:])
        if key[0] == BUDGET and guarded in live and guarded not in deleting:
            continue  # its Deployment still serves (make before break): guarded until it goes
        if key in awaited:
            continue  # make before break: it serves until its replacements are available
        if key in outcome.in_place and outcome.without_replacement == "wait":
            continue  # its replacements need its instances: held, as a change without replacement capacity
        if is_model_server(child) and builders.pinned_hostname(child) in changing and child["spec"].get("replicas"):
            continue  # its node waits to be re-partitioned: the node's change scales it to zero (serving_nodes.py)
        deleting.add(key)
        actions.append(DeleteChild(child, reason=f"no plan of {owner.ref.key} wants it"))
    return actions


def withdrawn_after_a_failed_layout(planned: dict[ChildKey, tuple[Json, bool]], live: dict[ChildKey, Json],
                                    outcome: PoolOutcome) -> set[ChildKey]:
    """The plan's Deployments applied while their node's layout changed (starts_before_layout) that mig-manager then
    failed, none of their pods available yet, and their budgets: withdrawn, as a node whose layout failed gets nothing
    new (their pods would wait there, or take the instances of a layout left half made, and hold the node's GPUs
    against the retry); applied again once the layout is applied. One with an available pod serves: it stays, as
    anything that serves on a failed node does until its pool plans without the node (mig_failures.py)."""
    failed = {m.hostname for m in outcome.mig.values() if m.failed}
    found: set[ChildKey] = set()
    for key, (body, _) in planned.items():
        current = live.get(key)
        if (key[0] == "Deployment" and current is not None and builders.pinned_hostname(body) in failed
                and builders.applied_hash(body) == builders.applied_hash(current)  # this plan's, as applied
                and not (current.get("status") or {}).get("availableReplicas")):
            found |= {key, (BUDGET, *key[1:])}
    return found


def replacements_awaited(planned: dict[ChildKey, tuple[Json, bool]], live: dict[ChildKey, Json],
                         outcome: PoolOutcome) -> dict[ChildKey, list[str]]:
    """Each live model-server Deployment no plan wants -> the planned Deployments of its task (same system) that
    it keeps serving for until they are available; one with none left is free to go.

    Awaited are only the replacements that can come while it serves. Not those on
    a node whose layout is applied and where a Deployment no plan wants still
    runs, unless the layout has instances for the plan's Deployments there beside
    the old ones: otherwise they may need the very MIG instances the old ones
    hold (a renamed Deployment, replicas moved between configurations of one
    node: replacements_in_place). Nor those on a node whose new layout waits for
    the pods on its GPUs to go: they come after the node changes. The system's
    own deletion needs no rule: garbage collection removes its children. One
    pinned to a node an admin cordoned, while the plan in force still puts its
    system there, waits for the re-plan first (awaits_replan).
    """
    stale = _stale_servers(planned, live)
    if not stale:
        return {}
    behind = {m.hostname for m in outcome.mig.values() if m.blocked_by} | _hosts_without_room(planned, stale, outcome)
    awaited = {}
    for key, child in stale.items():
        replan = awaits_replan(child, outcome)
        if replan is not None:
            awaited[key] = [replan]
            continue
        waiting = sorted(name for (kind, namespace, name), body in _servers_by_task(planned).get(task_of(child), [])
                         if builders.pinned_hostname(body) not in behind
                         and not available_now(live.get((kind, namespace, name)), body))
        if waiting:
            awaited[key] = waiting
    return awaited


def awaits_replan(child: Json, outcome: PoolOutcome) -> str | None:
    """For a model-server Deployment no plan wants, pinned to a node an admin cordoned while it is up (out of the
    pool, but a cordon stops no pod: its pods serve on) that the plan in force still puts the Deployment's system
    on: what it serves for, the plan made without that node (then, as any old one, the Deployments that plan has
    for its task); None for any other. Without this the placement on the remaining nodes, which no longer wants
    it, would delete it at once, before the re-plan placed its replacements: a cordoned node's system served
    nothing meanwhile. A node gone, or NotReady past its grace, is no such node: its pods serve nothing."""
    host = builders.pinned_hostname(child)
    left = outcome.left_nodes.get(owner_key(child) or "", [])
    node = next((name for name in left if outcome.cordoned_up.get(name) == host), None)
    return None if node is None else f"a plan without the cordoned node {node}"


def replacements_in_place(planned: dict[ChildKey, tuple[Json, bool]], live: dict[ChildKey, Json],
                          outcome: PoolOutcome) -> dict[ChildKey, list[str]]:
    """Each live model-server Deployment no plan wants, serving, whose task the plan runs only on its own node,
    where the applied layout has no instances for the plan's Deployments beside the old ones -> those of them not
    available yet: they need the instances it holds, so it must go before they can start, and its task serves
    less meanwhile (a demand change that moves the only replica to another configuration on the same instance).

    A break, not a make before break: decide_children treats it as a change
    without replacement capacity (--without-replacement: `wait` holds the old
    one and does not apply those, `change` deletes it with the loss stated).
    A task the plan also runs elsewhere is make before break as usual
    (replacements_awaited waits for those).
    """
    stale = _stale_servers(planned, live)
    if not stale:
        return {}
    without_room = _hosts_without_room(planned, stale, outcome)
    found = {}
    for key, child in stale.items():
        host = builders.pinned_hostname(child)
        bodies = _servers_by_task(planned).get(task_of(child), [])
        if host not in without_room or not child["spec"].get("replicas") or \
                any(builders.pinned_hostname(body) != host for _, body in bodies):
            continue
        needing = sorted(name for (kind, namespace, name), body in bodies
                         if not available_now(live.get((kind, namespace, name)), body))
        if needing:
            found[key] = needing
    return found


def held_in_place(outcome: PoolOutcome) -> set[tuple[str, str]]:
    """(namespace, name) of the planned Deployments not applied: those that need the instances of an old one held."""
    if outcome.without_replacement != "wait":
        return set()
    return {(namespace, name) for (_, namespace, _), names in outcome.in_place.items() for name in names}


def _stale_servers(planned: dict[ChildKey, tuple[Json, bool]], live: dict[ChildKey, Json]) -> dict[ChildKey, Json]:
    return {key: child for key, child in live.items() if key not in planned and is_model_server(child)}


def _servers_by_task(planned: dict[ChildKey, tuple[Json, bool]]) -> dict[tuple[str, str, str], list[tuple[ChildKey, Json]]]:
    by_task: dict[tuple[str, str, str], list[tuple[ChildKey, Json]]] = {}
    for key, (body, _) in planned.items():
        if is_model_server(body):
            by_task.setdefault(task_of(body), []).append((key, body))
    return by_task


def hosts_without_room_beside_the_old(planned: dict[ChildKey, tuple[Json, bool]], live: dict[ChildKey, Json],
                                      outcome: PoolOutcome) -> set[str]:
    """Applied nodes where model servers no plan wants run and the layout has no instances for the plan's beside
    them: a replacement pinned there starts only once old pods there are gone."""
    return _hosts_without_room(planned, _stale_servers(planned, live), outcome)


def _hosts_without_room(planned: dict[ChildKey, tuple[Json, bool]], stale: dict[ChildKey, Json],
                        outcome: PoolOutcome) -> set[str]:
    """Applied nodes where old Deployments run and the layout has no instances for the plan's beside them."""
    stale_hosts = {builders.pinned_hostname(child) for child in stale.values()}
    servers = [body for body, _ in planned.values() if is_model_server(body)] + list(stale.values())
    return {m.hostname for m in outcome.mig.values()
            if m.applied and m.hostname in stale_hosts and not room_beside_the_old(m, servers)}


def room_beside_the_old(mig: NodeMig, servers: list[Json]) -> bool:
    """Whether the node's applied layout has an instance for every replica of `servers` pinned to it (the plan's
    Deployments and the old ones, together): then the plan's can start while the old ones serve."""
    wanted: dict[str, int] = {}
    for body in servers:
        if builders.pinned_hostname(body) != mig.hostname:
            continue
        for container in body["spec"]["template"]["spec"]["containers"]:
            for resource in (container.get("resources") or {}).get("limits") or {}:
                if resource.startswith(MIG_RESOURCE_PREFIX):
                    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
                    wanted[profile] = wanted.get(profile, 0) + int(body["spec"].get("replicas") or 0)
                elif resource == WHOLE_GPU_RESOURCE:
                    return False  # whole GPUs are not in the layout's counts
    return all(count <= mig.expected.get(profile, 0) for profile, count in wanted.items())


def is_model_server(child: Json) -> bool:
    return bool(child["kind"] == "Deployment"
                and (child["metadata"].get("labels") or {}).get(naming.CHILD_KIND_LABEL) == builders.MODEL_SERVER)


def task_of(deployment: Json) -> tuple[str, str, str]:
    """(namespace, system label, task label): the Deployments that serve one task of one system."""
    labels = deployment["metadata"].get("labels") or {}
    return deployment["metadata"]["namespace"], labels.get(naming.SYSTEM_LABEL, ""), labels.get(naming.TASK_LABEL, "")


def live_children(children: list[Json], systems: list[SystemObject]) -> dict[ChildKey, Json]:
    """The children that these systems control, by (kind, namespace, name)."""
    keys = {s.ref.key for s in systems}
    return {(c["kind"], c["metadata"]["namespace"], c["metadata"]["name"]): c for c in children
            if owner_key(c) in keys}


# -- status -------------------------------------------------------------------

def decide_status(system: SystemObject, new: Json, now: str) -> list[Action]:
    """The status patch when the status changed, then an Event per decision (never one on an idle resync)."""
    if not st.status_changed(system.status, new):
        return []
    actions: list[Action] = [PatchStatus(system.ref.namespace, system.ref.name, new, reason="status changed")]
    for event in st.events_for(system.status, new):
        actions.append(PostEvent(st.event_body(system.ref, event, now), reason=f"{event.type} event {event.reason}"))
    return actions


def frontend_status(system: SystemObject, settings: OperatorSettings, outcome: PoolOutcome) -> Json | None:
    """status.frontend: where the system's frontend answers, once it runs or its plan deploys it now.

    An invalid system keeps the frontend of its last good plan (its Service is live); one that was
    never planned, or whose plan leaves a task unserved, has no frontend and shows no address.
    """
    service = ("Service", system.ref.namespace, frontend_children.frontend_name(system.ref))
    deploys_now = (system.spec is not None and outcome.plan is not None and system.ref.key not in outcome.invalid
                   and frontend_children.runs_under(system.spec, outcome.plan))
    if service not in outcome.live and not deploys_now:
        return None
    return {"address": frontend_children.address(system.ref, settings)}


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


def stored_plan_stands(state: Mapping[str, str], pool_hash: str, candidates: list[SystemObject],
                       spec_hash: dict[str, str], present: set[str]) -> bool:
    """The stored plan still serves these systems: same pool, each of them planned with its current spec.

    Systems it was made for that still exist but are no longer candidates have
    turned invalid: they keep their share and the others their plan. A system it
    was made for that no longer exists frees capacity, so the pool plans again.
    """
    if not state.get("plan") or state.get("pool") != pool_hash:
        return False
    planned = json.loads(state.get("systems", "{}"))
    if not planned.keys() <= present:
        return False
    return all(planned.get(s.ref.key) == spec_hash[s.ref.key] for s in candidates)


def spec_digest(system: SystemObject) -> str:
    """The hash of a (readable) spec that the pool's stored plan records per system."""
    assert system.spec is not None
    return naming.digest(system.spec.model_dump(mode="json"))


def stored_pool_plan(state: Mapping[str, str]) -> Plan | None:
    """The pool's stored plan; None for none or one of an older format (the pool plans again)."""
    if not state.get("plan") or state.get("format") != str(STATE_FORMAT):
        return None
    return Plan.model_validate_json(state["plan"])


def nodes_left_by_system(placed: list[PlacedGpu], node_names: set[str], systems: set[str]) -> dict[str, list[str]]:
    """Each of `systems` -> the nodes of `placed` (a plan's GPUs) no longer in the pool that it has instances on."""
    left: dict[str, set[str]] = {}
    for gpu in placed:
        if gpu.node not in node_names:
            for instance in gpu.instances:
                if instance.system in systems:
                    left.setdefault(instance.system, set()).add(gpu.node)
    return {system: sorted(nodes) for system, nodes in left.items()}


def reserved_gpus(kept: dict[str, Share]) -> set[tuple[str, int]]:
    """(node, GPU) held by the last good plans of invalid systems: left out of the solve."""
    return {(g.node, g.gpu) for share in kept.values() for g in share.gpus}


def about(diagnosis: list[str], key: str) -> list[str]:
    return [line.removeprefix(f"{key}: ") for line in diagnosis]


def serves_nothing(plan: Plan, system: str) -> bool:
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
    summary = st.plan_summary(plan, key, gpus=held_gpus(system, outcome), slices=_slices(plan, gpus, key),
                              pool_slices=COMPUTE_SLICES * outcome.pool_gpus)
    before = served_before_quota(system.status.get("plan") or {}, summary,
                                 not _serves_all(summary) and bool(holding_back(plan, outcome.quotas, key)))
    if before is not None:
        summary[SERVED_BEFORE_QUOTA] = before
    mig_failed = mig_failures.failure_condition(outcome.failed_nodes, {k.node for k in outcome.placement.servers_of(key)})
    conditions = [valid, _planned(plan, summary, len(gpus), outcome), mig_failed or _degraded(plan, key, summary, outcome),
                  _profiles_estimated(summary)]
    mig = _mig_condition(outcome, key)
    servers = _in_place_condition(key, outcome) or _servers_condition(system, outcome)
    conditions.append(mig)
    left = outcome.left_nodes.get(key)
    if left:
        cordoned = [node for node in left if node in outcome.cordoned_up]
        servers = st.Condition(st.READY, False, st.PLANNING, f"re-planning: the plan in force puts servers on "
                               f"{', '.join(left)}, no longer in the pool" + (
                                   f"; those on {', '.join(cordoned)} (cordoned, up) serve on until the re-plan's "
                                   "replacements are available" if cordoned else ""))
    ready = mig.status and servers.status
    if ready:
        conditions.append(st.Condition(st.READY, True, st.SERVERS_READY, servers.message))
        conditions.append(st.Condition(st.PROGRESSING, False, st.RECONCILED, "the cluster matches the plan"))
        degraded = not _serves_all(summary) or mig_failed is not None
        return (st.PHASE_DEGRADED if degraded else st.PHASE_READY), conditions, summary
    blocker = servers if mig.status else mig
    conditions.append(st.Condition(st.READY, False, blocker.reason, blocker.message))
    stuck = blocker.reason in (st.MIG_FAILED, st.NODE_IN_USE, st.NODE_CHANGE_HELD, st.NO_REPLACEMENT_CAPACITY)
    replacing = None if stuck else _replacement_pending(key, outcome)
    conditions.append(replacing or st.Condition(st.PROGRESSING, not stuck, blocker.reason, blocker.message))
    return (st.PHASE_DEGRADED if mig_failed else st.PHASE_DEPLOYING), conditions, summary


def held_gpus(system: SystemObject, outcome: PoolOutcome) -> int:
    """The GPUS column: planned GPUs that hold a server of the system now, not those it is planned to hold.

    A GPU counts once a Deployment of one of its instances of the system has
    an available pod: the API shows which Deployment serves, not which GPU of
    its node a pod holds, so a Deployment's GPUs count together.
    """
    def serving(node: str, instance: InstancePlan) -> bool:
        if instance.system != system.ref.key or instance.task is None or instance.config is None:
            return False
        task = outcome.placement.tasks.get((instance.system, instance.task))
        if task is None:
            return False
        key = ServerKey(instance.system, instance.task, instance.config, node)
        name = builders.deployment_name(system.ref, key, task, task.configs[instance.config])
        live = outcome.live.get(("Deployment", system.ref.namespace, name))
        return live is not None and ((live.get("status") or {}).get("availableReplicas") or 0) > 0

    return sum(1 for gpu in outcome.gpus_of.get(system.ref.key, [])
               if any(serving(gpu.node, instance) for instance in gpu.instances))


def _planned(plan: Plan, summary: Json, planned_gpus: int, outcome: PoolOutcome) -> st.Condition:
    gap = plan.solver.mip_gap
    text = (f"{summary['slices']} compute slices on {planned_gpus} GPU(s) of {plan.gpu}; solver "
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


def served_before_quota(previous: Json, summary: Json, held_back: bool) -> float | None:
    """What the system's plan served before a lowered quota took served demand away, while a quota holds it back
    (`held_back`) below that: the loss the last status recorded, or else the last status's served rate; None when
    the plan serves no less than before. The one case that takes served demand away from a running system: a
    quota lowered below what its servers hold (docs/operator.md, "Quotas")."""
    if not held_back:
        return None
    before = previous.get(SERVED_BEFORE_QUOTA, previous.get("servedRequestsPerSecond"))
    if isinstance(before, (int, float)) and before > summary["servedRequestsPerSecond"] + SERVED_TOLERANCE_RPS:
        return float(before)
    return None


def _quota_loss(summary: Json) -> str:
    """What a lowered quota took away from a running system, for QuotaReached's message; empty when nothing."""
    before = summary.get(SERVED_BEFORE_QUOTA)
    if before is None:
        return ""
    lost = round(before - summary["servedRequestsPerSecond"], 3)
    return (f"; a lowered quota took {lost:g} requests/s of served demand away from the running system "
            f"(it served {before:g} before)")


def _degraded(plan: Plan, key: str, summary: Json, outcome: PoolOutcome) -> st.Condition:
    """Why a system is served below its demand, in the order of precedence: its quota, higher priorities, what
    already runs (running_decide.py), the pool."""
    if _serves_all(summary):
        return st.Condition(st.DEGRADED, False, st.DEMAND_SERVED, "the plan serves all demand within the SLOs")
    held = holding_back(plan, outcome.quotas, key)
    if held:
        return st.Condition(st.DEGRADED, True, st.QUOTA_REACHED,
                            f"the plan serves {100 * _served_fraction(summary):.0f}% of the demand "
                            f"({summary['servedRequestsPerSecond']:g} of {summary['demandRequestsPerSecond']:g} "
                            f"requests/s) within the namespace's quota: "
                            + "; ".join(f"{q.source} leaves tessera {q.limit} {q.mig_profile} instance(s), the plan uses "
                                        f"{instances_under(q, plan)}"
                                        for q in held) + _quota_loss(summary) + "; raise the quota to serve more")
    above = _higher_priority_holders(plan, key, outcome)
    if above:
        return st.Condition(st.DEGRADED, True, st.PREEMPTED_BY_PRIORITY,
                            f"the plan serves {100 * _served_fraction(summary):.0f}% of the demand "
                            f"({summary['servedRequestsPerSecond']:g} of {summary['demandRequestsPerSecond']:g} "
                            f"requests/s): systems of a higher spec.poolPriority than its "
                            f"{outcome.priorities.get(key, 0)} took the pool's capacity first: "
                            + _some([holder for _, holder in above], shown=5)
                            + "; raise its poolPriority or add GPU nodes to serve more")
    if plan.running and key not in plan.running:
        kept = sorted(plan.kept_for)
        return st.Condition(st.DEGRADED, True, st.HELD_FOR_RUNNING_SYSTEMS,
                            f"the plan serves {100 * _served_fraction(summary):.0f}% of the demand "
                            f"({summary['servedRequestsPerSecond']:g} of {summary['demandRequestsPerSecond']:g} "
                            "requests/s): what already runs in other namespaces keeps what it serves, as a re-plan "
                            "they did not cause lowers none of it: "
                            + _some([f"{other} ({100 * floor:.0f}%)" for other, floor in sorted(plan.running.items())],
                                    shown=5)
                            + (f"; kept the layouts of node(s) {_some(kept)}" if kept else "")
                            + "; add GPU nodes to the pool to serve more")
    why = "; ".join(line.removeprefix(f"{key}: ") for line in plan.diagnosis if line.startswith(f"{key}:"))
    return st.Condition(st.DEGRADED, True, st.INSUFFICIENT_CAPACITY,
                        f"the pool serves {100 * _served_fraction(summary):.0f}% of the demand "
                        f"({summary['servedRequestsPerSecond']:g} of {summary['demandRequestsPerSecond']:g} "
                        "requests/s)"
                        + (f": {why}" if why else "") + "; add GPU nodes to the pool")


def _higher_priority_holders(plan: Plan, key: str, outcome: PoolOutcome) -> list[tuple[int, str]]:
    """(priority, what it holds) of the pool's compound systems of a higher priority than `key`'s that the plan
    gives capacity (their slices) and of its AdapterPools of a higher priority whose whole GPUs the solve left
    alone, highest priority first."""
    mine = outcome.priorities.get(key, 0)
    systems = [(priority, other, _slices(plan, outcome.gpus_of.get(other, []), other))
               for other, priority in outcome.priorities.items() if priority > mine]
    held = [(-priority, f"{other} (poolPriority {priority}, {slices} slices)")
            for priority, other, slices in systems if slices > 0]
    held += [(-priority, f"AdapterPool {pool} (poolPriority {priority}, {gpus} whole GPU(s))")
             for pool, (priority, gpus) in outcome.adapter_pools.items() if priority > mine and gpus > 0]
    return [(-negated, holder) for negated, holder in sorted(held)]


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
        found[name] = PlannedNode(applied=layout_applied(pool, name, mig), used=used.get(name, {}))
    return found


def _mig_condition(outcome: PoolOutcome, key: str) -> st.Condition:
    nodes = sorted({k.node for k in outcome.placement.servers_of(key)})
    states = {node: outcome.mig[node] for node in nodes if node in outcome.mig}
    failed = [n for n, m in states.items() if m.failed]
    waiting = [m.waiting for m in states.values() if m.waiting and not m.applied]
    blocked = [n for n, m in states.items() if m.blocked_by and not m.applied]
    pending = [n for n, m in states.items() if not m.applied]
    if failed:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.MIG_FAILED,
                            f"mig-manager reported failed on {', '.join(failed)}; see its logs on those nodes")
    if waiting:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.NODE_CHANGE_HELD, "; ".join(waiting))
    changes = sorted(m.serving_change for m in states.values() if m.serving_change and not m.applied)
    if changes:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, changes[0][0], "; ".join(message for _, message in changes))
    if blocked:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.NODE_IN_USE,
                            f"nodes {', '.join(blocked)} need a new MIG layout but pods hold their GPUs "
                            f"(e.g. {outcome.mig[blocked[0]].blocked_by[0]}) that tessera does not own: tessera "
                            "never re-partitions such a node")
    if pending:
        return st.Condition(st.MIG_LAYOUT_APPLIED, False, st.MIG_PENDING,
                            f"waiting for mig-manager on {len(pending)} of {len(nodes)} node(s): {', '.join(pending[:5])}")
    return st.Condition(st.MIG_LAYOUT_APPLIED, True, st.MIG_APPLIED,
                        f"the planned MIG layouts are applied on {len(nodes)} node(s)")


def _replacement_pending(key: str, outcome: PoolOutcome) -> st.Condition | None:
    """Progressing, ReplacementPending: the system's Deployments that serve until their replacements are available."""
    kept = {child[2]: names for child, names in sorted(outcome.awaited.items())
            if child in outcome.live and owner_key(outcome.live[child]) == key}
    if not kept:
        return None
    awaited = sorted({name for names in kept.values() for name in names})
    return st.Condition(st.PROGRESSING, True, st.REPLACEMENT_PENDING,
                        f"{len(kept)} Deployment(s) of the previous plan keep serving until their replacements are "
                        f"available: {_some(sorted(kept))} wait(s) for {_some(awaited)}")


def _in_place_condition(key: str, outcome: PoolOutcome) -> st.Condition | None:
    """Ready=False where old Deployments' replacements need their instances: held (`NoReplacementCapacity`), or
    deleted now with the replicas lost until the replacements are available (`ReplacedInPlace`, a Warning)."""
    found = sorted((child, names) for child, names in outcome.in_place.items()
                   if child in outcome.live and owner_key(outcome.live[child]) == key)
    if not found:
        return None
    node = builders.pinned_hostname(outcome.live[found[0][0]])
    pairs = "; ".join(f"{names[0] if len(names) == 1 else _some(names)} needs the MIG instances {child[2]} holds"
                      for child, names in found)
    if outcome.without_replacement == "wait":
        return st.Condition(st.READY, False, st.NO_REPLACEMENT_CAPACITY, (
            f"the plan moves servers to other configurations on the instances they hold on {node}, and no other "
            f"capacity serves their tasks: {pairs}; the old ones keep serving (--without-replacement wait): add "
            "a node, or set --without-replacement change"))
    lost = sum(int(outcome.live[child]["spec"].get("replicas") or 0) for child, _ in found)
    return st.Condition(st.READY, False, st.REPLACED_IN_PLACE, (
        f"the plan moves servers to other configurations on the instances they hold on {node}, and no other "
        f"capacity serves their tasks: {pairs}; the old ones are deleted first (--without-replacement change), so "
        f"{lost} replica(s) serve nothing until their replacements are available"))


def _some(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


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


def available_now(live: Json | None, body: Json) -> bool:
    return live is not None and _available(live, body)


def _slices(plan: Plan, gpus: list[PlacedGpu], key: str) -> int:
    product = gpu_product(plan.gpu)
    return sum(product.profile(i.mig_profile).compute_slices for g in gpus for i in g.instances if i.system == key)
