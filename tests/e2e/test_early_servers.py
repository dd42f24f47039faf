"""A fresh node's servers are created while mig-manager applies its layout, and start only once it landed
(issue 29, apply -> Ready; decide.starts_before_layout).

KWOK marks a pod Ready as soon as the scheduler binds it, so "Ready" proves nothing about order here. What the
test reads instead, polling the API in this order each time: the system, the Deployments, their pods, the node.
A Deployment (and its pods) seen in a poll whose node read, made after, still shows no MIG instance allocatable
was created before the layout landed; a pod seen bound in such a poll would have been bound before it (the node
cannot lose a layout it had). The stand-in's apply is made long (APPLY_S) so the controller-manager has time to
create the pods during it, and the stand-in itself refuses (`failed`) a layout while a pod holds the node's
GPUs: its `success` says no pod was bound when it applied. Without the rule the Deployments come only after the
layout is applied and the first assertion fails.
"""

from __future__ import annotations

import time

from kubernetes import client

from cluster.gpu_nodes import MIG_STATE
from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import MANAGED, apply_examples, is_true, systems

APPLY_S = 8.0
"""The stand-in's apply here: long beside the controller-manager's pod creation (~5 pods a second)."""
READY_TIMEOUT_S = 180


def model_servers(apps: client.AppsV1Api, namespace: str) -> list[client.V1Deployment]:
    return [d for d in apps.list_namespaced_deployment(namespace, label_selector=MANAGED).items
            if d.metadata.labels.get("tessera.ai/component") == "model-server"]


def mig_allocatable(node: client.V1Node) -> dict[str, str]:
    return {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/mig-") and v != "0"}


def test_a_fresh_nodes_servers_are_created_while_its_layout_changes_and_start_only_once_it_landed(
        run_operator, core, custom, api_client, kubectl, mig_manager):
    operator = run_operator(nodes=1).start()
    (node_name,) = operator.pool.nodes
    apps = client.AppsV1Api(api_client)
    assert not mig_allocatable(core.read_node(node_name)), "a fresh node advertises no MIG instance"
    before, mig_manager.apply_seconds = mig_manager.apply_seconds, APPLY_S
    polls = []
    try:
        (name,) = apply_examples(kubectl, operator.namespace, ("single-model.yaml",))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and not (polls and polls[-1]["ready"]):
            assert operator.alive(), operator.log_text()
            found = systems(custom, operator.namespace).get(name)
            deployments = model_servers(apps, operator.namespace)
            pods = [p for p in core.list_namespaced_pod(operator.namespace).items
                    if "tessera.ai/deployment" in (p.metadata.labels or {})]
            node = core.read_node(node_name)  # last: what the reads above saw came before this
            polls.append({"at": time.monotonic(), "ready": found is not None and is_true(found, "Ready"),
                          "replicas": sum(d.spec.replicas for d in deployments), "pods": len(pods),
                          "bound": [p.metadata.name for p in pods if p.spec.node_name],
                          "layout": bool(mig_allocatable(node)), "state": (node.metadata.labels or {}).get(MIG_STATE)})
            time.sleep(0.1)
    finally:
        mig_manager.apply_seconds = before
    assert polls and polls[-1]["ready"], f"not Ready in {READY_TIMEOUT_S}s:\n{operator.log_text()}"

    before_layout = [p for p in polls if not p["layout"]]
    # The servers and all their pods existed while mig-manager was still applying the node's layout ...
    assert any(p["replicas"] > 0 and p["pods"] == p["replicas"] for p in before_layout), (
        "the Deployments and their pods should be created before the layout lands", polls[:: max(1, len(polls) // 40)])
    # ... none of those pods was bound to the node before its layout's instances were allocatable ...
    assert all(not p["bound"] for p in before_layout), [p for p in before_layout if p["bound"]][:3]
    # ... mig-manager applied it (the stand-in refuses while a pod holds the node's GPUs) ...
    assert mig_manager.wait_for_state(node_name) == "success", mig_manager.errors.get(node_name)
    # ... and the system read Ready only once the layout was applied.
    assert all(p["state"] == "success" and p["layout"] for p in polls if p["ready"])
    wait_for(lambda: all(p.status.phase == "Running" and p.spec.node_name == node_name
                         for p in core.list_namespaced_pod(operator.namespace).items
                         if "tessera.ai/deployment" in (p.metadata.labels or {})), 30, "the servers Running")
