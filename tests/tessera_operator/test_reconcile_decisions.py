"""The reconciler's pure decisions: which pool a system joins, when a stored plan stands, what wakes a reconcile."""

from __future__ import annotations

import json

import kopf

from tessera.operator.entry import fingerprints
from tessera.operator.entry.process import configure_kopf
from tessera.operator.reconcile.decide import POOL_ANNOTATION, assign_to_pools, stored_plan_stands
from tessera.operator.api.systems import read_system

from .conftest import gpu_node, pool_of

SYSTEM = {"apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem",
          "spec": {"slo": {"latencyMilliseconds": 100}, "demandRequestsPerSecond": 10,
                   "tasks": [{"name": "t", "variants": [{"name": "v", "accuracy": 1, "gpuMemoryGigabytes": 1}]}]}}


def _system(name: str, annotations: dict | None = None, **spec) -> dict:
    return {**SYSTEM, "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1,
                                   "annotations": annotations or {}}, "spec": {**SYSTEM["spec"], **spec}}


def test_a_system_object_becomes_a_planner_spec_named_by_namespace_and_name():
    system = read_system(_system("a"))
    assert system.valid and system.spec.name == "ns/a" and system.ref.key == "ns/a"


def test_a_spec_the_planner_rejects_is_invalid_with_the_field_named():
    system = read_system(_system("a", edges=[{"source": "t", "target": "t"}]))
    assert not system.valid and "edges[0]" in system.error


def test_systems_join_the_largest_pool_unless_their_annotation_names_another():
    big = pool_of(gpu_node("h1"), gpu_node("h2"))
    small = pool_of(gpu_node("a1", product="NVIDIA-A100-SXM4-40GB", gpus=4))
    systems = [read_system(_system("plain")),
               read_system(_system("pinned", {POOL_ANNOTATION: "NVIDIA-A100-SXM4-40GB"})),
               read_system(_system("nowhere", {POOL_ANNOTATION: "NVIDIA-B200"}))]
    members = assign_to_pools(systems, [small, big])
    assert [s.ref.name for s in members[big.key]] == ["plain"]
    assert [s.ref.name for s in members[small.key]] == ["pinned"]
    assert [s.ref.name for s in members[None]] == ["nowhere"]


def test_a_stored_plan_stands_while_its_systems_and_pool_are_unchanged():
    a, b = read_system(_system("a")), read_system(_system("b"))
    hashes = {"ns/a": "h-a", "ns/b": "h-b"}
    state = {"plan": "{...}", "pool": "pool-1", "systems": json.dumps(hashes)}
    present = set(hashes)
    assert stored_plan_stands(state, "pool-1", [a, b], hashes, present)
    assert stored_plan_stands(state, "pool-1", [a], hashes, present), "b turned invalid: a's plan stands"
    assert not stored_plan_stands(state, "pool-2", [a, b], hashes, present), "the pool changed"
    assert not stored_plan_stands(state, "pool-1", [a, b], {**hashes, "ns/b": "h-b2"}, present), "b's spec changed"
    assert not stored_plan_stands({}, "pool-1", [a], hashes, present)


def test_node_heartbeats_do_not_wake_the_reconciler_but_mig_labels_do():
    node = gpu_node("h1")
    key, first = fingerprints.node_fingerprint(node, "MODIFIED")
    heartbeat = {**node, "status": {**node["status"], "conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "later"}]}}
    assert fingerprints.node_fingerprint(heartbeat, "MODIFIED") == (key, first)
    relabelled = gpu_node("h1", extra_labels={"nvidia.com/mig.config.state": "success"})
    assert fingerprints.node_fingerprint(relabelled, "MODIFIED")[1] != first


def test_an_adapter_server_pods_restart_ip_or_readiness_wakes_the_reconciler_but_its_gate_and_annotation_do_not():
    pod = {"metadata": {"name": "p", "namespace": "shop", "uid": "u1"},
           "status": {"phase": "Running", "podIP": "10.0.0.7", "conditions": [],
                      "containerStatuses": [{"name": "server", "restartCount": 0, "ready": True}]}}
    key, first = fingerprints.adapter_server_pod_fingerprint(pod, "MODIFIED")
    gated = {"metadata": {**pod["metadata"], "annotations": {"tessera.ai/loaded-adapters": "3:abc"}},
             "status": {**pod["status"], "conditions": [{"type": "tessera.ai/adapters-loaded", "status": "True"}]}}
    assert fingerprints.adapter_server_pod_fingerprint(gated, "MODIFIED") == (key, first)
    ready = {**gated, "status": {**gated["status"], "conditions": [*gated["status"]["conditions"],
                                                                   {"type": "Ready", "status": "True"}]}}
    assert fingerprints.adapter_server_pod_fingerprint(ready, "MODIFIED")[1] != first  # on its routes now
    restarted = {**pod, "status": {**pod["status"], "containerStatuses": [
        {"name": "server", "restartCount": 1, "ready": False}]}}
    assert fingerprints.adapter_server_pod_fingerprint(restarted, "MODIFIED")[1] != first
    moved = {**pod, "status": {**pod["status"], "podIP": "10.0.0.8"}}
    assert fingerprints.adapter_server_pod_fingerprint(moved, "MODIFIED")[1] != first


def test_the_api_server_sends_only_the_adapter_servers_pod_events():
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    pods = kopf.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    deployments = kopf.Resource(group="apps", version="v1", plural="deployments", kind="Deployment", namespaced=True)
    assert list(settings.watching.label_selectors.collect(pods)) == [
        "app.kubernetes.io/managed-by=tessera,tessera.ai/component=adapter-server"]
    assert list(settings.watching.label_selectors.collect(deployments)) == []


def test_status_writes_alone_do_not_wake_the_reconciler():
    obj = _system("a")
    _, before = fingerprints.system_fingerprint(obj, "MODIFIED")
    _, after = fingerprints.system_fingerprint({**obj, "status": {"phase": "Ready"}}, "MODIFIED")
    assert before == after
    _, edited = fingerprints.system_fingerprint({**obj, "metadata": {**obj["metadata"], "generation": 2}}, "MODIFIED")
    assert edited != before
