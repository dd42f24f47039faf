"""What already runs, in a re-plan others caused (issue 28 item 6): whom the pool's solve protects.

A re-plan caused by one namespace never lowers another's served demand
below what it had, unless quotas or priorities say so (issue 29 item 2:
quota, then priority, then what already runs). A system *runs* when the plan
in force serves some of its demand; the re-plan is *caused* by the systems
that are new or whose spec changed since that plan. Protected are the
running systems with an unchanged spec in namespaces none of whose systems
changed. When no system changed (a node joined or left, a quota, a
measurement), the systems the plan in force protected and that are still
unchanged stay protected, so the next unrelated re-plan does not undo it.

A demand move (a `demandSource` reading, or an edit of
demandRequestsPerSecond alone) is a change of its system, and so of its
namespace: that system is re-planned for its new demand, and within its
namespace the systems may trade capacity as for any change there. But when
other namespaces changed too, no running system of a changed namespace whose
spec is unchanged or whose demand alone moved loses what it serves because of
them: it keeps the requests/s the plan in force serves it as a floor (no
nodes kept: its own new demand may need its nodes' layouts changed). A spec
edited beyond its demand is re-planned as asked, with no floor.

For each protected system the planner gets:
- its served fraction as a floor (planner plan()'s `running`), held before
  the others of its priority are served; higher priorities and quotas still
  come first (the planner's stage order);
- the nodes its replicas run on, kept for it (NodeState.kept_for: their
  layouts do not change, as a change would stop its pods), unless a changed
  system has a higher spec.poolPriority.

Pure: plain data in (the plan in force, the spec digests it was made for,
the candidates), plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tessera.operator.api.systems import SystemObject
from tessera.operator.reconcile.decide import spec_digest
from tessera.planner.plan import Plan


@dataclass(frozen=True)
class Protection:
    """What the pool's solve holds for what already runs."""

    floors: dict[str, float] = field(default_factory=dict)
    """System key -> the served fraction the plan in force gives it (planner plan()'s `running`)."""
    kept_for: dict[str, list[str]] = field(default_factory=dict)
    """Node -> the protected systems whose replicas run there (NodeState.kept_for)."""


def protection(current: Plan | None, planned_for: Mapping[str, str], candidates: list[SystemObject],
               spec_hash: Mapping[str, str]) -> Protection:
    """Whom a re-plan of `candidates` protects. `current` is the plan in force, `planned_for` the spec digests
    (system key -> digest) it was made for; `spec_hash` the candidates' digests now."""
    if current is None:
        return Protection()
    changed = {s.ref.key for s in candidates if planned_for.get(s.ref.key) != spec_hash.get(s.ref.key)}
    served = {s.system: s.served_rps for s in current.systems if s.demand_rps > 0 and s.served_rps > 0}
    running = [s for s in candidates if s.ref.key in served and s.spec is not None]
    unchanged = [s for s in running if s.ref.key not in changed]
    namespaces = {s.ref.namespace for s in candidates if s.ref.key in changed}
    if changed:
        protected = [s for s in unchanged if s.ref.namespace not in namespaces]
        demands = {s.system: s.demand_rps for s in current.systems}
        held = [s for s in running if s.ref.namespace in namespaces and namespaces - {s.ref.namespace}
                and (s.ref.key not in changed or _demand_alone_moved(s, demands[s.ref.key], planned_for))]
    else:
        protected, held = [s for s in unchanged if s.ref.key in current.running], []
    if not protected and not held:
        return Protection()
    above = max((_priority(s) for s in candidates if s.ref.key in changed), default=None)
    keeps = {s.ref.key for s in protected if above is None or _priority(s) >= above}
    kept_for: dict[str, set[str]] = {}
    for gpu in current.gpus:
        for instance in gpu.instances:
            if instance.system in keeps and gpu.node is not None:
                kept_for.setdefault(gpu.node, set()).add(instance.system)
    return Protection({s.ref.key: min(1.0, served[s.ref.key] / s.spec.demand_rps)
                       for s in sorted([*protected, *held], key=lambda s: s.ref.key)
                       if s.spec is not None and s.spec.demand_rps > 0},
                      {node: sorted(systems) for node, systems in sorted(kept_for.items())})


def _demand_alone_moved(system: SystemObject, planned_demand: float, planned_for: Mapping[str, str]) -> bool:
    """Its spec is the one the plan in force was made for but for demandRequestsPerSecond (a demandSource's
    reading replaces it in the spec the operator plans)."""
    assert system.spec is not None
    before = replace(system, spec=system.spec.model_copy(update={"demand_rps": planned_demand}))
    return spec_digest(before) == planned_for.get(system.ref.key)


def _priority(system: SystemObject) -> int:
    return system.spec.pool_priority if system.spec is not None else 0
