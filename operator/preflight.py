"""Preflight: what the operator depends on in the cluster, and what to do about each missing piece.

Checked on every reconcile (the first one runs at start, then every resync),
from reads only: the GPU Operator's namespace and ClusterPolicy (mixed MIG
strategy, mig-manager enabled), the watched namespaces, and tessera's CRDs
(installed, serving this operator's version, with this operator's schema).
Not in the Helm chart through `lookup`: it returns nothing under `helm
template`, which is how Argo CD renders the GitOps layouts.

Each finding becomes the systems' `PrerequisitesMet=False` condition (its
first finding's reason, every finding in the message), so `kubectl describe`
shows it and the usual status Events report it once per change; the log says
it once per change and `tessera_prerequisite_missing{reason}` counts it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tessera.operator import metrics
from tessera.operator.api import crds
from tessera.operator.api import status as st
from tessera.operator.settings import OperatorSettings

log = logging.getLogger("tessera.operator")
Json = dict[str, Any]

UPDATE_CRDS = ("apply this version's CRDs: kubectl apply --server-side --force-conflicts -f crds/ "
               "(the chart's crds/ folder; helm upgrade does not update CRDs)")


@functools.cache
def expected_crds() -> dict[str, Json]:
    """This operator's CRDs by name (plural.group), as `tessera crds` generates them."""
    generated = (crds.crd(kind) for kind in crds.KINDS)
    return {crd["metadata"]["name"]: crd for crd in generated}


@dataclass(frozen=True)
class Seen:
    """What the reads found: an object, None where it does not exist; `forbidden` names what tessera may not read."""

    namespaces: Mapping[str, bool]
    """Namespace -> exists, for the GPU Operator's and the watched ones."""
    cluster_policy: Json | None
    crds: Mapping[str, Json | None]
    """CRD name (plural.group) -> the CRD as the API server serves it."""
    forbidden: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    reason: str
    message: str
    """What is missing and what to do about it."""


def findings(seen: Seen, settings: OperatorSettings, expected_crds: Mapping[str, Json]) -> list[Finding]:
    """Every missing or mismatched prerequisite, in a fixed order (GPU Operator, namespaces, CRDs)."""
    found = [Finding(st.READ_FORBIDDEN, f"tessera may not read {what}: grant it get (the chart's ClusterRole does)")
             for what in seen.forbidden]
    found += _gpu_operator(seen, settings)
    found += [Finding(st.WATCHED_NAMESPACE_MISSING,
                      f"watched namespace {name!r} does not exist: create it, or remove it from --namespace "
                      "(the chart's watchNamespaces)")
              for name in settings.namespaces if seen.namespaces.get(name) is False]
    for name, expected in expected_crds.items():
        if f"CRD {name}" not in seen.forbidden:
            found += _crd(name, seen.crds.get(name), expected)
    return found


def _gpu_operator(seen: Seen, settings: OperatorSettings) -> list[Finding]:
    namespace = settings.gpu_operator_namespace
    found = []
    if seen.namespaces.get(namespace) is False:
        found.append(Finding(st.GPU_OPERATOR_NAMESPACE_MISSING,
                             f"the GPU Operator's namespace {namespace!r} does not exist: install the NVIDIA GPU "
                             "Operator there, or set --gpu-operator-namespace (the chart's gpuOperator.namespace) "
                             "to where it runs"))
    if seen.cluster_policy is None:
        found.append(Finding(st.CLUSTER_POLICY_MISSING,
                             f"no ClusterPolicy {settings.cluster_policy!r} (nvidia.com/v1): install the NVIDIA GPU "
                             "Operator with mig.strategy=mixed and migManager.enabled=true, or set --cluster-policy "
                             "(the chart's gpuOperator.clusterPolicy) to its name"))
        return found
    spec = seen.cluster_policy.get("spec") or {}
    strategy = (spec.get("mig") or {}).get("strategy", "single")
    if strategy != "mixed":
        found.append(Finding(st.MIG_STRATEGY_NOT_MIXED,
                             f"the ClusterPolicy's spec.mig.strategy is {strategy!r}: tessera needs 'mixed' (one "
                             "resource per MIG profile, nvidia.com/mig-<profile>); set it in the ClusterPolicy"))
    if (spec.get("migManager") or {}).get("enabled") is False:
        found.append(Finding(st.MIG_MANAGER_DISABLED,
                             "the ClusterPolicy's spec.migManager.enabled is false: no MIG layout tessera plans is "
                             "applied; set it to true"))
    return found


def _crd(name: str, served: Json | None, expected: Json) -> list[Finding]:
    version = expected["spec"]["versions"][0]["name"]
    if served is None:
        return [Finding(st.CRD_MISSING, f"CRD {name} is not installed: {UPDATE_CRDS}")]
    versions = {v["name"]: v for v in (served.get("spec") or {}).get("versions") or []}
    if not versions.get(version, {}).get("served"):
        return [Finding(st.CRD_VERSION_NOT_SERVED, f"CRD {name} does not serve {version}: {UPDATE_CRDS}")]
    if _schema(versions[version]) != _schema(expected["spec"]["versions"][0]):
        return [Finding(st.CRD_OUTDATED, f"CRD {name} has another {version} schema than this tessera's: {UPDATE_CRDS}")]
    return []


def _schema(version: Json) -> Any:
    """A version's schema and columns without empty values, which the API server may drop when it stores them."""
    return _without_empty({key: version.get(key) for key in ("schema", "additionalPrinterColumns", "subresources")})


def _without_empty(node: Any) -> Any:
    if isinstance(node, dict):
        kept = {key: _without_empty(value) for key, value in node.items()}
        return {key: value for key, value in kept.items() if value not in (None, [], {})}
    if isinstance(node, list):
        return [_without_empty(item) for item in node]
    return node


def condition(found: list[Finding]) -> st.Condition:
    """The systems' PrerequisitesMet condition: the first finding's reason, every finding in the message."""
    if not found:
        return st.Condition(st.PREREQUISITES_MET, True, st.ALL_PRESENT,
                            "the GPU Operator, the watched namespaces and tessera's CRDs are in place")
    return st.Condition(st.PREREQUISITES_MET, False, found[0].reason, "; ".join(f.message for f in found))


class Reporter:
    """Logs the findings once per change (not at every resync) and keeps the metric current."""

    def __init__(self) -> None:
        self.reported: list[Finding] | None = None

    def report(self, found: list[Finding]) -> None:
        for reason in st.PREREQUISITE_REASONS:
            metrics.PREREQUISITE_MISSING.labels(reason=reason).set(sum(f.reason == reason for f in found))
        if found == self.reported:
            return
        for finding in found:
            if finding not in (self.reported or []):
                log.warning("preflight: %s", finding.message)
        if not found:
            log.info("preflight: %s", condition(found).message)
        self.reported = found
