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
- An adapter whose loads fail `limit` times in a row on a pod is failed there
  (issue 30 item 4): the gate no longer waits for it, so one bad adapter never
  keeps the others from serving, and it is tried again after a wait that
  doubles from LOAD_RETRY_S up to a cap. Each pod's record of its failures
  (the count, the engine's last error, the adapter's source) is the annotation
  `tessera.ai/adapter-failures`, written with the gate, so a restarted
  operator resumes it; a changed source or digest starts the count afresh.
- The annotation `tessera.ai/adapter-sources` records, per placed adapter the
  server lists, the source digest of the copy tessera loaded (issue 30 item 3):
  a listed adapter whose copy is of another source (a spec edit), or of one not
  recorded, is unloaded and loaded again, and only a copy of the placed source
  counts as held: it labels the pod (`adapters.tessera.ai/<name>`, at most
  LABELLED_MOST per pod) and puts the pod on the adapter's route (adapter_routes.py).
- An adapter a pod's server lists that is not placed on its server (a
  re-placement moved it elsewhere, or someone else loaded it) is unloaded, but
  only once the adapter's route, as read, no longer lists the pod: the route
  is rewritten without the pod in the reconcile that sees the move, so a
  client sent there never meets a server that dropped the adapter.
- Nothing is written where condition, annotations and labels already say so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Set
from dataclasses import asdict, dataclass

from tessera.operator import naming
from tessera.operator.reconcile.actions import Json, LoadAdapter, PatchPodStatus, UnloadAdapter
from tessera.operator.reconcile.adapter_pool_decide import PoolServers, ServerLoad, deployment_name
from tessera.operator.reconcile.adapter_weights import ADAPTER_DIR

READINESS_GATE = naming.ADAPTERS_LOADED
LOADED_ANNOTATION = naming.LOADED_ADAPTERS
FAILURES_ANNOTATION = f"{naming.GROUP}/adapter-failures"
ERROR_CHARS = 200
"""The engine's error kept per failing adapter, cut to this many characters."""
RECORDED_MOST = 100
"""Failing adapters one pod's annotation records (about 300 bytes each); those beyond are retried every
LOAD_RETRY_S and keep the gate closed, as without a record."""
SOURCES_ANNOTATION = f"{naming.GROUP}/adapter-sources"
"""The source digest of each placed adapter's copy the pod's server lists, as tessera loaded it (JSON)."""
HOLDS_PREFIX = f"adapters.{naming.GROUP}/"
"""A pod label per adapter its server holds (a copy of the placed source): `adapters.tessera.ai/<name>: <source>`."""
LABELLED_MOST = 64
"""Adapters labelled per pod, in the placement's order (about 60 bytes each); the sources annotation and the
routes count all of them."""
DEPLOYMENT_LABEL = f"{naming.GROUP}/deployment"
LOAD_RETRY_S = 5.0
"""Seconds until a pod not yet loaded (its server not answering, or a load refused) is looked at again."""
MISSING_EXAMPLES = 5

LOADED, LOADING, NOT_ANSWERING, MISSING = "AdaptersLoaded", "LoadingAdapters", "ServerNotAnswering", "AdaptersMissing"
SOME_FAILED = "SomeAdaptersFailed"


@dataclass(frozen=True)
class Listed:
    """What one pod's server answered to `GET /v1/models`: the adapters it lists, or why it did not answer."""

    url: str
    adapters: frozenset[str] | None = None
    error: str | None = None
    fetch_url: str = ""
    """Where the pod's fetcher sidecar answers (docs/weights.md)."""


ServerKey = tuple[str, str]
"""(namespace, Deployment name) of one placed server."""
Placed = Mapping[ServerKey, Mapping[str, str]]
"""Each placed server's adapters, in the placement's order: name -> a digest of its source (uri and digest)."""


@dataclass(frozen=True)
class Failure:
    """One adapter's loads that failed in a row on one pod."""

    tries: int
    error: str
    """The engine's last error, cut to ERROR_CHARS."""
    source: str
    """The adapter's source digest when it failed: another source starts the count afresh."""
    at: int
    """Epoch seconds of the last failed try."""


Failures = dict[str, Failure]
"""A pod's failing adapters, by name."""
Weights = Mapping[ServerKey, Mapping[str, tuple[str, str]]]
"""Each placed server's adapters: name -> (weights.uri, weights.digest), what its pods' fetchers are asked for."""
Held = Mapping[str, Mapping[str, str]]
"""Pod uid -> each placed adapter its server lists -> the source digest of that copy (held_copies)."""


