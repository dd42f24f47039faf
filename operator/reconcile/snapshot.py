"""Observe: what one reconcile reads of the cluster, as one immutable value, before anything is decided.

The systems (with the demand hysteresis decided from Prometheus), the
AdapterPools, their server pods and their namespaces' Services, route EndpointSlices and InferencePools, the GPU pools from the nodes' labels (less the nodes a persisting mig-manager
`failed` leaves out, mig_failures.py), tessera's children, the mig-parted ConfigMap
and the configs any node names, each pool's stored plan, and what the preflight
checks (operator/preflight.py). Two reads stay
with their decision, because what they read depends on it: the solver's
outcome (the reconciler runs the solve), and the GPU pods of the nodes a plan
would re-partition (`decide.nodes_to_relabel`). Profiling reads its own
Jobs and results (profiling/in_cluster.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from tessera.operator import naming, preflight
from tessera.operator.api.adapter_pools import PLURAL as ADAPTER_POOLS, AdapterPoolObject, read_adapter_pool
from tessera.operator.api.systems import SystemObject, read_system
from tessera.operator.cluster import Cluster
from tessera.operator.demand.planning import DemandPlanner
from tessera.operator.gpus.discovery import NodeFacts, Pool, group_pools, node_facts
from tessera.operator.gpus.planner_input import MigConfigs, mig_configs
from tessera.operator.reconcile import builders, mig_failures
from tessera.operator.reconcile.pool_access import Admitted
from tessera.operator.reconcile.actions import Json
from tessera.operator.reconcile.adapter_pool_decide import SERVER_COMPONENT
from tessera.operator.reconcile.adapter_routes import (INFERENCE_GROUP, INFERENCE_POOLS, INFERENCE_VERSION,
                                                      SLICE_MANAGER, SLICE_MANAGER_LABEL)
from tessera.operator.settings import OperatorSettings

ADAPTER_SERVER_PODS = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE},{naming.CHILD_KIND_LABEL}={SERVER_COMPONENT}"
ROUTE_SLICES = f"{SLICE_MANAGER_LABEL}={SLICE_MANAGER}"
TESSERAS = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"


@dataclass(frozen=True)
class Snapshot:
    systems: tuple[SystemObject, ...]
    pools: tuple[Pool, ...]
    children: tuple[Json, ...]
    mig_configmap: str
    """The name of the mig-parted ConfigMap tessera writes (the ClusterPolicy's, or --mig-configmap)."""
    configmap: Json | None
    configs_in_use: frozenset[str]
    """The MIG configs any node of the cluster names (also nodes outside tessera's selector)."""
    pool_states: Mapping[str, Mapping[str, str]]
    """Pool key -> its stored plan ConfigMap's data (empty: none stored)."""
    pool_annotations: Mapping[str, Mapping[str, str]]
    """Pool key -> the annotations of that ConfigMap (a pause: reconcile/pause.py)."""
    prerequisites: preflight.Seen
    """What the preflight checks: the GPU Operator's namespace and ClusterPolicy, the watched namespaces, the CRDs."""
    pool_nodes: tuple[NodeFacts, ...] = ()
    """Every node a pool would have, also those left out of it after a mig-manager `failed` (their records)."""
    cordoned_up: tuple[NodeFacts, ...] = ()
    """The GPU nodes an admin cordoned while they are up: out of every pool, their pods run on (NodeFacts.cordoned_up)."""
    at: float = 0.0
    """When it was read (Unix seconds): the clock of the MIG failure back-off."""
    adapter_pools: tuple[AdapterPoolObject, ...] = ()
    pool_access: Mapping[str, Admitted] = field(default_factory=dict)
    """Pool key -> the namespaces its --pool-namespaces rule admits (pools without a rule are absent)."""
    resource_quotas: tuple[Json, ...] = ()
    """The watched namespaces' ResourceQuotas (reconcile/quotas.py reads those on MIG instances)."""
    adapter_server_pods: tuple[Json, ...] = ()
    """The pods of the AdapterPools' server Deployments (their servers are asked what they list: adapter_pools.py)."""
    route_services: tuple[Json, ...] = ()
    """Every Service of the AdapterPools' namespaces (an adapter's route takes no name another has: adapter_routes.py)."""
    route_slices: tuple[Json, ...] = ()
    """The EndpointSlices of the adapters' routes (tessera's manager label) in those namespaces."""
    inference_pools_served: bool = False
    """Whether the cluster serves inference.networking.k8s.io/v1 (the Gateway API Inference Extension's CRDs)."""
    inference_pools: tuple[Json, ...] = ()
    """tessera's InferencePools in the AdapterPools' namespaces (where served)."""

    @property
    def mig_configs(self) -> MigConfigs:
        """Every known config: NVIDIA's defaults (all-disabled: a fresh node) mean the same in every mig-parted
        file, even one not written yet, then the ConfigMap's."""
        text = ((self.configmap or {}).get("data") or {}).get(builders.MIG_PARTED_KEY)
        return {**builders.NVIDIA_DEFAULT_CONFIGS, **mig_configs(text)}


def observe(cluster: Cluster, settings: OperatorSettings, demand: DemandPlanner) -> Snapshot:
    systems = [read_system(obj) for obj in cluster.list_systems()]
    at = time.time()
    facts = [f for f in (node_facts(n, naming.MIG_CONFIG_REQUESTED, at, settings.node_not_ready_grace_s)
                         for n in cluster.list_nodes()) if f]
    candidates, _unknown = group_pools(facts)
    pool_nodes = tuple(node for pool in candidates for node in pool.nodes)
    pools, _unknown = group_pools([f for f in facts if not mig_failures.left_out(f, at, settings.mig_failure_backoff_s)])
    children = cluster.list_children()
    systems = demand.apply(systems, children)
    policy = cluster.read_cluster_policy()
    mig_configmap = cluster.mig_configmap_name(policy)
    adapter_pools = tuple(read_adapter_pool(obj) for obj in cluster.list_systems(ADAPTER_POOLS))
    route_namespaces = sorted({p.ref.namespace for p in adapter_pools})
    served = bool(adapter_pools) and cluster.serves(f"{INFERENCE_GROUP}/{INFERENCE_VERSION}")
    pool_objects = {pool.key: cluster.read_pool_configmap(pool.key) or {} for pool in pools}
    return Snapshot(
        systems=tuple(systems), pools=tuple(pools), children=tuple(children), mig_configmap=mig_configmap,
        configmap=cluster.read_configmap(settings.gpu_operator_namespace, mig_configmap),
        configs_in_use=frozenset(cluster.mig_configs_in_use()),
        pool_states={key: found.get("data") or {} for key, found in pool_objects.items()},
        pool_annotations={key: (found.get("metadata") or {}).get("annotations") or {}
                          for key, found in pool_objects.items()},
        prerequisites=cluster.read_prerequisites(policy, list(preflight.expected_crds())),
        pool_nodes=pool_nodes, cordoned_up=tuple(f for f in facts if f.cordoned_up), at=at,
        pool_access=read_pool_access(cluster, settings.pool_namespaces),
        resource_quotas=tuple(cluster.list_resource_quotas()),
        adapter_pools=adapter_pools, adapter_server_pods=tuple(cluster.list_labelled_pods(ADAPTER_SERVER_PODS)),
        route_services=route_services(children, [s for ns in route_namespaces for s in cluster.list_others_services(ns)],
                                      route_namespaces),
        route_slices=tuple(s for ns in route_namespaces for s in cluster.list_endpoint_slices(ns, ROUTE_SLICES)),
        inference_pools_served=served, inference_pools=tuple(
            {**p, "kind": "InferencePool"} for ns in route_namespaces if served
            for p in cluster.list_custom_objects(INFERENCE_GROUP, INFERENCE_VERSION, INFERENCE_POOLS, ns, TESSERAS)))


def route_services(children: list[Json], others: list[Json], namespaces: list[str]) -> tuple[Json, ...]:
    """Every Service of the AdapterPools' namespaces: tessera's from its children, as listed once for both, and the
    others' (listed without tessera's). Listing every Service again cost a 2,000-adapter pool's idle resync a second
    list and parse of its 2,000 routes."""
    wanted = set(namespaces)
    return tuple([*(c for c in children if c["kind"] == "Service" and c["metadata"]["namespace"] in wanted), *others])


def read_pool_access(cluster: Cluster, rules: Mapping[str, str]) -> Mapping[str, Admitted]:
    out = {}
    for pool_key, selector in rules.items():
        matched = cluster.namespaces_matching(selector)
        out[pool_key] = (Admitted(selector, error=matched) if isinstance(matched, str)
                         else Admitted(selector, namespaces=matched))
    return out
