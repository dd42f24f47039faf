"""A namespace's ResourceQuotas on MIG instances, as the planner's InstanceQuotas (issue 29 item 2).

A ResourceQuota's `requests.nvidia.com/mig-<profile>` caps the pods of that
profile the namespace may run, and the API server refuses a pod beyond it
(FailedCreate on its ReplicaSet). tessera's servers request one instance per
pod, so what the solve may give the namespace's systems of a profile is the
quota's hard limit less what pods tessera does not own already hold there:
`used` counts every pod, tessera's own included, so tessera's Deployments'
current pods are given back. Several quotas of one namespace: the tightest.
A transition (make before break) still needs room for the new pods beside
the old ones; this cap is on the plan, not on the transition. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tessera.operator.api.systems import SystemObject
from tessera.operator.reconcile.actions import Json
from tessera.planner.quota import InstanceQuota

RESOURCE_PREFIX = "requests.nvidia.com/mig-"
POD_RESOURCE_PREFIX = "nvidia.com/mig-"


def _quantity(text: object) -> int:
    """An extended resource's quantity: a whole number (Kubernetes refuses fractions for them)."""
    try:
        return int(str(text))
    except ValueError:
        return 0


def tessera_pods_holding(children: Iterable[Json], namespace: str) -> dict[str, int]:
    """Instances per profile that tessera's Deployments' pods hold in the namespace (their pods now)."""
    held: dict[str, int] = {}
    for child in children:
        if child.get("kind") != "Deployment" or child["metadata"].get("namespace") != namespace:
            continue
        pods = (child.get("status") or {}).get("replicas") or 0
        containers = ((child.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
        for container in containers:
            for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
                if resource.startswith(POD_RESOURCE_PREFIX):
                    profile = resource[len(POD_RESOURCE_PREFIX):]
                    held[profile] = held.get(profile, 0) + pods * _quantity(amount)
    return held


def instance_quotas(resource_quotas: Iterable[Json], systems: list[SystemObject],
                    children: Iterable[Json]) -> list[InstanceQuota]:
    """One InstanceQuota per (namespace, profile) that a ResourceQuota caps, over the namespace's systems given."""
    by_namespace: dict[str, set[str]] = {}
    for system in systems:
        by_namespace.setdefault(system.ref.namespace, set()).add(system.ref.key)
    children = list(children)
    tightest: dict[tuple[str, str], tuple[int, str]] = {}
    for quota in resource_quotas:
        namespace = quota["metadata"].get("namespace", "")
        if namespace not in by_namespace:
            continue
        hard: Mapping[str, object] = (quota.get("spec") or {}).get("hard") or {}
        used: Mapping[str, object] = (quota.get("status") or {}).get("used") or {}
        mine = tessera_pods_holding(children, namespace)
        for resource, limit in hard.items():
            if not resource.startswith(RESOURCE_PREFIX):
                continue
            profile = resource[len(RESOURCE_PREFIX):]
            others = max(0, _quantity(used.get(resource, 0)) - mine.get(profile, 0))
            room = max(0, _quantity(limit) - others)
            source = f"ResourceQuota {namespace}/{quota['metadata']['name']}: {resource} {limit}"
            if (namespace, profile) not in tightest or room < tightest[(namespace, profile)][0]:
                tightest[(namespace, profile)] = (room, source)
    return [InstanceQuota(systems=frozenset(by_namespace[namespace]), mig_profile=profile, limit=room, source=source)
            for (namespace, profile), (room, source) in sorted(tightest.items())]
