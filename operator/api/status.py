"""Status and Events of CompoundInferenceSystems: conditions, phase, plan summary.

Every condition reason is a named constant; messages say what a user can do.
Status is built as plain dicts here, in one module, so that the typed status
models (operator/api/v1alpha1.py) can replace the dicts locally. An Event is posted
when a condition changes status or reason (or the plan changes): a decision,
not a heartbeat, so an idle resync posts none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from tessera.operator import naming
from tessera.operator.api.v1alpha1 import (ConditionType, ConfigurationSummary, Phase, PlanChangesSummary,
                                           ProfileSourceCounts, SystemPlanSummary, TaskPlanSummary)
from tessera.operator.api.systems import SystemRef
from tessera.planner.plan import Plan
from tessera.planner.profiles import ProfileSource

# Condition types: the API's (operator/api/v1alpha1.py), the ones a CompoundInferenceSystem carries.
READY = ConditionType.READY
PLANNED = ConditionType.PLANNED
PROGRESSING = ConditionType.PROGRESSING
DEGRADED = ConditionType.DEGRADED
MIG_LAYOUT_APPLIED = ConditionType.MIG_LAYOUT_APPLIED
PROFILES_ESTIMATED = ConditionType.PROFILES_ESTIMATED
PROFILING_COMPLETE = ConditionType.PROFILING_COMPLETE
INVALID = ConditionType.INVALID
METRICS_AVAILABLE = ConditionType.METRICS_AVAILABLE
PREREQUISITES_MET = ConditionType.PREREQUISITES_MET
ADAPTERS_PLACED = ConditionType.ADAPTERS_PLACED  # an AdapterPool's
LATENCY_SLO_MET = ConditionType.LATENCY_SLO_MET
CONDITION_ORDER = (READY, PLANNED, PROGRESSING, DEGRADED, MIG_LAYOUT_APPLIED, PROFILES_ESTIMATED, PROFILING_COMPLETE,
                   INVALID, METRICS_AVAILABLE, LATENCY_SLO_MET, PREREQUISITES_MET, ADAPTERS_PLACED)

# Reasons.
INVALID_SPEC = "InvalidSpec"
SLO_UNREACHABLE = "SloUnreachable"
TOO_LARGE_TO_PLAN = "TooLargeToPlan"
SPEC_VALID = "SpecValid"
NO_GPU_POOL = "NoGpuPool"
PLANNING = "Planning"
PLAN_FOUND = "PlanFound"
SOLVE_FAILED = "SolveFailed"
LAST_GOOD_PLAN = "LastGoodPlanKept"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
QUOTA_REACHED = "QuotaReached"
"""Degraded: the namespace's ResourceQuota on MIG instances holds the plan below the demand."""
PREEMPTED_BY_PRIORITY = "PreemptedByPriority"
"""Degraded: systems of a higher spec.poolPriority took the pool's capacity first."""
HELD_FOR_RUNNING_SYSTEMS = "HeldForRunningSystems"
"""Degraded: running systems of other namespaces keep what they serve (operator/reconcile/running_decide.py)."""
DEMAND_SERVED = "DemandServed"
MIG_PENDING = "MigLayoutPending"
MIG_APPLIED = "MigLayoutApplied"
MIG_FAILED = "MigLayoutFailed"
NODE_IN_USE = "NodeInUse"
NODE_CHANGE_HELD = "NodeChangeHeld"
REPLACEMENT_PENDING = "ReplacementPending"
NO_REPLACEMENT_CAPACITY = "NoReplacementCapacity"
REPLACED_IN_PLACE = "ReplacedInPlace"
"""Ready=False: old servers deleted before their replacements, which need their MIG instances (the loss stated)."""
NODE_CHANGE_QUEUED = "NodeChangeQueued"
NODE_DRAINING = "NodeDraining"
NODE_CHANGED_WITHOUT_REPLACEMENT = "NodeChangedWithoutReplacement"
"""MigLayoutApplied=False: a serving node re-partitioned with nothing carrying its replicas meanwhile (the loss stated)."""
PAUSED = "Paused"
ESTIMATED = "BuiltInEstimate"
MEASURED_OR_GIVEN = "MeasuredOrGiven"
SERVERS_STARTING = "ServersStarting"
SERVERS_READY = "ServersReady"
SERVERS_UNAVAILABLE = "ServersUnavailable"
RECONCILED = "Reconciled"
PROFILING = "Profiling"
PROFILES_MEASURED = "ProfilesMeasured"
PROFILING_FAILED = "ProfilingFailed"
# PrerequisitesMet's reasons (operator/preflight.py): what of the cluster tessera depends on is missing.
ALL_PRESENT = "AllPresent"
GPU_OPERATOR_NAMESPACE_MISSING = "GpuOperatorNamespaceMissing"
CLUSTER_POLICY_MISSING = "ClusterPolicyMissing"
MIG_STRATEGY_NOT_MIXED = "MigStrategyNotMixed"
MIG_MANAGER_DISABLED = "MigManagerDisabled"
WATCHED_NAMESPACE_MISSING = "WatchedNamespaceMissing"
CRD_MISSING = "CrdMissing"
CRD_VERSION_NOT_SERVED = "CrdVersionNotServed"
CRD_OUTDATED = "CrdOutdated"
READ_FORBIDDEN = "PrerequisiteReadForbidden"
PREREQUISITE_REASONS = (GPU_OPERATOR_NAMESPACE_MISSING, CLUSTER_POLICY_MISSING, MIG_STRATEGY_NOT_MIXED,
                        MIG_MANAGER_DISABLED, WATCHED_NAMESPACE_MISSING, CRD_MISSING, CRD_VERSION_NOT_SERVED,
                        CRD_OUTDATED, READ_FORBIDDEN)
