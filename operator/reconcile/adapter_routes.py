"""Decide, for AdapterPools: a stable route per adapter (issue 30 item 3).

Pure, like adapter_loading.py: the pools as decided, their server pods as
read, the copies each pod's server holds after this reconcile's loads
(adapter_loading.held_copies) and the Services and EndpointSlices there are;
plain actions out. The rules (docs/adapter-routes.md):

- Every adapter of a valid pool has a Service without a selector, named
  `<pool>-<adapter>` (route_name), that clients reach as
  `<name>.<namespace>.svc`; the model they ask for is the adapter's name.
- Its one EndpointSlice, labelled `endpointslice.kubernetes.io/managed-by:
  adapter-routes.tessera.ai` so Kubernetes' EndpointSlice controllers leave
  it alone, lists exactly the Ready pods whose server holds the adapter:
  placed on its server, listed by it, from the placed source (a copy of
  another source leaves the route until it is loaded again). An adapter no
  pod holds has an empty slice: its name resolves, nothing answers.
- A name taken in the namespace by another Service (another pool's route,
  or a Service that is not tessera's) makes the newcomer take the hashed
  form; a route keeps the name its Service has, so names never move.
- The pool's status gives the pattern of its routes' names and the few routes
  named otherwise (route_summaries); a route whose both names are taken gets
  none, and the status counts and names it (Degraded RouteNameTaken).
- Routes of adapters no longer in the spec go; an invalid pool's stay as
  they are (what its servers hold is not decided).
- Where the cluster serves `inference.networking.k8s.io/v1` (API discovery),
  a pool with `spec.endpointPickerRef` also gets one InferencePool selecting
  all its servers' pods, for a Gateway and the user's endpoint picker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tessera.operator import naming
from tessera.operator.api.adapter_pools import PoolRef
from tessera.operator.api.v1alpha1 import RouteException, RouteNames
from tessera.operator.reconcile.actions import Action, ApplyChild, DeleteChild, Json
from tessera.operator.reconcile.adapter_loading import Held, Placed, holding, server_of
from tessera.operator.reconcile.adapter_pool_decide import SERVER_COMPONENT, PoolServers, owned_by
from tessera.operator.reconcile.builders import applied_hash, with_applied_hash
from tessera.planner.adapter_pool import EndpointPickerRef

ROUTE_COMPONENT = "adapter-route"
ADAPTER_LABEL = f"{naming.GROUP}/adapter"
"""On a route's Service and EndpointSlice: the adapter's name (a DNS-1035 label, so a label value as it is)."""
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGER_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER = f"adapter-routes.{naming.GROUP}"
"""Not `endpointslice-controller.k8s.io`: the EndpointSlice controllers leave slices of other managers alone."""
ENDPOINTS_MOST = 1000
"""The API server's limit of endpoints per EndpointSlice; a route lists at most this many pods (by name)."""
HASH_CHARS = 8
EXCEPTIONS_LISTED, UNROUTED_LISTED = 32, 16
"""Routes of other names, and adapters without a route, a pool's status lists (each counted in full)."""

RouteKey = tuple[str, str, str]
"""(namespace, pool, adapter) of one route."""


@dataclass(frozen=True)
class Route:
    key: RouteKey
    name: str
    ref: PoolRef


def readable_name(pool: str, adapter: str) -> str:
    """`<pool>-<adapter>` where it fits a DNS-1035 label (both are one), else hashed_name."""
    name = f"{pool}-{adapter}"
    return name if len(name) <= naming.MAX_NAME else hashed_name(pool, adapter)


def hashed_name(pool: str, adapter: str) -> str:
    """A readable head of `<pool>-<adapter>` and a hash of the pair (so `a-b`/`c` and `a`/`b-c` differ)."""
    head = f"{pool}-{adapter}"[: naming.MAX_NAME - HASH_CHARS - 1].rstrip("-")
    return f"{head}-{naming.digest([pool, adapter])[:HASH_CHARS]}"


def route_key(service: Json) -> RouteKey | None:
    """The route a Service is (tessera's labels), None for any other Service."""
    labels = service["metadata"].get("labels") or {}
    if labels.get(naming.CHILD_KIND_LABEL) != ROUTE_COMPONENT or labels.get(naming.MANAGED_BY) != naming.MANAGED_BY_VALUE:
        return None
    pool, adapter = labels.get(naming.POOL_LABEL), labels.get(ADAPTER_LABEL)
    return (service["metadata"]["namespace"], pool, adapter) if pool and adapter else None


