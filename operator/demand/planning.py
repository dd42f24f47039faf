"""Demand from Prometheus, per system: read, decide with hysteresis, hand the planner the rate.

The reconciler calls `DemandPlanner.apply` on the systems it read: a system
whose spec has a demandSource gets, as its spec's demand, the rate the
hysteresis decided (its spec's fixed rate until a first reading, and in dry
run). Because that rate is part of the spec the pool's plan is hashed from,
a changed decision re-plans the pool and an unchanged one reuses the stored
plan. `decorate` adds MetricsAvailable (and Degraded CapacityChangeDeferred)
to the system's conditions and `status_of` the demand's status, whose times
are the hysteresis windows' state: a restarted operator resumes them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, overload

from tessera.operator import metrics
from tessera.operator.demand import hysteresis as hy
from tessera.operator.demand import slo
from tessera.operator.api import status as st
from tessera.operator.api.v1alpha1 import ConditionType, DemandStatus
from tessera.operator.demand.settings import DemandSettings
from tessera.operator.demand.shown import ShownReading, shown_reading
from tessera.operator.demand.templates import FRONTEND_TEMPLATE, render
from tessera.operator.demand.prometheus import Reading, Reason, client_of, unknown
from tessera.operator.demand.promql import QueryRejected, confine
from tessera.operator.api.systems import SystemObject
from tessera.planner.nodes import NodePool
from tessera.planner.model import SystemDemandSource
from tessera.planner.plan import Plan
from tessera.planner.profiles import ProfileStore
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.resize import resize_replicas
from tessera.planner.solve import PlannerOptions

log = logging.getLogger("tessera.operator")

METRICS_AVAILABLE = ConditionType.METRICS_AVAILABLE
DEMAND_READ = "DemandRead"
CAPACITY_CHANGE_DEFERRED = "CapacityChangeDeferred"



@dataclass(frozen=True)
class Verdict:
    """One system's demand this reconcile."""

    reading: Reading
    decision: hy.Decision
    applied_rps: float
    dry_run: bool
    observed_time: datetime


