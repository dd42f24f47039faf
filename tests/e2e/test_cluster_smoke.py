"""Smoke tests of the test bed itself: real control plane, KWOK fake GPU nodes,
the MIG-manager stand-in, Helm and Prometheus behave as the operator's
end-to-end tests will rely on."""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from cluster.controlplane import KWOK_NODE_ANNOTATION, NODE_MONITOR_GRACE_S, NODE_MONITOR_PERIOD_S
from cluster.gpu_nodes import MIG_CONFIG, MIG_STATE, create_gpu_nodes
from cluster.gpu_operator import set_mig_configmap
from cluster.kube import pods, wait_crd_established, wait_for, wait_node_ready, wait_pods_phase

H100 = "NVIDIA-H100-80GB-HBM3"
CHART = Path(__file__).parent / "charts" / "smoke"
MIG_CONFIGMAP = ("gpu-operator", "tessera-mig-parted-config", "config.yaml")
GPU_OPERATOR_DEFAULT_CONFIGS = {"all-disabled": [{"devices": "all", "mig-enabled": False}]}


def test_control_plane_reports_the_pinned_kubernetes_version(kubectl):
    version = json.loads(kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.34.4"
    assert version["clientVersion"]["gitVersion"] == "v1.34.4"


def test_kubectl_applies_a_crd_and_a_custom_object(kubectl, api_client, namespace):
    crd = textwrap.dedent("""
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.smoke.tessera.test}
        spec:
          group: smoke.tessera.test
          scope: Namespaced
          names: {plural: widgets, singular: widget, kind: Widget}
          versions:
          - name: v1
            served: true
            storage: true
            schema:
              openAPIV3Schema:
                type: object
                properties:
                  spec: {type: object, properties: {size: {type: integer}}}
        """)
    kubectl("apply", "-f", "-", input=crd)
    wait_crd_established(api_client, "widgets.smoke.tessera.test")
    kubectl("apply", "-n", namespace, "-f", "-",
            input="apiVersion: smoke.tessera.test/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n")
    got = json.loads(kubectl("get", "-n", namespace, "widget", "w1", "-o", "json").stdout)
    assert got["spec"] == {"size": 3}


def test_a_job_pod_completes_on_a_kwok_node(api_client, core, cpu_node, namespace):
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "profile"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": cpu_node},
            "containers": [{"name": "profile", "image": "registry.invalid/profiler:0"}],
        }}},
    }
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, job)
    wait_for(lambda: (batch.read_namespaced_job("profile", namespace).status.succeeded or 0) == 1,
             90, "job profile to succeed")
    assert pods(core, namespace, "job-name=profile")[0].status.phase == "Succeeded"


def kwok_nodes_not_ready(core) -> set[str]:
    key, value = KWOK_NODE_ANNOTATION
    return {node.metadata.name for node in core.list_node().items
            if (node.metadata.annotations or {}).get(key) == value
            and not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])}


def test_kwok_nodes_stay_ready_over_a_window_longer_than_the_node_grace_period(core, cpu_node):
    """No NodeNotReady flapping: KWOK renews node Leases, so the node controller, which marks a node
    NotReady once neither its Lease nor its Ready condition was renewed for the grace period, never
    does; pods on the nodes (the model servers) keep their Ready condition."""
    start = datetime.now(timezone.utc)
    # Past the grace period and two of the node controller's checks after it.
    deadline = time.monotonic() + NODE_MONITOR_GRACE_S + 2 * NODE_MONITOR_PERIOD_S
    seen_not_ready: set[str] = set()
    while time.monotonic() < deadline:
        seen_not_ready |= kwok_nodes_not_ready(core)
        time.sleep(1)
    assert seen_not_ready == set()

    def after_start(event) -> bool:
        when = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
        return when >= start
    flaps = [(e.involved_object.kind, e.involved_object.name, e.message)
             for e in core.list_event_for_all_namespaces(field_selector="reason=NodeNotReady").items if after_start(e)]
    assert flaps == []
    lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(cpu_node, "kube-node-lease")
    assert lease.spec.renew_time > start, "KWOK renews the node's Lease, as a kubelet does"


def test_gpu_node_helper_makes_ready_nodes_labelled_like_gpu_feature_discovery(core):
    names = create_gpu_nodes(core, 2, "NVIDIA-A100-SXM4-40GB", gpus_per_node=4,
                             name_prefix=f"a100-{uuid.uuid4().hex[:5]}", mig_devices={"3g.20gb": 2})
    try:
        for name in names:
            wait_node_ready(core, name)
            node = core.read_node(name)
            labels = node.metadata.labels
            assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
            assert labels["nvidia.com/gpu.count"] == "4"
            assert labels["nvidia.com/mig.capable"] == "true"
            assert labels["nvidia.com/mig.strategy"] == "mixed"
            assert labels["nvidia.com/mig-3g.20gb.count"] == "8"
            assert node.status.allocatable["nvidia.com/mig-3g.20gb"] == "8"
            assert node.status.allocatable["nvidia.com/gpu"] == "0"
    finally:
        for name in names:
            core.delete_node(name)