def route_names(wanted: Iterable[tuple[RouteKey, PoolRef]], services: Iterable[Json]) -> list[Route]:
    """A name for each wanted route: the one its Service has; else the readable name unless another Service or
    route of the namespace has it, then the hashed one (a route whose both names are taken gets none)."""
    taken: dict[tuple[str, str], RouteKey | None] = {}
    existing: dict[RouteKey, str] = {}
    for service in sorted(services, key=lambda s: s["metadata"]["name"]):
        key = route_key(service)
        taken[(service["metadata"]["namespace"], service["metadata"]["name"])] = key
        if key is not None:
            existing.setdefault(key, service["metadata"]["name"])
    routes, pending = [], []
    for key, ref in sorted(wanted, key=lambda w: w[0]):
        if key in existing:
            routes.append(Route(key, existing[key], ref))
        else:
            pending.append((key, ref))
    for key, ref in pending:
        namespace, pool, adapter = key
        for name in dict.fromkeys([readable_name(pool, adapter), hashed_name(pool, adapter)]):
            if taken.get((namespace, name), key) == key:
                taken[(namespace, name)] = key
                routes.append(Route(key, name, ref))
                break
    return routes


def route_labels(key: RouteKey) -> dict[str, str]:
    return {**naming.pool_child_labels(key[1], ROUTE_COMPONENT), ADAPTER_LABEL: key[2]}


def route_service(route: Route, port: int) -> Json:
    """The adapter's Service: a cluster IP and port, no selector (its EndpointSlice is tessera's)."""
    return with_applied_hash({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": route.name, "namespace": route.key[0], "labels": route_labels(route.key),
                     "ownerReferences": [route.ref.owner_reference()]},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]},
    })


def endpoint(pod: Json) -> Json:
    metadata = pod["metadata"]
    found = {"addresses": [pod["status"]["podIP"]], "conditions": {"ready": True, "serving": True, "terminating": False},
             "targetRef": {"kind": "Pod", "namespace": metadata["namespace"], "name": metadata["name"],
                           "uid": metadata["uid"]}}
    node = (pod.get("spec") or {}).get("nodeName")
    return {**found, "nodeName": node} if node else found


def route_slice(route: Route, pods: list[Json], port: int) -> Json:
    """The route's EndpointSlice: the pods given (at most ENDPOINTS_MOST, by name), on the server port."""
    chosen = sorted(pods, key=lambda p: p["metadata"]["name"])[:ENDPOINTS_MOST]
    ipv6 = any(":" in p["status"]["podIP"] for p in chosen)
    labels = {**route_labels(route.key), SERVICE_NAME_LABEL: route.name, SLICE_MANAGER_LABEL: SLICE_MANAGER}
    return with_applied_hash({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": route.name, "namespace": route.key[0], "labels": labels,
                     "ownerReferences": [route.ref.owner_reference()]},
        "addressType": "IPv6" if ipv6 else "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [endpoint(p) for p in chosen],
    })


def is_ready(pod: Json) -> bool:
    """Ready as the kubelet says (its readiness gate included), with an IP, not being deleted."""
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ready and bool(status.get("podIP")) and not pod["metadata"].get("deletionTimestamp")


def holders(pods: Iterable[Json], placed: Placed, held: Held) -> dict[tuple[str, str], list[Json]]:
    """(namespace, adapter) -> the Ready pods whose server holds a copy of its placed source."""
    found: dict[tuple[str, str], list[Json]] = {}
    for pod in pods:
        wanted = placed.get(server_of(pod))
        if wanted is None or not is_ready(pod):
            continue
        for name in holding(wanted, held.get(pod["metadata"]["uid"], {})):
            found.setdefault((pod["metadata"]["namespace"], name), []).append(pod)
    return found


def routed_pods(slices: Iterable[Json]) -> set[tuple[str, str]]:
    """(pod uid, adapter) for each pod a route's EndpointSlice lists, as read: where an unload must wait."""
    return {(endpoint["targetRef"]["uid"], (s["metadata"].get("labels") or {})[ADAPTER_LABEL])
            for s in slices if is_route(s) and ADAPTER_LABEL in (s["metadata"].get("labels") or {})
            for endpoint in s.get("endpoints") or [] if (endpoint.get("targetRef") or {}).get("uid")}


def pool_pods(pods: Iterable[Json], ref: PoolRef) -> list[Json]:
    return [p for p in pods if p["metadata"]["namespace"] == ref.namespace
            and (p["metadata"].get("labels") or {}).get(naming.POOL_LABEL) == naming.label_value(ref.name)]


def is_route(child: Json) -> bool:
    return (child["metadata"].get("labels") or {}).get(naming.CHILD_KIND_LABEL) == ROUTE_COMPONENT


def valid_pools(decided: list[PoolServers]) -> list[PoolServers]:
    return [d for d in decided if d.pool.valid and d.pool.spec is not None]


def wanted_routes(valid: list[PoolServers]) -> list[tuple[RouteKey, PoolRef]]:
    """A route for each adapter of each pool given."""
    return [((d.pool.ref.namespace, d.pool.ref.name, a.name), d.pool.ref) for d in valid
            for a in (d.pool.spec.adapters if d.pool.spec else [])]


def route_pattern(pool: str) -> str:
    return f"{pool}-{{adapter}}"