class DemandPlanner:
    def __init__(self, settings: DemandSettings,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.settings = settings
        self.clock = clock
        self.client = client_of(settings)
        self.windows = hy.Windows(settings.stabilization_s, settings.repartition_window_s, settings.scale_down_step)
        self.verdicts: dict[str, Verdict] = {}
        self.violations: dict[str, Reading] = {}
        """The SLO violation rate per system served through its frontend, read beside its demand."""
        self.states: dict[str, hy.DemandState] = {}
        """The last decision's state per system: status holds the same, but shows a reading only once it
        moved (demand/shown.py: a status write per poll would be a write per system every few seconds)."""

    def watching(self, systems: list[SystemObject]) -> bool:
        return any(_source(s) is not None for s in systems)

    def apply(self, systems: list[SystemObject], children: list[dict]) -> list[SystemObject]:
        """The systems with, as their spec's demand, what hysteresis decided from Prometheus."""
        self.verdicts, self.violations = {}, {}
        now = self.clock()
        out = []
        for system in systems:
            system = self.with_default_source(system)
            source = _source(system)
            if source is None or system.spec is None:
                out.append(system)
                continue
            verdict = self.decide(system, now, _pods_ready(system, children))
            self.verdicts[system.ref.key] = verdict
            self.export(system.ref.key, verdict)
            if system.spec.frontend is not None and self.client is not None:
                self.violations[system.ref.key] = self.read_violations(system)
            out.append(replace(system, spec=system.spec.model_copy(update={"demand_rps": verdict.applied_rps})))
        return out

    def with_default_source(self, system: SystemObject) -> SystemObject:
        """A system served through its frontend with no demandSource reads the frontend's offered rate (the
        tessera-frontend template), when the operator has a Prometheus: without one, a source would only
        hold the spec's rate where it was, and a changed demandRequestsPerSecond would go unplanned."""
        spec = system.spec
        if self.client is None or spec is None or spec.frontend is None or spec.demand_source is not None:
            return system
        default = SystemDemandSource(template=FRONTEND_TEMPLATE)
        return replace(system, spec=spec.model_copy(update={"demand_source": default}))

    def decide(self, system: SystemObject, now: datetime, pods_ready: bool) -> Verdict:
        assert system.spec is not None and system.spec.demand_source is not None
        source = system.spec.demand_source
        previous = DemandStatus.model_validate(system.status["demand"]) if system.status.get("demand") else None
        applied_before = (previous.planned_rps if previous and previous.planned_rps is not None
                          else system.spec.demand_rps)
        state = self.states.get(system.ref.key) or _state(previous, applied_before)
        reading = self.read(system)
        decision = hy.decide(state, reading.value, now, self._windows(system), source.minimum_rps, pods_ready)
        # What status keeps is what is planned for: the next reconcile reads the same number back (an
        # unrounded one would differ from status in the last digits and re-plan the pool for nothing).
        decision = replace(decision, state=replace(decision.state, planned_rps=_rounded(decision.state.planned_rps)))
        dry = self.settings.dry_run or source.dry_run
        applied = system.spec.demand_rps if dry else decision.target_rps
        if decision.move in (hy.Move.UP, hy.Move.DOWN):  # Unknown is in MetricsAvailable and its Event
            log.info("system %s: %s%s", system.ref.key, decision.message, " (dry run: not applied)" if dry else "")
        self.states[system.ref.key] = decision.state
        return Verdict(reading, decision, applied, dry, now)

    def read(self, system: SystemObject) -> Reading:
        assert system.spec is not None and system.spec.demand_source is not None
        source = system.spec.demand_source
        if self.client is None:
            return unknown(Reason.NOT_CONFIGURED, "the operator has no Prometheus address (--prometheus-url); "
                                                  "planning for spec.demandRequestsPerSecond")
        assert source.template is not None or source.query is not None
        confined = source_query(source.query, source.template, self.settings.templates, system.ref.name,
                                system.spec.sources[0], system.ref.namespace)
        if isinstance(confined, Reading):
            return confined
        reading = self.client.instant(confined)
        if not reading.known:
            metrics.DEMAND_UNKNOWN_READINGS.labels(system.ref.key, reading.reason).inc()
        return reading

    def read_violations(self, system: SystemObject) -> Reading:
        assert self.client is not None and system.spec is not None
        query = render(slo.VIOLATIONS_QUERY, system.ref.name, system.spec.sources[0])
        return self.client.instant(confine(query, system.ref.namespace))

    def violations_shown(self, system: SystemObject) -> float | None:
        """The violation percentage status shows (demand/slo.py): None before the first reading of requests."""
        reading = self.violations.get(system.ref.key)
        before = (system.status.get("demand") or {}).get("violationPercent")
        if reading is None:
            return None
        return slo.shown_percent(before, reading, self.settings.slo_violation_target_pct)

    def _windows(self, system: SystemObject) -> hy.Windows:
        assert system.spec is not None and system.spec.demand_source is not None
        own = system.spec.demand_source.stabilization_s
        return self.windows if own is None else replace(self.windows, stabilization_s=float(own))

    def export(self, key: str, verdict: Verdict) -> None:
        if verdict.reading.value is not None:
            metrics.DEMAND_OBSERVED.labels(key).set(verdict.reading.value)
        else:
            with contextlib.suppress(KeyError):
                metrics.DEMAND_OBSERVED.remove(key)  # Unknown is absent, never 0
        metrics.DEMAND_RECOMMENDED.labels(key).set(verdict.decision.target_rps)
        metrics.DEMAND_PLANNED.labels(key).set(verdict.applied_rps)
        metrics.DEMAND_DRY_RUN.labels(key).set(1 if verdict.dry_run else 0)

    # -- re-plan cost --------------------------------------------------------------
    def replicas_only(self, current: Plan | None, systems: list[SystemObject], pool: NodePool,
                      options: PlannerOptions, measured: ProfileStore | None = None) -> Plan | None:
        """The running plan re-sized for a demand-only change, or None: then the pool re-plans in full.

        Only when demand moved this reconcile and no spec was edited (every
        system's generation is the one its status describes): a spec edit
        may change what the plan must be, beyond its replica counts.
        """
        moved = any(v.decision.move in (hy.Move.UP, hy.Move.DOWN) and not v.dry_run for v in self.verdicts.values())
        edited = any(s.ref.generation != s.status.get("observedGeneration") for s in systems)
        if current is None or not moved or edited:
            return None
        specs = [s.spec for s in systems if s.spec is not None]
        started = time.perf_counter()
        try:
            store = build_profile_store(specs, pool.gpu, measured, batches=options.batches)
        except ValueError:
            return None
        resized = resize_replicas(current, specs, pool, store, options=options)
        metrics.DEMAND_RESOLVES.labels("replicas-only" if resized is not None else "full").inc()
        log.info("replicas-only re-solve of %d system(s): %s (%.2f s)", len(specs),
                 "serves the demand" if resized is not None else "cannot serve, re-planning in full",
                 time.perf_counter() - started)
        return resized

    # -- status ------------------------------------------------------------------
    def shown(self, system: SystemObject, verdict: Verdict) -> ShownReading:
        """The reading status shows (demand/shown.py): the one it shows while readings jitter around it."""
        demand = system.status.get("demand") or {}
        before = demand.get("observedTime")
        shown = ShownReading(demand.get("observedRequestsPerSecond"),
                             datetime.fromisoformat(before.replace("Z", "+00:00")) if before else None)
        reading = _rounded(verdict.reading.value) if verdict.reading.known else None
        return shown_reading(shown, reading, verdict.observed_time, verdict.decision.state.below_since is not None,
                             self._windows(system).max_gap_s / 2)

    def decorate(self, system: SystemObject, phase: str, conditions: list[st.Condition],
                 summary: dict | None) -> tuple[str, list[st.Condition], dict | None]:
        """MetricsAvailable, and Degraded CapacityChangeDeferred when more capacity waits for a re-partition."""
        verdict = self.verdicts.get(system.ref.key)
        if verdict is None:
            return phase, conditions, summary
        reading = verdict.reading
        if reading.known:
            metrics = st.Condition(METRICS_AVAILABLE, True, DEMAND_READ,
                                   f"demand {self.shown(system, verdict).rps:g} requests/s; {verdict.decision.message}")
        else:
            metrics = st.Condition(METRICS_AVAILABLE, False, reading.reason,
                                   f"{reading.message}; demand Unknown, the plan for "
                                   f"{verdict.applied_rps:g} requests/s holds and nothing scales down")
        conditions = [*conditions, metrics]
        if system.ref.key in self.violations:
            previous = next((c for c in system.status.get("conditions") or [] if c.get("type") == slo.LATENCY_SLO_MET),
                            None)
            met = slo.condition(self.violations_shown(system), self.settings.slo_violation_target_pct, previous)
            conditions = conditions if met is None else [*conditions, met]
        blocked = any(c.type == st.MIG_LAYOUT_APPLIED and c.reason == st.NODE_IN_USE for c in conditions)
        if blocked and verdict.decision.state.last_scale_up is not None:
            conditions = [c for c in conditions if c.type != st.DEGRADED] + [st.Condition(
                st.DEGRADED, True, CAPACITY_CHANGE_DEFERRED,
                f"demand rose to {verdict.decision.target_rps:g} requests/s; more capacity needs a new MIG layout "
                "on nodes that serve, deferred until re-partitioning them is allowed; free instances serve meanwhile")]
            phase = st.PHASE_DEGRADED
        return phase, conditions, summary

    def status_of(self, system: SystemObject, conditions: list[st.Condition]) -> dict[str, Any] | None:
        verdict = self.verdicts.get(system.ref.key)
        if verdict is None:
            return None
        state = verdict.decision.state
        if _repartition_started(system, conditions):
            state = hy.record_repartition(state, verdict.observed_time)
        shown = self.shown(system, verdict)
        status = DemandStatus(
            source="Prometheus", observed_rps=shown.rps, observed_time=shown.time,
            planned_rps=_rounded(verdict.applied_rps), recommended_rps=_rounded(state.planned_rps),
            decision=verdict.decision.message[:256], dry_run=verdict.dry_run,
            below_since=state.below_since, window_peak_rps=_rounded(state.window_peak_rps),
            last_scale_up_time=state.last_scale_up, last_scale_down_time=state.last_scale_down,
            last_repartition_time=state.last_repartition, violation_pct=self.violations_shown(system))
        return status.model_dump(by_alias=True, mode="json", exclude_none=True)



def source_query(query: str | None, template: str | None, templates: Mapping[str, str], name: str, entry: str,
                 namespace: str) -> str | Reading:
    """The demand query sent, for systems and AdapterPools alike: the spec's own, or the administrator's template
    with `$system` as `name` and `$entry` as `entry`, confined to `namespace` (promql.py); or why none can be sent
    (Unknown)."""
    if template is not None:
        found = templates.get(template)
        if found is None:
            return unknown(Reason.UNKNOWN_TEMPLATE, f"spec.demandSource.template: no template named "
                                                    f"{template!r} (known: {', '.join(sorted(templates))})")
        query = render(found, name, entry)
    try:
        return confine(query or "", namespace)
    except QueryRejected as error:
        return unknown(Reason.QUERY_REJECTED, f"spec.demandSource: {error}")

def _source(system: SystemObject) -> SystemDemandSource | None:
    return system.spec.demand_source if system.spec is not None else None


def _state(previous: DemandStatus | None, applied_rps: float) -> hy.DemandState:
    if previous is None:
        return hy.DemandState(applied_rps)
    planned = previous.recommended_rps if previous.recommended_rps is not None else applied_rps
    return hy.DemandState(planned, previous.below_since, previous.window_peak_rps, previous.last_scale_up_time,
                          previous.last_scale_down_time, previous.last_repartition_time, previous.observed_time)


def _pods_ready(system: SystemObject, children: list[dict]) -> bool:
    """Every Deployment of the system has all its replicas Ready (and updated)."""
    for child in children:
        if child.get("kind") != "Deployment":
            continue
        owners = child["metadata"].get("ownerReferences") or []
        if not any(o.get("uid") == system.ref.uid for o in owners):
            continue
        wanted = (child.get("spec") or {}).get("replicas", 1)
        status = child.get("status") or {}
        if (status.get("readyReplicas") or 0) < wanted or (status.get("updatedReplicas") or 0) < wanted:
            return False
        if (status.get("replicas") or 0) > wanted:
            return False  # pods still stopping
    return True


def _repartition_started(system: SystemObject, conditions: list[st.Condition]) -> bool:
    """The system's MIG layout just left Applied: a node of its plan is being re-partitioned."""
    before = {c.get("type"): c for c in system.status.get("conditions") or []}
    old = before.get(st.MIG_LAYOUT_APPLIED)
    new = next((c for c in conditions if c.type == st.MIG_LAYOUT_APPLIED), None)
    return bool(old and old.get("status") == "True" and new is not None and new.reason == st.MIG_PENDING)


@overload
def _rounded(value: float) -> float: ...
@overload
def _rounded(value: None) -> None: ...
def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