@pytest.fixture
def h100_node(core) -> str:
    """One fake H100 node with one GPU, MIG disabled, for one test."""
    (name,) = create_gpu_nodes(core, 1, H100, gpus_per_node=1, name_prefix=f"h100-{uuid.uuid4().hex[:5]}")
    wait_node_ready(core, name)
    yield name
    core.delete_node(name)


def write_mig_configs(core, configs: dict) -> str:
    """Adds mig-parted configs to the ConfigMap the stand-in reads; returns its new text."""
    namespace, name, key = MIG_CONFIGMAP
    try:
        current = yaml.safe_load(core.read_namespaced_config_map(name, namespace).data[key])
    except client.ApiException as e:
        if e.status != 404:
            raise
        # Created as the GPU Operator ships its mig-parted config: with `all-disabled`, which later modules'
        # tests (giving the GPUs back after uninstall) relabel nodes to.
        text = yaml.safe_dump({"version": "v1", "mig-configs": {**GPU_OPERATOR_DEFAULT_CONFIGS, **configs}})
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {key: text}})
        return text
    current["mig-configs"].update(configs)
    text = yaml.safe_dump(current)
    core.patch_namespaced_config_map(name, namespace, {"data": {key: text}})
    return text


def apply_layout(core, mig_manager, node: str, config_name: str, entries: list) -> str:
    """Writes the config, waits out the ConfigMap lag, relabels, waits for the result."""
    text = write_mig_configs(core, {config_name: entries})
    wait_for(lambda: mig_manager.visible_config() == text, 30, "config visible to stand-in")
    core.patch_node(node, {"metadata": {"labels": {MIG_CONFIG: config_name}}})
    return mig_manager.wait_for_state(node, timeout=60)


def mig_server(name: str, node: str, replicas: int, per_pod: int) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "server", "image": "registry.invalid/model-server:0",
                                "resources": {"limits": {"nvidia.com/mig-1g.10gb": str(per_pod)}}}],
            },
        }},
    }


def test_scheduler_places_mig_pods_on_the_layout_and_leaves_excess_pending(
        api_client, core, mig_manager, h100_node, namespace):
    one_g = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    assert apply_layout(core, mig_manager, h100_node, "all-1g.10gb", one_g) == "success"
    node = core.read_node(h100_node)
    assert node.status.allocatable["nvidia.com/mig-1g.10gb"] == "7"
    assert node.status.allocatable["nvidia.com/gpu"] == "0"
    assert node.metadata.labels["nvidia.com/mig-1g.10gb.count"] == "7"

    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, mig_server("fits", h100_node, replicas=3, per_pod=1))
    running = wait_pods_phase(core, namespace, "app=fits", "Running", 3, timeout=90)
    assert {p.spec.node_name for p in running} == {h100_node}

    # 3 of 7 instances are taken; asking for 5 more exceeds what the layout offers.
    apps.create_namespaced_deployment(namespace, mig_server("too-big", h100_node, replicas=1, per_pod=5))

    def unschedulable():
        found = pods(core, namespace, "app=too-big")
        conds = found[0].status.conditions or [] if found else []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)
    wait_for(unschedulable, 60, "too-big pod marked Unschedulable")
    assert pods(core, namespace, "app=too-big")[0].status.phase == "Pending"


def test_a_layout_the_hardware_refuses_ends_in_failed(core, mig_manager, h100_node):
    too_many = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}]
    assert apply_layout(core, mig_manager, h100_node, "eight-1g", too_many) == "failed"
    assert "maximum" in mig_manager.errors[h100_node]
    # The node keeps what it had: one whole GPU.
    assert core.read_node(h100_node).status.allocatable["nvidia.com/gpu"] == "1"


