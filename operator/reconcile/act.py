"""Applies decided actions to the cluster, one at a time, in the order given.

The order of a reconcile (docs/operator.md, "The order of writes"): the
records of mig-manager failures, the pool's plan, the mig-parted ConfigMap, node relabels and the cordons and
scale-downs of serving nodes being re-partitioned (serving_nodes.py), Services, then
ConfigMaps (a frontend's config) and Deployments (only onto nodes whose layout is applied or, on a node that serves nothing, being applied or about to be: decide.starts_before_layout), stale children,
then each system's status and its Events; after an AdapterPool's servers, the loads of adapters its pods'
servers do not list, then those pods' readiness gates and annotations. Every action is idempotent (apply
is server-side apply, a delete tolerates a child already gone, a status
patch writes the same status again), and every reconcile decides afresh
from what it reads, so a process stopped between any two actions resumes
on its next start. The kill points for tests (operator/testhooks.py) sit
here, between actions; `mid-solve` and `after-solve` stay in the reconciler,
where the solve is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tessera.operator import metrics, naming
from tessera.operator.cluster import Cluster
from tessera.operator.reconcile.actions import (Action, ApplyChild, CordonNode, DeleteChild, DeletePlan, LabelNode,
                                                LoadAdapter, PatchPodStatus, PatchStatus, PostEvent, RecordMigFailure,
                                                ScaleDeployment, ScaleToZero, StorePlan, UncordonNode, UnloadAdapter,
                                                WriteMigConfigs)
from tessera.operator.testhooks import checkpoint
from tessera.operator.fetcher import WAIT_S as FETCH_WAIT_S
from tessera.operator.fetcher import FetcherClient, StillFetching
from tessera.operator.vllm import ServerError, VllmClient

log = logging.getLogger("tessera.operator")


class Actor:
    def __init__(self, cluster: Cluster, servers: VllmClient, fetcher: FetcherClient) -> None:
        self.cluster = cluster
        self.servers = servers
        self.fetcher = fetcher

    def apply(self, actions: Sequence[Action]) -> None:
        refused: set[str] = set()  # nodes whose cordon the API server refused: their Deployments keep serving
        for action in actions:
            if isinstance(action, CordonNode):
                if not self.cordon(action):
                    refused.add(action.node)
            elif isinstance(action, ScaleToZero) and action.node in refused:
                log.info("deployment %s/%s keeps serving: node %s was not cordoned", action.namespace, action.name,
                         action.node)
            else:
                self.apply_one(action)

    def cordon(self, action: CordonNode) -> bool:
        """False, nothing written, when the node was cordoned since tessera read it: an admin's cordon, not claimed."""
        if self.cluster.patch_node_guarded(action.node, action.ops):
            log.info("node %s: %s", action.node, action.reason)
            checkpoint("after-cordon")
            return True
        log.info("node %s: cordoned by someone else since tessera read it: left the admin's, not re-partitioned",
                 action.node)
        return False

    def apply_one(self, action: Action) -> None:
        log.debug("%s: %s", type(action).__name__, action.reason)
        if isinstance(action, StorePlan):
            self.cluster.write_pool_state(action.pool, action.data)
            metrics.PLANS_STORED.labels(action.pool).inc()
            checkpoint("after-plan-stored")
        elif isinstance(action, DeletePlan):
            self.cluster.delete_pool_state(action.pool)
        elif isinstance(action, WriteMigConfigs):
            self.cluster.write_configmap(action.namespace, action.name, action.data, action.stamps,
                                         exists=action.exists)
            checkpoint("after-mig-configmap")
        elif isinstance(action, LabelNode):
            self.cluster.patch_node(action.node, action.patch)
            log.info("node %s: asked mig-manager for MIG config %s", action.node, action.config)
            checkpoint("after-node-relabel")
        elif isinstance(action, UncordonNode):
            if self.cluster.patch_node_guarded(action.node, action.ops):
                log.info("node %s: %s", action.node, action.reason)
                checkpoint("after-uncordon")
            else:
                log.info("node %s: its cordon is no longer tessera's as read (an admin removed or changed "
                         "tessera's record since): left cordoned", action.node)
        elif isinstance(action, ScaleToZero):
            self.cluster.scale_to_zero(action.namespace, action.name)
            log.info("deployment %s/%s scaled to zero: %s", action.namespace, action.name, action.reason)
            checkpoint("after-scale-to-zero")
        elif isinstance(action, ScaleDeployment):
            self.cluster.scale(action.namespace, action.name, action.replicas)
            log.info("deployment %s/%s scaled to %d: %s", action.namespace, action.name, action.replicas,
                     action.reason)
        elif isinstance(action, RecordMigFailure):
            self.cluster.patch_node(action.node, {"metadata": {"annotations": {naming.MIG_FAILURE: action.record}}})
            log.info("node %s: %s", action.node, action.reason)
        elif isinstance(action, ApplyChild):
            if action.kind == "Deployment":
                checkpoint("after-mig-success")  # the node's layout is applied or being applied; nothing of it serves yet
            self.cluster.apply(action.body)
            checkpoint(f"after-{action.kind.lower()}")
        elif isinstance(action, DeleteChild):
            self.cluster.delete_child(action.child)
            checkpoint("after-stale-delete")
        elif isinstance(action, PatchStatus):
            self.cluster.patch_system_status(action.namespace, action.name, action.status, action.plural)
            checkpoint("after-status")
        elif isinstance(action, PostEvent):
            self.cluster.post_event(action.body)
            checkpoint("after-event")
        elif isinstance(action, LoadAdapter):
            self.load(action, FETCH_WAIT_S)
        elif isinstance(action, UnloadAdapter):
            self.unload(action)
        elif isinstance(action, PatchPodStatus):
            self.cluster.patch_pod_status(action.namespace, action.name, action.patch)

    def load(self, action: LoadAdapter, fetch_wait_s: float) -> ServerError | None:
        """One load, once the pod's fetcher holds the adapter's files, checked (waiting up to `fetch_wait_s` for a
        running fetch); why it failed (the failures recorded after the loads count a refusal, and a failed fetch;
        StillFetching: not yet), else None."""
        log.debug("LoadAdapter: %s", action.reason)
        try:
            self.fetcher.fetch(action.fetch_url, action.adapter, action.uri, action.digest, fetch_wait_s)
            if action.replace:
                self.servers.unload_adapter(action.url, action.adapter)
            self.servers.load_adapter(action.url, action.adapter, action.path)
        except StillFetching as error:
            log.debug("pod %s: adapter %s not loaded yet: %s", action.pod, action.adapter, error)
            return error
        except ServerError as error:
            log.warning("pod %s: adapter %s not loaded: %s", action.pod, action.adapter, error)
            return error
        return None

    def unload(self, action: UnloadAdapter) -> ServerError | None:
        """One unload; why it failed (the adapter stays listed, so the next reconcile decides it again), else None."""
        log.debug("UnloadAdapter: %s", action.reason)
        try:
            self.servers.unload_adapter(action.url, action.adapter)
        except ServerError as error:
            log.warning("pod %s: adapter %s not unloaded: %s", action.pod, action.adapter, error)
            return error
        log.info("pod %s: adapter %s unloaded: %s", action.pod, action.adapter, action.reason)
        return None
