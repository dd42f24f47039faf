"""Nodes that come and go (issue 28 item 4) on the test cluster: one re-plan each, nothing stranded, an admin's
cordon never lifted.

Re-plans are counted from what the operator exposes: `tessera_plans_stored_total` on its /metrics, one per
plan it stores for a pool (a changed input). After each change the count is read again once the operator has
reconciled three more times (`tessera_reconciles_total`), so a second re-plan for the same change would show.

Nothing stranded is read from the Deployments: none is left pinned to a node that left, and the system's
servers are available on the nodes that remain, which KWOK makes so only for pods the scheduler bound to a node
that exists and allocates the MIG instances they request (the mig-manager stand-in applied their layout).

KWOK keeps the nodes it manages Ready (their Leases), so a node it manages cannot be made NotReady by a test.
The NotReady node here is one KWOK does not manage (no KWOK annotation): the test's kubelet stand-in keeps it
Ready until it posts Ready False, as a kubelet whose container runtime went down does, and stops its heartbeats;
the node controller only ever moves a silent node on to Unknown. The test reads the node at its end and fails
if it was Ready again.
"""

from __future__ import annotations

from kubernetes import client

from cluster.gpu_nodes import create_gpu_nodes
from cluster.kube import wait_for, wait_node_ready
from cluster.kubelet_standin import KubeletStandIn

from tessera.operator import naming
from tessera.operator.cluster import Cluster
from tessera.operator.reconcile import builders
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.actions import CordonNode, ScaleToZero, UncordonNode
from tessera.operator.settings import OperatorSettings
from tessera.operator.fetcher import FetcherClient
from tessera.operator.vllm import VllmClient

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import (H100, MANAGED, POOL_LABEL, OperatorProcess, pinned_node, systems, system_yaml,
                               wait_ready)

READY_TIMEOUT_S = 120
PLANS = "tessera_plans_stored_total"
GRACE_S = 4.0


def servers(api_client: client.ApiClient, namespace: str) -> list[client.V1Deployment]:
    return [d for d in client.AppsV1Api(api_client).list_namespaced_deployment(namespace, label_selector=MANAGED).items
            if d.metadata.labels.get("tessera.ai/component") == "model-server"]


def served_only_on(api_client, custom, operator: OperatorProcess, nodes: set[str]):
    """The system Ready, served in full, every server available and pinned to one of `nodes` (None until so)."""
    found = systems(custom, operator.namespace)["steady"]
    summary = (found.get("status") or {}).get("plan") or {}
    deployments = servers(api_client, operator.namespace)
    return (deployments and all(pinned_node(d) in nodes and (d.status.available_replicas or 0) == d.spec.replicas > 0
                                for d in deployments)
            and summary.get("servedRequestsPerSecond") == summary.get("demandRequestsPerSecond")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in found["status"]["conditions"]))


def plans_after_it_settles(operator: OperatorProcess) -> float:
    """The plans stored, read once the operator has started three more reconciles (two of them whole)."""
    started = operator.metric("tessera_reconciles_total")
    wait_for(lambda: operator.metric("tessera_reconciles_total") >= started + 3, 60, "three more reconciles")
    return operator.metric(PLANS)


def serving(operator: OperatorProcess, kubectl, custom, extra_args: tuple[str, ...] = ()) -> float:
    """The operator started on its pool, `steady` Ready: the plans stored so far."""
    operator.extra_args += list(extra_args)
    operator.start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("steady"))
    wait_ready(custom, operator.namespace, ["steady"], READY_TIMEOUT_S, operator)
    return plans_after_it_settles(operator)


def test_a_node_removed_and_one_added_re_plan_once_each_and_nothing_stays_on_the_removed_node(
        run_operator, core, api_client, custom, kubectl):
    operator = run_operator(nodes=2, resync_s=2.0)
    plans = serving(operator, kubectl, custom)
    (removed, *_) = sorted({pinned_node(d) for d in servers(api_client, operator.namespace)})
    (kept,) = set(operator.pool.nodes) - {removed}

    core.delete_node(removed)
    wait_for(lambda: served_only_on(api_client, custom, operator, {kept}), READY_TIMEOUT_S,
             f"steady served in full from {kept} alone, nothing pinned to {removed}")
    assert plans_after_it_settles(operator) == plans + 1, "the node's removal re-planned once"

    (added,) = create_gpu_nodes(core, 1, H100, gpus_per_node=8, name_prefix=f"h100-{operator.pool.id}-added")
    operator.pool.nodes.append(added)  # removed with the pool
    core.patch_node(added, {"metadata": {"labels": {POOL_LABEL: operator.pool.id}}})
    wait_node_ready(core, added)
    wait_for(lambda: operator.metric(PLANS) >= plans + 2, 60, "a re-plan with the added node")
    assert plans_after_it_settles(operator) == plans + 2, "the node's arrival re-planned once"
    assert served_only_on(api_client, custom, operator, {kept, added})