NO_PROFILING_INSTANCE = "NoInstanceToProfileOn"
ALL_ADAPTERS_PLACED = "AllAdaptersPlaced"
ADAPTER_LOAD_FAILED = "AdapterLoadFailed"
ROUTE_NAME_TAKEN = "RouteNameTaken"
ADAPTERS_REPLACED = "AdaptersReplaced"
"""Degraded: adapters failed to load on their servers repeatedly (reconcile/adapter_loading.py); the rest serve."""

# Phases, shown by `kubectl get` (the API's; MIG partitioning is part of deploying).
PHASE_INVALID = Phase.INVALID
PHASE_PENDING = Phase.PENDING
PHASE_DEPLOYING = Phase.DEPLOYING
PHASE_READY = Phase.READY
PHASE_DEGRADED = Phase.DEGRADED

POOL_NOT_ALLOWED = "PoolNotAllowed"
"""Invalid: the system's namespace may not use its GPU pool (--pool-namespaces, reconcile/pool_access.py)."""
VIOLATIONS_WITHIN_TARGET = "ViolationsWithinTarget"
VIOLATIONS_ABOVE_TARGET = "ViolationsAboveTarget"
"""LatencySLOMet's reasons (demand/slo.py)."""
WARNING_REASONS = {INVALID_SPEC, SLO_UNREACHABLE, TOO_LARGE_TO_PLAN, NO_GPU_POOL, SOLVE_FAILED, LAST_GOOD_PLAN,
                   INSUFFICIENT_CAPACITY, MIG_FAILED, NODE_IN_USE, SERVERS_UNAVAILABLE, PROFILING_FAILED,
                   POOL_NOT_ALLOWED, VIOLATIONS_ABOVE_TARGET, QUOTA_REACHED, PREEMPTED_BY_PRIORITY, ADAPTER_LOAD_FAILED,
                   ROUTE_NAME_TAKEN, REPLACED_IN_PLACE, NODE_CHANGED_WITHOUT_REPLACEMENT, HELD_FOR_RUNNING_SYSTEMS, *PREREQUISITE_REASONS}


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str

    def as_dict(self, generation: int, since: str) -> dict:
        return {"type": self.type, "status": "True" if self.status else "False", "reason": self.reason,
                "message": self.message, "lastTransitionTime": since, "observedGeneration": generation}


@dataclass(frozen=True)
class EventSpec:
    type: str
    reason: str
    message: str


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_status(generation: int, phase: str, conditions: list[Condition], summary: dict | None,
                 previous: dict, now: str, demand: dict | None = None, frontend: dict | None = None) -> dict:
    """The new status; a condition keeps its lastTransitionTime while its status stays the same."""
    before = {c.get("type"): c for c in previous.get("conditions") or []}
    ordered = sorted(conditions, key=lambda c: CONDITION_ORDER.index(c.type))
    listed = []
    for condition in ordered:
        old = before.get(condition.type)
        unchanged = old is not None and old.get("status") == ("True" if condition.status else "False")
        listed.append(condition.as_dict(generation, old["lastTransitionTime"] if old and unchanged else now))
    status = {"observedGeneration": generation, "phase": phase, "conditions": listed}
    if summary is not None:
        status["plan"] = summary
    elif previous.get("plan") is not None:
        status["plan"] = previous["plan"]  # the last good plan's summary stays while it keeps running
    if demand is not None or previous.get("demand") is not None:
        status["demand"] = demand  # None removes it (a merge patch): the demandSource was removed
    if frontend is not None or previous.get("frontend") is not None:
        status["frontend"] = frontend  # None removes it (a merge patch): spec.frontend was unset
    return status