def test_stand_in_reports_pending_before_success(core, mig_manager, h100_node):
    text = write_mig_configs(core, {"all-3g.40gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]})
    wait_for(lambda: mig_manager.visible_config() == text, 30, "config visible to stand-in")
    core.patch_node(h100_node, {"metadata": {"labels": {MIG_CONFIG: "all-3g.40gb"}}})
    seen: list[str] = []

    def pending_then_success():
        seen.append(core.read_node(h100_node).metadata.labels.get(MIG_STATE))
        return "pending" in seen and seen[-1] == "success"
    wait_for(pending_then_success, 30, "state pending, then success", interval=0.05)
    assert core.read_node(h100_node).status.allocatable["nvidia.com/mig-3g.40gb"] == "2"


def test_relabel_before_the_configmap_lag_passes_fails_and_a_cleared_state_retries(
        core, mig_manager, h100_node, monkeypatch):
    # The mounted ConfigMap lags (5s here, for margin on a busy machine): a
    # config relabelled at once is not seen yet.
    monkeypatch.setattr(mig_manager, "configmap_delay", 5.0)
    text = write_mig_configs(core, {"mixed-4g-3g": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1}}]})
    core.patch_node(h100_node, {"metadata": {"labels": {MIG_CONFIG: "mixed-4g-3g"}}})
    assert mig_manager.wait_for_state(h100_node) == "failed"
    assert "not found" in mig_manager.errors[h100_node] or "not visible" in mig_manager.errors[h100_node]
    # Once it is visible, removing the state label asks the stand-in to retry.
    wait_for(lambda: mig_manager.visible_config() == text, 30, "config visible to stand-in")
    core.patch_node(h100_node, {"metadata": {"labels": {MIG_STATE: None}}})
    assert mig_manager.wait_for_state(h100_node) == "success"
    labels = core.read_node(h100_node).metadata.labels
    assert labels["nvidia.com/mig-4g.40gb.count"] == "1" and labels["nvidia.com/mig-3g.40gb.count"] == "1"


def test_stand_in_reads_the_configmap_the_cluster_policy_names(core, mig_manager, h100_node):
    namespace = MIG_CONFIGMAP[0]
    text = yaml.safe_dump({"version": "v1", "mig-configs": {"whole-7g": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "other-mig-config"},
                                                  "data": {"config.yaml": text}})
    set_mig_configmap(core.api_client, "other-mig-config")
    try:
        wait_for(lambda: mig_manager.visible_config() == text, 30, "other ConfigMap visible to stand-in")
        core.patch_node(h100_node, {"metadata": {"labels": {MIG_CONFIG: "whole-7g"}}})
        assert mig_manager.wait_for_state(h100_node) == "success"
        assert core.read_node(h100_node).status.allocatable["nvidia.com/mig-7g.80gb"] == "1"
    finally:
        set_mig_configmap(core.api_client, MIG_CONFIGMAP[1])
        core.delete_namespaced_config_map("other-mig-config", namespace)


def test_relayout_is_refused_while_pods_hold_the_nodes_gpus(api_client, core, mig_manager, h100_node, namespace):
    one_g = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    assert apply_layout(core, mig_manager, h100_node, "all-1g.10gb", one_g) == "success"
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, mig_server("holder", h100_node, replicas=1, per_pod=1))
    wait_pods_phase(core, namespace, "app=holder", "Running", 1, timeout=90)
    two_g = [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}]
    assert apply_layout(core, mig_manager, h100_node, "all-2g.20gb", two_g) == "failed"
    assert "still holds GPUs" in mig_manager.errors[h100_node]


def test_helm_lints_and_renders_a_chart_against_the_stamped_kube_version(helm):
    lint = helm("lint", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout
    # No --kube-version: Helm checks kubeVersion against the version stamped at build.
    rendered = helm("template", "demo", str(CHART)).stdout
    deployment = yaml.safe_load(rendered.split("---", 2)[-1])
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-1g.10gb": 1}
    too_old = helm("template", "demo", str(CHART), "--kube-version", "v1.29.0", check=False)
    assert too_old.returncode != 0 and "kubeVersion" in too_old.stderr


REPO = Path(__file__).resolve().parents[2]
PRODUCT_CHARTS = sorted(chart.parent for chart in (REPO / "charts").glob("*/Chart.yaml"))


def test_the_repository_ships_the_tessera_chart():
    assert [c.name for c in PRODUCT_CHARTS] == ["tessera"]


@pytest.mark.parametrize("chart", PRODUCT_CHARTS, ids=lambda c: str(c.relative_to(REPO)))
def test_every_chart_in_the_repository_lints_and_renders(helm, chart):
    helm("lint", str(chart))
    rendered = helm("template", "tessera", str(chart), "--include-crds").stdout
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered) if doc}
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "ValidatingAdmissionPolicy"} <= kinds


def test_prometheus_reports_the_request_rate_the_exporter_sets(prometheus, demand_exporter):
    demand_exporter.set_rate("llama-8b", 40.0)

    def rate():
        result = prometheus.query('rate(tessera_demo_requests_total{model="llama-8b"}[5s])')
        return result and abs(float(result[0]["value"][1]) - 40.0) < 4.0
    wait_for(rate, 60, "rate() near 40 req/s", interval=0.5)