@dataclass(frozen=True)
class Retry:
    """When a failing adapter counts as failed, and when it is tried again."""

    limit: int
    """Failed loads in a row that mark an adapter failed (--adapter-load-failures)."""
    cap_s: float
    """The longest wait between tries of a failed adapter (--adapter-load-backoff-max)."""
    now: float
    """Epoch seconds of this reconcile."""

    def failed(self, failure: Failure) -> bool:
        return failure.tries >= self.limit

    def wait_s(self, failure: Failure) -> float:
        """Seconds until the next try: LOAD_RETRY_S until failed, then doubling with each failed try, capped."""
        if not self.failed(failure):
            return LOAD_RETRY_S
        return min(LOAD_RETRY_S * 2.0 ** (failure.tries - self.limit + 1), max(self.cap_s, LOAD_RETRY_S))

    def due_in(self, failure: Failure) -> float:
        return failure.at + self.wait_s(failure) - self.now


def source_digest(uri: str, digest: str) -> str:
    return naming.digest([uri, digest])[:12]


def placed_weights(decided: list[PoolServers]) -> dict[ServerKey, dict[str, tuple[str, str]]]:
    """The adapters each placed server's pods must hold, by its Deployment, with their weights (uri, digest); an
    invalid pool's: its kept placement's (adapter_pool_decide.kept_placement), those its spec still names (the
    others' sources are unknown: not loaded, and not unloaded while their route, kept as it was, lists the pod)."""
    placed = {}
    for servers in decided:
        if servers.placement is None or servers.pool.spec is None:
            continue
        ref = servers.pool.ref
        sources = {a.name: (a.weights.uri, a.weights.digest) for a in servers.pool.spec.adapters}
        for server in servers.placement.servers:
            placed[(ref.namespace, deployment_name(ref, server.index))] = {name: sources[name] for name in server.adapters
                                                                          if name in sources}
    return placed


def placed_adapters(decided: list[PoolServers]) -> dict[ServerKey, dict[str, str]]:
    """placed_weights with each adapter's source digest."""
    return {key: {name: source_digest(*weights) for name, weights in adapters.items()}
            for key, adapters in placed_weights(decided).items()}


def recorded_failures(pod: Json) -> Failures:
    """The pod's failure record as the annotation holds it (an unreadable one counts as none)."""
    text = (pod["metadata"].get("annotations") or {}).get(FAILURES_ANNOTATION)
    try:
        return {name: Failure(int(f["tries"]), str(f["error"]), str(f["source"]), int(f["at"]))
                for name, f in json.loads(text).items()} if text else {}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def recorded_sources(pod: Json) -> dict[str, str]:
    """The pod's record of the sources its server's copies came from (an unreadable one counts as none)."""
    text = (pod["metadata"].get("annotations") or {}).get(SOURCES_ANNOTATION)
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(name): str(source) for name, source in found.items()} if isinstance(found, dict) else {}


def current_failures(pod: Json, wanted: Mapping[str, str]) -> Failures:
    """The recorded failures of adapters still placed on the pod's server from the same source."""
    return {name: f for name, f in recorded_failures(pod).items() if wanted.get(name) == f.source}


def failures_value(failures: Failures) -> str | None:
    return json.dumps({name: asdict(f) for name, f in failures.items()}, separators=(",", ":")) if failures else None


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


def decide_loads(pods: list[Json], placed: Placed, listed: Mapping[str, Listed], retry: Retry,
                 weights: Weights) -> list[LoadAdapter]:
    """A load for each placed adapter a running pod's server does not list (in the placement's order), but for
    failing adapters whose wait for the next try has not passed; each names the weights its pod's fetcher is asked
    for first."""
    loads = []
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None or seen.adapters is None:
            continue
        failures = current_failures(pod, wanted)
        recorded = recorded_sources(pod)
        for name in wanted:
            listed_now = name in seen.adapters
            if listed_now and recorded.get(name) == wanted[name]:
                continue
            failure = failures.get(name)
            if failure is None:
                reason = (f"pod {pod_name(pod)}'s server lists a copy of another or an unrecorded source"
                          if listed_now else f"placed on the server, not listed by pod {pod_name(pod)}")
            elif retry.due_in(failure) <= 0:  # tries LOAD_RETRY_S apart, not one per event-driven reconcile
                reason = f"pod {pod_name(pod)} failed to load it {failure.tries} time(s) in a row; trying again"
            else:
                continue
            uri, digest = weights[server_of(pod)][name]
            loads.append(LoadAdapter(seen.url, pod_name(pod), name, adapter_path(name), seen.fetch_url, uri, digest,
                                     reason=reason, replace=listed_now))
    return loads


def unplaced_listed(pods: list[Json], placed: Placed, listed: Mapping[str, Listed]) -> list[tuple[Json, Listed, str]]:
    """(pod, what its server lists, adapter) for each adapter a running pod's server lists that is not placed on
    its server, by name."""
    found = []
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None or seen.adapters is None:
            continue
        found += [(pod, seen, name) for name in sorted(seen.adapters - wanted.keys())]
    return found


