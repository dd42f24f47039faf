"""Decide, for AdapterPool server pods: which adapters to load, and their readiness gate.

Pure, like adapter_pool_decide.py: the pods as read, what each server
itself lists (`GET /v1/models`, read by the reconcile) and the placement's
adapters per server in; plain actions out. The rules (docs/adapter-loading.md):

- Every adapter placed on a server is loaded on every running pod of that
  server that does not list it: at start, after a container restart (the
  new process lists none), on a pod added later.
- The pod's condition `tessera.ai/adapters-loaded` (its readiness gate) is
  True only when the server lists every adapter placed on it, as read after
  this reconcile's loads; never from request metrics, never from a load's
  answer alone. A server that does not answer is False.
- The annotation `tessera.ai/loaded-adapters` holds how many of the placed
  adapters the server listed and a digest of their names.
- Nothing is written where condition and annotation already say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessera.operator import naming
from tessera.operator.reconcile.actions import Json, LoadAdapter, PatchPodStatus
from tessera.operator.reconcile.adapter_pool_decide import PoolServers, deployment_name

READINESS_GATE = naming.ADAPTERS_LOADED
LOADED_ANNOTATION = naming.LOADED_ADAPTERS
DEPLOYMENT_LABEL = f"{naming.GROUP}/deployment"
ADAPTER_DIR = "/adapters"
"""Where a server finds adapter `name`'s files: `/adapters/<name>` (how they get there is not in this slice)."""
LOAD_RETRY_S = 5.0
"""Seconds until a pod not yet loaded (its server not answering, or a load refused) is looked at again."""
MISSING_EXAMPLES = 5

LOADED, LOADING, NOT_ANSWERING, MISSING = "AdaptersLoaded", "LoadingAdapters", "ServerNotAnswering", "AdaptersMissing"


@dataclass(frozen=True)
class Listed:
    """What one pod's server answered to `GET /v1/models`: the adapters it lists, or why it did not answer."""

    url: str
    adapters: frozenset[str] | None = None
    error: str | None = None


ServerKey = tuple[str, str]
"""(namespace, Deployment name) of one placed server."""


def placed_adapters(decided: list[PoolServers]) -> dict[ServerKey, tuple[str, ...]]:
    """The adapters each placed server's pods must hold, by its Deployment (an invalid pool's: none decided)."""
    placed = {}
    for servers in decided:
        if servers.placement is None:
            continue
        ref = servers.pool.ref
        for index, server in enumerate(servers.placement.servers):
            placed[(ref.namespace, deployment_name(ref, index))] = tuple(server.adapters)
    return placed


def server_url(template: str, pod: Json, port: int) -> str:
    """Where the pod's vLLM API answers: the --adapter-server-url template filled from the pod."""
    return template.format(pod_ip=pod["status"]["podIP"], port=port, namespace=pod["metadata"]["namespace"],
                           pod=pod["metadata"]["name"])


def adapter_path(name: str) -> str:
    return f"{ADAPTER_DIR}/{name}"


def serving(pod: Json) -> bool:
    """A pod whose server can be asked: running, with an IP, not being deleted."""
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and bool(status.get("podIP"))
            and not pod["metadata"].get("deletionTimestamp"))


def server_of(pod: Json) -> ServerKey:
    return pod["metadata"]["namespace"], (pod["metadata"].get("labels") or {}).get(DEPLOYMENT_LABEL, "")


def pod_name(pod: Json) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def decide_loads(pods: list[Json], placed: Mapping[ServerKey, tuple[str, ...]],
                 listed: Mapping[str, Listed]) -> list[LoadAdapter]:
    """A load for each placed adapter a running pod's server does not list (in the placement's order)."""
    loads = []
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None or seen.adapters is None:
            continue
        for name in wanted:
            if name not in seen.adapters:
                loads.append(LoadAdapter(seen.url, pod_name(pod), name, adapter_path(name),
                                         reason=f"placed on the server, not listed by pod {pod_name(pod)}"))
    return loads


def readiness(wanted: tuple[str, ...], seen: Listed) -> tuple[bool, str, str]:
    """(loaded, reason, message) of the readiness gate, from what the server lists."""
    if seen.adapters is None:
        return False, NOT_ANSWERING, f"the server does not answer GET /v1/models: {seen.error}"
    missing = [name for name in wanted if name not in seen.adapters]
    if not missing:
        return True, LOADED, f"the server lists all {len(wanted)} adapters placed on it"
    examples = ", ".join(missing[:MISSING_EXAMPLES]) + (", ..." if len(missing) > MISSING_EXAMPLES else "")
    return False, MISSING, f"{len(missing)} of {len(wanted)} placed adapters not listed by the server: {examples}"


def loaded_value(names: list[str]) -> str:
    """The annotation: how many placed adapters the server lists, and a digest of their sorted names."""
    return f"{len(names)}:{naming.digest(sorted(names))[:16]}"


def gate_condition(pod: Json) -> Json | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == READINESS_GATE), None)


def decide_readiness(pods: list[Json], placed: Mapping[ServerKey, tuple[str, ...]],
                     listed: Mapping[str, Listed], now: str) -> list[PatchPodStatus]:
    """Each running server pod's readiness gate and annotation, in one patch where they differ from what its
    server lists."""
    patches = []
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None:
            continue
        patch: Json = {}
        loaded, reason, message = readiness(wanted, seen)
        status = "True" if loaded else "False"
        current = gate_condition(pod) or {}
        if (current.get("status"), current.get("reason"), current.get("message")) != (status, reason, message):
            since = current.get("lastTransitionTime") if current.get("status") == status else now
            patch["status"] = {"conditions": [{"type": READINESS_GATE, "status": status, "reason": reason,
                                               "message": message, "lastTransitionTime": since or now}]}
        if seen.adapters is not None:
            value = loaded_value([name for name in wanted if name in seen.adapters])
            if (pod["metadata"].get("annotations") or {}).get(LOADED_ANNOTATION) != value:
                patch["metadata"] = {"annotations": {LOADED_ANNOTATION: value}}
        if patch:
            patches.append(PatchPodStatus(pod["metadata"]["namespace"], pod["metadata"]["name"], patch,
                                          reason=f"pod {pod_name(pod)}: {reason}"))
    return patches


def loading_requeue(pods: list[Json], placed: Mapping[ServerKey, tuple[str, ...]],
                    listed: Mapping[str, Listed]) -> float | None:
    """LOAD_RETRY_S while a running server pod does not list all its adapters (a load failed, or it is not up)."""
    waiting = [pod for pod in pods if pod["metadata"]["uid"] in listed and server_of(pod) in placed
               and not readiness(placed[server_of(pod)], listed[pod["metadata"]["uid"]])[0]]
    return LOAD_RETRY_S if waiting else None