def status_changed(previous: dict, new: dict) -> bool:
    """Whether writing `new` (a JSON merge patch) would change the status stored: else nothing is written.

    Asked of the patch's result, not of the keys tessera writes: a key the
    patch cannot remove would be "changed" at every reconcile, and written
    again each time.
    """
    return merge_patched(previous, new) != previous


def merge_patched(target: dict, patch: dict) -> dict:
    """`target` after the JSON merge patch `patch` (RFC 7386): None removes, objects merge, the rest replaces."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_patched(merged[key], value)
        else:
            merged[key] = value
    return merged


def events_for(previous: dict, new: dict) -> list[EventSpec]:
    """One Event per changed decision: a condition's status or reason, or a new plan."""
    before = {c["type"]: c for c in previous.get("conditions") or []}
    events = []
    for condition in new["conditions"]:
        if condition["type"] == PROGRESSING:
            continue  # it names the same step as Ready's reason: one Event is enough
        old = before.get(condition["type"])
        if old and (old["status"], old["reason"]) == (condition["status"], condition["reason"]):
            if not (condition["type"] == PLANNED and old["message"] != condition["message"]):
                continue
        if old is None and condition["status"] == "False" and condition["reason"] not in WARNING_REASONS:
            continue  # a fresh object's "not yet" conditions are no news
        kind = "Warning" if condition["reason"] in WARNING_REASONS else "Normal"
        events.append(EventSpec(kind, condition["reason"], f"{condition['type']}: {condition['message']}"))
    return events


def event_body(system: SystemRef, event: EventSpec, now: str) -> dict:
    name = f"{system.name[:200]}.{naming.digest([system.uid, event.reason, event.message, now])[:16]}"
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": system.namespace},
        "involvedObject": {"apiVersion": system.owner_reference()["apiVersion"], "kind": system.kind,
                           "name": system.name, "namespace": system.namespace, "uid": system.uid},
        "type": event.type, "reason": event.reason, "message": event.message[:1024],
        "source": {"component": "tessera-operator"}, "reportingComponent": "tessera.ai/operator",
        "reportingInstance": "tessera-operator",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


def _changes(plan: Plan) -> PlanChangesSummary | None:
    """The pool plan's change summary in brief (its node lists bounded to examples)."""
    if plan.changes is None:
        return None
    return PlanChangesSummary(summary=plan.changes.summary[:512], nodes_changed=len(plan.changes.nodes_changed),
                              nodes_kept=len(plan.changes.nodes_kept), changed_examples=plan.changes.nodes_changed[:8])


def plan_summary(plan: Plan, system_key: str, gpus: int, slices: int, pool_slices: int) -> dict:
    """What `kubectl describe` shows of a system's share of its pool's plan, in the API's typed shape
    (SystemPlanSummary): small at 50 tasks. `pool_slices`: the whole pool's (its share's denominator)."""
    summary = next(s for s in plan.systems if s.system == system_key)
    sources = {source.value: 0 for source in ProfileSource}
    tasks = []
    for task in (t for t in plan.tasks if t.system == system_key):
        for config in task.configs:
            sources[config.source.value] += config.replicas
        tasks.append(TaskPlanSummary(
            name=task.task, variant=task.variant,
            configurations=[ConfigurationSummary(mig_profile=c.segment.mig_profile, mps=c.segment.mps,
                                                 batch=c.batch, replicas=c.replicas) for c in task.configs]))
    typed = SystemPlanSummary(
        gpu=plan.gpu, gpus=gpus, slices=slices, pool_slices=pool_slices,
        pool_share_pct=round(min(100.0, 100 * slices / pool_slices), 1) if pool_slices else None,
        predicted_latency_ms=round(summary.worst_path_latency_ms, 1),
        predicted_accuracy=round(min(summary.worst_path_accuracy, 1.0), 4),
        demand_rps=round(summary.demand_rps, 3), served_rps=round(summary.served_rps, 3),
        profile_sources=ProfileSourceCounts(**sources), tasks=tasks, changes=_changes(plan))
    return typed.model_dump(by_alias=True, mode="json", exclude_none=True)