def route_summaries(decided: list[PoolServers], services: list[Json]) -> dict[tuple[str, str], RouteNames]:
    """Per valid pool ((namespace, name)): the pattern of its routes' names, the routes named otherwise (a few, and
    how many) and the adapters that got no route, as decide_routes names them from the same Services."""
    valid = valid_pools(decided)
    wanted = wanted_routes(valid)
    named = {route.key: route.name for route in route_names(wanted, services)}
    summaries = {}
    for servers in valid:
        ref = servers.pool.ref
        keys = [key for key, owner in wanted if owner == ref]
        exceptions = [RouteException(adapter=k[2], service=named[k]) for k in keys
                      if k in named and named[k] != route_pattern(ref.name).format(adapter=k[2])]
        unrouted = [k[2] for k in keys if k not in named]
        summaries[(ref.namespace, ref.name)] = RouteNames(
            pattern=route_pattern(ref.name), exceptions=exceptions[:EXCEPTIONS_LISTED], exceptions_count=len(exceptions),
            unrouted=len(unrouted), unrouted_examples=unrouted[:UNROUTED_LISTED])
    return summaries


def decide_routes(decided: list[PoolServers], pods: list[Json], placed: Placed, held: Held, services: list[Json],
                  slices: list[Json], port: int) -> list[Action]:
    """Each valid pool's routes: a Service and EndpointSlice per adapter applied where they differ, then the
    routes (and slices) its adapters no longer have deleted."""
    valid = valid_pools(decided)
    routes = route_names(wanted_routes(valid), services)
    by_name = {(c["kind"], c["metadata"]["namespace"], c["metadata"]["name"]): c for c in [*services, *slices]}
    actions: list[Action] = []
    for servers in valid:
        ref = servers.pool.ref
        held_by = holders(pool_pods(pods, ref), placed, held)
        for route in (r for r in routes if r.ref == ref):
            service = route_service(route, port)
            endpoints = route_slice(route, held_by.get((ref.namespace, route.key[2]), []), port)
            for body in (service, endpoints):
                current = by_name.get((body["kind"], ref.namespace, route.name))
                if current is None or applied_hash(current) != applied_hash(body):
                    actions.append(ApplyChild(body, reason=f"the route of adapter {route.key[2]} "
                                                           f"{'is not there yet' if current is None else 'differs'}"))
        kept = {r.name for r in routes if r.ref == ref}
        for child in owned_by([*services, *slices], ref):
            if is_route(child) and child["metadata"]["name"] not in kept:
                actions.append(DeleteChild(child, reason="no adapter of the pool has this route"))
    return actions


# -- the pool's InferencePool (Gateway API Inference Extension) ------------------------

INFERENCE_GROUP, INFERENCE_VERSION, INFERENCE_POOLS = "inference.networking.k8s.io", "v1", "inferencepools"
INFERENCE_POOL_COMPONENT = "inference-pool"


def inference_pool(ref: PoolRef, picker: EndpointPickerRef, port: int) -> Json:
    """The pool's InferencePool: every server pod of the pool (the servers' own selector labels), on the server
    port, its endpoint picker the user's."""
    selector = {naming.MANAGED_BY: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: naming.label_value(ref.name),
                naming.CHILD_KIND_LABEL: SERVER_COMPONENT}
    return with_applied_hash({
        "apiVersion": f"{INFERENCE_GROUP}/{INFERENCE_VERSION}", "kind": "InferencePool",
        "metadata": {"name": ref.name, "namespace": ref.namespace,
                     "labels": naming.pool_child_labels(ref.name, INFERENCE_POOL_COMPONENT),
                     "ownerReferences": [ref.owner_reference()]},
        "spec": {"selector": {"matchLabels": selector}, "targetPorts": [{"number": port}],
                 "endpointPickerRef": {"kind": "Service", "name": picker.name, "port": {"number": picker.port.number},
                                       "failureMode": picker.failure_mode}},
    })


def decide_inference_pools(decided: list[PoolServers], served: bool, live: list[Json], port: int) -> list[Action]:
    """Where the cluster serves InferencePools: one per valid pool with an endpoint picker, applied where it differs;
    deleted once the pool names none. Nowhere else anything (the kind does not exist there)."""
    if not served:
        return []
    actions: list[Action] = []
    for servers in decided:
        spec, ref = servers.pool.spec, servers.pool.ref
        if not servers.pool.valid or spec is None:
            continue
        current = next((c for c in owned_by(live, ref) if c["metadata"]["name"] == ref.name), None)
        if spec.endpoint_picker is None:
            if current is not None:
                actions.append(DeleteChild(current, reason="the pool names no endpoint picker any more"))
            continue
        body = inference_pool(ref, spec.endpoint_picker, port)
        if current is None or applied_hash(current) != applied_hash(body):
            actions.append(ApplyChild(body, reason="the pool's InferencePool "
                                                   f"{'is not there yet' if current is None else 'differs'}"))
    return actions