def decide_unloads(pods: list[Json], placed: Placed, listed: Mapping[str, Listed],
                   routed: Set[tuple[str, str]]) -> list[UnloadAdapter]:
    """An unload for each adapter a pod's server lists but is not placed on its server, once no route lists the
    pod for it (`routed`: (pod uid, adapter) of each route's EndpointSlice as read; the reconcile that sees the
    move writes the route without the pod, so the unload comes in a later one)."""
    return [UnloadAdapter(seen.url, pod_name(pod), name, reason=f"pod {pod_name(pod)}'s server lists it, it is "
                          "not placed on that server, and its route no longer lists the pod")
            for pod, seen, name in unplaced_listed(pods, placed, listed) if (pod["metadata"]["uid"], name) not in routed]


def record_failures(pods: list[Json], placed: Placed, errors: Mapping[str, Mapping[str, str | None]],
                    listed: Mapping[str, Listed], retry: Retry) -> dict[str, Failures]:
    """Each pod's failures after this reconcile's loads (`errors`: pod name -> adapter -> the engine's error,
    None for a load that succeeded), by pod uid: a failed load counts one more, an adapter the server lists
    now is off the record, at most RECORDED_MOST of them (in the placement's order)."""
    records = {}
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None:
            continue
        failures = current_failures(pod, wanted)
        for name, error in errors.get(pod_name(pod), {}).items():
            if error is not None:
                tries = failures[name].tries + 1 if name in failures else 1
                failures[name] = Failure(tries, error[:ERROR_CHARS], wanted[name], int(retry.now))
        listing = seen.adapters if seen.adapters is not None else frozenset()
        kept = [name for name in wanted if name in failures and name not in listing]
        records[pod["metadata"]["uid"]] = {name: failures[name] for name in kept[:RECORDED_MOST]}
    return records


def held_copies(pods: list[Json], placed: Placed, listed: Mapping[str, Listed],
                errors: Mapping[str, Mapping[str, str | None]]) -> dict[str, dict[str, str]]:
    """Per pod uid, the source of each placed adapter's copy its server lists after this reconcile's loads: the
    placed source for a load that succeeded now, else the recorded one; a listed adapter of no recorded source is
    left out (it is loaded again). A server that does not answer keeps its record (of adapters still placed)."""
    held = {}
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None:
            continue
        recorded = recorded_sources(pod)
        loaded_now = {name for name, error in errors.get(pod_name(pod), {}).items() if error is None}
        listing = seen.adapters if seen.adapters is not None else frozenset(recorded)
        held[pod["metadata"]["uid"]] = {name: wanted[name] if name in loaded_now else recorded[name] for name in wanted
                                        if name in listing and (name in loaded_now or name in recorded)}
    return held


def holding(wanted: Mapping[str, str], copies: Mapping[str, str]) -> list[str]:
    """The placed adapters whose copy on the pod is of the placed source, in the placement's order."""
    return [name for name in wanted if copies.get(name) == wanted[name]]


def label_changes(pod: Json, wanted: Mapping[str, str], copies: Mapping[str, str]) -> dict[str, str | None]:
    """The pod's adapter labels to set, and those to remove (None), so that they name the adapters it holds (the
    first LABELLED_MOST)."""
    labels = {k: v for k, v in (pod["metadata"].get("labels") or {}).items() if k.startswith(HOLDS_PREFIX)}
    wanted_labels = {f"{HOLDS_PREFIX}{name}": wanted[name] for name in holding(wanted, copies)[:LABELLED_MOST]}
    changes: dict[str, str | None] = {k: v for k, v in wanted_labels.items() if labels.get(k) != v}
    return changes | {k: None for k in labels if k not in wanted_labels}


def sources_value(copies: Mapping[str, str]) -> str | None:
    return json.dumps(dict(copies), separators=(",", ":")) if copies else None


def examples(names: list[str]) -> str:
    return ", ".join(names[:MISSING_EXAMPLES]) + (", ..." if len(names) > MISSING_EXAMPLES else "")


def failed_names(wanted: Mapping[str, str], seen: Listed, failures: Failures, retry: Retry) -> list[str]:
    """The placed adapters failed on the pod that its server does not list."""
    listing = seen.adapters if seen.adapters is not None else frozenset()
    return [name for name in wanted if name in failures and retry.failed(failures[name]) and name not in listing]


