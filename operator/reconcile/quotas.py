"""A namespace's ResourceQuotas on GPUs: MIG instances as the planner's InstanceQuotas, whole GPUs as a cap on
its AdapterPools' servers (issue 29 item 2).

A ResourceQuota's `requests.nvidia.com/mig-<profile>` caps the pods of that
profile the namespace may run, and the API server refuses a pod beyond it
(FailedCreate on its ReplicaSet). tessera's servers request one instance per
pod, so what the solve may give the namespace's systems of a profile is the
quota's hard limit less what pods tessera does not own already hold there:
`used` counts every pod, tessera's own included, so tessera's Deployments'
pods are given back (those each asks for or has, the more). Several quotas of one namespace: the tightest.
A transition (make before break) still needs room for the new pods beside
the old ones; this cap is on the plan, not on the transition. Pure.

`requests.nvidia.com/gpu` counts whole GPUs, the same way. Only AdapterPool
servers request them (`nvidia.com/gpu: 1`); a compound system's pod requests
a MIG instance even where it takes a whole GPU (`nvidia.com/mig-7g.80gb` on
an H100), so that quota never counts a compound server and caps no compound
plan (its `requests.nvidia.com/mig-7g.80gb` does). The API server counts an
extended resource in a quota only as `requests.<name>`: it accepts a plain
`nvidia.com/gpu` among the hard limits but never counts nor enforces it, so
tessera ignores it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tessera.operator.api.systems import SystemObject
from tessera.operator.gpus.discovery import WHOLE_GPU_RESOURCE
from tessera.operator.reconcile.actions import Json
from tessera.planner.quota import InstanceQuota

REQUESTS = "requests."
RESOURCE_PREFIX = f"{REQUESTS}nvidia.com/mig-"
WHOLE_GPU_QUOTA = f"{REQUESTS}{WHOLE_GPU_RESOURCE}"
POD_RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class WholeGpuQuota:
    """What a namespace's ResourceQuotas on `requests.nvidia.com/gpu` leave tessera: at most `limit` whole GPUs."""

    limit: int
    source: str
    """The tightest quota, for messages."""


def _quantity(text: object) -> int:
    """An extended resource's quantity: a whole number (Kubernetes refuses fractions for them)."""
    try:
        return int(str(text))
    except ValueError:
        return 0


def _gpu_resource(resource: str) -> bool:
    return resource == WHOLE_GPU_RESOURCE or resource.startswith(POD_RESOURCE_PREFIX)


def tessera_pods_holding(children: Iterable[Json], namespace: str) -> dict[str, int]:
    """Per GPU resource of a pod (`nvidia.com/mig-<profile>`, `nvidia.com/gpu`), what tessera's Deployments' pods
    hold in the namespace, its compound systems' and its AdapterPools' alike: the pods each asks for or has, the
    more of the two (the API server counts a pod in `used` when it admits it, before the Deployment's status
    does; the pods alone would leave tessera less room for that moment, and its next plan one server fewer)."""
    held: dict[str, int] = {}
    for child in children:
        if child.get("kind") != "Deployment" or child["metadata"].get("namespace") != namespace:
            continue
        for resource, amount in pod_gpu_requests(child).items():
            held[resource] = held.get(resource, 0) + pods_held(child) * amount
    return held


def pods_held(deployment: Json) -> int:
    """The pods a Deployment asks for or has, the more of the two: what the quota may count of it."""
    return int(max((deployment.get("spec") or {}).get("replicas") or 0,
                   (deployment.get("status") or {}).get("replicas") or 0))


def pod_gpu_requests(deployment: Json) -> dict[str, int]:
    """GPU resource of a pod (`nvidia.com/mig-<profile>`, `nvidia.com/gpu`) -> what one pod of the Deployment
    requests of it."""
    requests: dict[str, int] = {}
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    for container in containers:
        for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            if _gpu_resource(resource):
                requests[resource] = requests.get(resource, 0) + _quantity(amount)
    return requests


def quota_rooms(resource_quotas: Iterable[Json], namespaces: set[str],
                children: Iterable[Json]) -> dict[tuple[str, str], tuple[int, str]]:
    """(namespace, quota resource) -> (what the tightest of the namespace's ResourceQuotas leaves tessera, that
    quota for messages), for the quotas on GPU resources (`requests.nvidia.com/...`) of the namespaces given."""
    children = list(children)
    tightest: dict[tuple[str, str], tuple[int, str]] = {}
    for quota in resource_quotas:
        namespace = quota["metadata"].get("namespace", "")
        if namespace not in namespaces:
            continue
        hard: Mapping[str, object] = (quota.get("spec") or {}).get("hard") or {}
        used: Mapping[str, object] = (quota.get("status") or {}).get("used") or {}
        mine = tessera_pods_holding(children, namespace)
        for resource, limit in hard.items():
            if not (resource.startswith(REQUESTS) and _gpu_resource(resource.removeprefix(REQUESTS))):
                continue
            others = max(0, _quantity(used.get(resource, 0)) - mine.get(resource.removeprefix(REQUESTS), 0))
            room = max(0, _quantity(limit) - others)
            source = f"ResourceQuota {namespace}/{quota['metadata']['name']}: {resource} {limit}"
            if (namespace, resource) not in tightest or room < tightest[(namespace, resource)][0]:
                tightest[(namespace, resource)] = (room, source)
    return tightest


def instance_quotas(resource_quotas: Iterable[Json], systems: list[SystemObject],
                    children: Iterable[Json]) -> list[InstanceQuota]:
    """One InstanceQuota per (namespace, profile) that a ResourceQuota caps, over the namespace's systems given."""
    by_namespace: dict[str, set[str]] = {}
    for system in systems:
        by_namespace.setdefault(system.ref.namespace, set()).add(system.ref.key)
    rooms = quota_rooms(resource_quotas, set(by_namespace), children)
    return [InstanceQuota(systems=frozenset(by_namespace[namespace]), mig_profile=resource[len(RESOURCE_PREFIX):],
                          limit=room, source=source)
            for (namespace, resource), (room, source) in sorted(rooms.items()) if resource.startswith(RESOURCE_PREFIX)]


def whole_gpu_quotas(resource_quotas: Iterable[Json], namespaces: set[str],
                     children: Iterable[Json]) -> dict[str, WholeGpuQuota]:
    """Namespace -> what its ResourceQuotas on `requests.nvidia.com/gpu` leave tessera's AdapterPool servers."""
    rooms = quota_rooms(resource_quotas, namespaces, children)
    return {namespace: WholeGpuQuota(room, source)
            for (namespace, resource), (room, source) in sorted(rooms.items()) if resource == WHOLE_GPU_QUOTA}