def test_a_node_notready_past_its_grace_leaves_its_pool_with_one_re_plan(run_operator, core, api_client, custom,
                                                                         kubectl):
    operator = run_operator(nodes=1, resync_s=2.0)
    plans = serving(operator, kubectl, custom, ("--node-not-ready-grace", str(GRACE_S)))
    kubelet = KubeletStandIn(core, f"h100-{operator.pool.id}-z-kubelet", H100, [None] * 8,
                             labels={POOL_LABEL: operator.pool.id}).start()
    try:
        wait_for(lambda: operator.metric(PLANS) >= plans + 1, 60, "a re-plan with the stand-in's node")
        assert plans_after_it_settles(operator) == plans + 1

        kubelet.report_not_ready()
        wait_for(lambda: operator.metric(PLANS) >= plans + 2, GRACE_S + 30, "a re-plan without the NotReady node")
        assert plans_after_it_settles(operator) == plans + 2, "the node's leaving re-planned once"
        conditions = core.read_node(kubelet.name).status.conditions
        assert [c.status for c in conditions if c.type == "Ready"] != ["True"], "the node was Ready again"
        assert served_only_on(api_client, custom, operator, set(operator.pool.nodes))
    finally:
        kubelet.stop()


def test_an_admins_cordon_takes_the_serving_node_out_its_work_moves_and_the_cordon_is_never_lifted(
        run_operator, core, api_client, custom, kubectl):
    operator = run_operator(nodes=2, resync_s=2.0)
    plans = serving(operator, kubectl, custom)
    (cordoned, *_) = sorted({pinned_node(d) for d in servers(api_client, operator.namespace)})
    (other,) = set(operator.pool.nodes) - {cordoned}

    kubectl("cordon", cordoned)
    wait_for(lambda: served_only_on(api_client, custom, operator, {other}), READY_TIMEOUT_S,
             f"steady served in full from {other} alone, nothing pinned to {cordoned}")
    assert plans_after_it_settles(operator) == plans + 1, "the admin's cordon re-planned once"
    node = core.read_node(cordoned)
    assert node.spec.unschedulable and naming.CORDONED not in (node.metadata.annotations or {})


def test_tessera_s_uncordon_leaves_a_cordon_an_admin_took_over_after_tessera_read_the_node(api_client, core, kubectl):
    """The admin takes over tessera's cordon by removing its record (docs/operator.md) between tessera's read
    and its write: the API server refuses the uncordon's test, and the node stays cordoned."""
    (name,) = create_gpu_nodes(core, 1, H100, gpus_per_node=1, name_prefix="h100-cordon-handover")
    try:
        cluster = Cluster(api_client, OperatorSettings())
        assert cluster.patch_node_guarded(name, builders.cordon_ops("tessera-v1-next"))  # tessera's cordon
        uncordon = UncordonNode(name, builders.uncordon_ops("tessera-v1-next"), reason="its new layout is applied")
        kubectl("annotate", "node", name, f"{naming.CORDONED}-")  # the admin's, after tessera read the node
        Actor(cluster, VllmClient(1.0), FetcherClient(1.0)).apply([uncordon])
        node = core.read_node(name)
        assert node.spec.unschedulable, "tessera lifted a cordon that was no longer its own"

        kubectl("uncordon", name)  # the admin is done; tessera cordons it again, and its own cordon is lifted
        assert cluster.patch_node_guarded(name, builders.cordon_ops("tessera-v1-next"))
        Actor(cluster, VllmClient(1.0), FetcherClient(1.0)).apply([uncordon])
        node = core.read_node(name)
        assert not node.spec.unschedulable and naming.CORDONED not in (node.metadata.annotations or {}), \
            "tessera's own cordon, its record unchanged, is lifted"
    finally:
        core.delete_node(name)


def test_tessera_never_claims_a_cordon_an_admin_set_after_tessera_read_the_node(api_client, core, kubectl, namespace):
    """The admin cordons between tessera's read and its cordon: the API server refuses the cordon's test, the node
    gets no tessera record (so tessera never lifts it), and its Deployment is not scaled to zero."""
    (name,) = create_gpu_nodes(core, 1, H100, gpus_per_node=1, name_prefix="h100-cordon-first")
    apps = client.AppsV1Api(api_client)
    labels = {"app": "server"}
    apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "server"}, "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{"name": "server", "image": "example.org/s:1"}]}}}})
    try:
        kubectl("cordon", name)  # the admin's, after tessera read the node
        Actor(Cluster(api_client, OperatorSettings()), VllmClient(1.0), FetcherClient(1.0)).apply([
            CordonNode(name, builders.cordon_ops("tessera-v1-next"), reason="re-partition serving node"),
            ScaleToZero(namespace, "server", name, reason=f"node {name} is re-partitioned")])
        node = core.read_node(name)
        assert node.spec.unschedulable and naming.CORDONED not in (node.metadata.annotations or {})
        assert apps.read_namespaced_deployment("server", namespace).spec.replicas == 1
    finally:
        core.delete_node(name)