def readiness(wanted: Mapping[str, str], seen: Listed, failed: list[str]) -> tuple[bool, str, str]:
    """(loaded, reason, message) of the readiness gate, from what the server lists; `failed` adapters are not
    waited for."""
    if seen.adapters is None:
        return False, NOT_ANSWERING, f"the server does not answer GET /v1/models: {seen.error}"
    missing = [name for name in wanted if name not in seen.adapters and name not in failed]
    if missing:
        return False, MISSING, (f"{len(missing)} of {len(wanted)} placed adapters not listed by the server: "
                                f"{examples(missing)}")
    if failed:
        return True, SOME_FAILED, (f"the server lists {len(wanted) - len(failed)} of the {len(wanted)} adapters "
                                   f"placed on it; {len(failed)} failed to load and are retried with back-off: "
                                   f"{examples(failed)}")
    return True, LOADED, f"the server lists all {len(wanted)} adapters placed on it"


def loaded_value(names: list[str]) -> str:
    """The annotation: how many placed adapters the server lists, and a digest of their sorted names."""
    return f"{len(names)}:{naming.digest(sorted(names))[:16]}"


def gate_condition(pod: Json) -> Json | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == READINESS_GATE), None)


def decide_readiness(pods: list[Json], placed: Placed, listed: Mapping[str, Listed], now: str,
                     records: Mapping[str, Failures], retry: Retry, held: Held) -> list[PatchPodStatus]:
    """Each running server pod's readiness gate, annotations and adapter labels, in one patch where they differ
    from what its server lists, its failures' record (`records`, by pod uid) and the copies it holds (`held`)."""
    patches = []
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None:
            continue
        patch: Json = {}
        failures = records.get(pod["metadata"]["uid"], {})
        loaded, reason, message = readiness(wanted, seen, failed_names(wanted, seen, failures, retry))
        status = "True" if loaded else "False"
        current = gate_condition(pod) or {}
        if (current.get("status"), current.get("reason"), current.get("message")) != (status, reason, message):
            since = current.get("lastTransitionTime") if current.get("status") == status else now
            patch["status"] = {"conditions": [{"type": READINESS_GATE, "status": status, "reason": reason,
                                               "message": message, "lastTransitionTime": since or now}]}
        annotations = pod["metadata"].get("annotations") or {}
        changed: dict[str, str | None] = {}
        if seen.adapters is not None:
            value = loaded_value([name for name in wanted if name in seen.adapters])
            if annotations.get(LOADED_ANNOTATION) != value:
                changed[LOADED_ANNOTATION] = value
        if annotations.get(FAILURES_ANNOTATION) != failures_value(failures):
            changed[FAILURES_ANNOTATION] = failures_value(failures)  # None removes it (a merge patch)
        copies = held.get(pod["metadata"]["uid"], {})
        if annotations.get(SOURCES_ANNOTATION) != sources_value(copies):
            changed[SOURCES_ANNOTATION] = sources_value(copies)
        if changed:
            patch["metadata"] = {"annotations": changed}
        labels = label_changes(pod, wanted, copies)
        if labels:
            patch.setdefault("metadata", {})["labels"] = labels
        if patch:
            patches.append(PatchPodStatus(pod["metadata"]["namespace"], pod["metadata"]["name"], patch,
                                          reason=f"pod {pod_name(pod)}: {reason}"))
    return patches


def loading_requeue(pods: list[Json], placed: Placed, listed: Mapping[str, Listed], records: Mapping[str, Failures],
                    retry: Retry) -> float | None:
    """LOAD_RETRY_S while a running server pod does not list all its adapters but failed ones (a load failed, or it
    is not up); else the seconds until the next try of a failed adapter; None: nothing to wait for."""
    waits = []
    for pod in pods:
        uid = pod["metadata"]["uid"]
        if uid not in listed or server_of(pod) not in placed:
            continue
        wanted, seen, failures = placed[server_of(pod)], listed[uid], records.get(uid, {})
        failed = failed_names(wanted, seen, failures, retry)
        if not readiness(wanted, seen, failed)[0]:
            waits.append(LOAD_RETRY_S)
        waits.extend(max(retry.due_in(failures[name]), 1.0) for name in failed)
    return min(waits, default=None)


def server_loads(pods: list[Json], placed: Placed, listed: Mapping[str, Listed], records: Mapping[str, Failures],
                 retry: Retry) -> dict[ServerKey, ServerLoad]:
    """Per placed server with an answering pod: the placed adapters every such pod lists, and the failed ones on
    any of them with the engine's error (for the pool's status)."""
    loads: dict[ServerKey, ServerLoad] = {}
    for pod in pods:
        seen = listed.get(pod["metadata"]["uid"])
        wanted = placed.get(server_of(pod))
        if wanted is None or seen is None or seen.adapters is None:
            continue
        failures = records.get(pod["metadata"]["uid"], {})
        loaded = sum(1 for name in wanted if name in seen.adapters)
        failed = {name: failures[name].error for name in failed_names(wanted, seen, failures, retry)}
        before = loads.get(server_of(pod))
        if before is not None:
            loaded, failed = min(loaded, before.loaded), {**before.failed, **failed}
        loads[server_of(pod)] = ServerLoad(loaded, failed)
    return loads
