"""Which mig-parted ConfigMap tessera writes, and the check that the ClusterPolicy names the same one.

The admin names tessera's ConfigMap in two places: the ClusterPolicy
(`spec.migManager.config.name`, what mig-manager reads) and tessera's own
setting (`--mig-configmap`, the chart's `gpuOperator.migConfigMap`).
tessera never edits the ClusterPolicy. When the two disagree it keeps
writing only its configured ConfigMap (never the GPU Operator's own, which
that operator may overwrite) and reports the mismatch: a warning in its log,
a Warning Event on the ClusterPolicy, and the metric
`tessera_mig_configmap_mismatch` at 1. Nodes it relabels then end in
mig-manager's `failed` state (the config is not in the ConfigMap mig-manager
reads), which the systems' MigLayoutApplied condition shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tessera.operator import metrics

log = logging.getLogger("tessera.operator")
MISMATCH_REASON = "MigConfigMapMismatch"


@dataclass(frozen=True)
class Resolved:
    name: str
    """The ConfigMap tessera writes its MIG configs into."""
    mismatch: str | None = None
    """What to tell the admin, when the ClusterPolicy names another ConfigMap."""


def resolve(policy_names: str | None, configured: str | None, fallback: str) -> Resolved:
    """`policy_names`: what the ClusterPolicy names (None: no ClusterPolicy); `configured`: tessera's setting."""
    if configured is None:
        return Resolved(policy_names or fallback)
    if policy_names is not None and policy_names != configured:
        return Resolved(configured, f"the ClusterPolicy names mig-parted ConfigMap {policy_names!r} but tessera is "
                                    f"set to write {configured!r}: mig-manager will not see tessera's MIG layouts. "
                                    f"Set spec.migManager.config.name: {configured} in the ClusterPolicy (or "
                                    "tessera's gpuOperator.migConfigMap to the ClusterPolicy's)")
    return Resolved(configured)


class MismatchReporter:
    """Reports a mismatch once per change (not at every resync); clears the metric when it is fixed."""

    def __init__(self) -> None:
        self.reported: str | None = None

    def changed(self, resolved: Resolved) -> bool:
        """Sets the metric; True when the mismatch is new (so an Event is due)."""
        metrics.MIG_CONFIGMAP_MISMATCH.set(1 if resolved.mismatch else 0)
        new = resolved.mismatch is not None and resolved.mismatch != self.reported
        if new:
            log.warning("%s", resolved.mismatch)
        elif self.reported and resolved.mismatch is None:
            log.info("the ClusterPolicy names tessera's mig-parted ConfigMap %r again", resolved.name)
        self.reported = resolved.mismatch
        return new


def event_body(policy: dict, message: str, namespace: str, now: str, suffix: str) -> dict:
    """A Warning Event on the (cluster-scoped) ClusterPolicy, kept in tessera's own namespace."""
    metadata = policy.get("metadata") or {}
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{metadata.get('name', 'cluster-policy')}.{suffix}", "namespace": namespace},
        "involvedObject": {"apiVersion": policy.get("apiVersion", "nvidia.com/v1"), "kind": "ClusterPolicy",
                           "name": metadata.get("name"), "uid": metadata.get("uid")},
        "type": "Warning", "reason": MISMATCH_REASON, "message": message[:1024],
        "source": {"component": "tessera-operator"}, "reportingComponent": "tessera.ai/operator",
        "reportingInstance": "tessera-operator", "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }
