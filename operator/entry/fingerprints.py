"""What of an object matters to the plan: an unchanged fingerprint means no reconcile."""

from __future__ import annotations

from tessera.operator import naming
from tessera.operator.gpus.discovery import MIG_PREFIX


def _key(body, kind: str) -> str:
    metadata = body.get("metadata") or {}
    return f"{kind}/{metadata.get('namespace', '')}/{metadata.get('name')}"


def system_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    # Status is tessera's own writing: only a spec change (generation), a deletion or a status that
    # someone else changed (observedGeneration lagging) asks for a reconcile.
    return _key(body, "system"), (event_type == "DELETED", metadata.get("uid"), metadata.get("generation"),
                                  (metadata.get("annotations") or {}).get("tessera.ai/gpu-product"),
                                  status.get("observedGeneration"))


def adapter_pool_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    """As a system's: a spec change, a deletion, or a status someone else changed."""
    metadata = body.get("metadata") or {}
    observed = (body.get("status") or {}).get("observedGeneration")
    return _key(body, "adapterpool"), (event_type == "DELETED", metadata.get("uid"), metadata.get("generation"),
                                       observed)


def node_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    relevant = {k: v for k, v in labels.items() if k.startswith(("nvidia.com/", "kubernetes.io/hostname"))}
    conditions = (body.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    allocatable = {k: v for k, v in ((body.get("status") or {}).get("allocatable") or {}).items()
                   if k.startswith(MIG_PREFIX) or k == "nvidia.com/gpu"}
    return _key(body, "node"), (event_type == "DELETED", metadata.get("uid"), sorted(relevant.items()),
                                (body.get("spec") or {}).get("unschedulable"), ready, sorted(allocatable.items()),
                                (metadata.get("annotations") or {}).get(naming.MIG_CONFIG_REQUESTED))


def deployment_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    return _key(body, "deployment"), (event_type == "DELETED", metadata.get("uid"), metadata.get("generation"),
                                      (metadata.get("annotations") or {}).get(naming.APPLIED_HASH),
                                      status.get("availableReplicas"), status.get("updatedReplicas"),
                                      status.get("observedGeneration"))


def job_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    """A profiler Job matters when it appears, finishes or goes: its result is read then."""
    metadata = body.get("metadata") or {}
    finished = sorted(c.get("type") for c in (body.get("status") or {}).get("conditions") or []
                      if c.get("type") in ("Complete", "Failed") and c.get("status") == "True")
    return _key(body, "job"), (event_type == "DELETED", metadata.get("uid"), finished)


def adapter_server_pod_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    """An AdapterPool server pod matters when it appears, gets its IP, runs, restarts a container or goes: its
    server may then list fewer adapters than placed on it; and when it turns Ready or not, which puts it on its
    adapters' routes or takes it off (adapter_routes.py). Its other conditions, and tessera's gate, do not."""
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    containers = sorted((c.get("name"), c.get("restartCount"), c.get("ready"))
                        for c in status.get("containerStatuses") or [])
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return _key(body, "pod"), (event_type == "DELETED", metadata.get("uid"), status.get("podIP"),
                               status.get("phase"), containers, ready)
