"""A namespace's ResourceQuota on GPUs caps what tessera gives it (issue 29 item 2), on the test cluster.

The API server's own quota admission is what is tested against: a pod beyond the quota is refused
(FailedCreate on its ReplicaSet, the pod never exists). With every profile but 1g.10gb at 0 and one
1g.10gb instance, a system asking for far more than one instance carries gets a plan of one 1g.10gb
replica, every pod of it is admitted, and its status says the quota holds it back. On whole GPUs, which
only AdapterPool servers request: a quota of one GPU leaves a pool that needs several servers one, its pod
admitted, and its status says so.
"""

from __future__ import annotations

import json

from kubernetes import client

from cluster.kube import wait_crd_established, wait_for

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .operator_harness import EXAMPLES, GROUP, VERSION, children, condition, system_yaml, systems

PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def test_a_namespace_quota_on_mig_instances_caps_the_plan_every_pod_is_admitted_and_status_says_so(
        run_operator, core, custom, api_client, kubectl):
    operator = run_operator(nodes=1)
    namespace = operator.namespace
    hard = {f"requests.nvidia.com/mig-{p}": "1" if p == "1g.10gb" else "0" for p in PROFILES}
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "gpus"}, "spec": {"hard": hard}})
    operator.start()
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("capped", demandRequestsPerSecond=2000))

    def held_back():
        found = condition(systems(custom, namespace).get("capped", {}), "Degraded")
        return found if found and found["reason"] == "QuotaReached" else None
    degraded = wait_for(held_back, 180, "Degraded QuotaReached")
    assert f"ResourceQuota {namespace}/gpus" in degraded["message"], degraded["message"]
    deployments = wait_for(lambda: children(api_client, namespace)[0] or None, 60, "the capped plan's servers")
    requested = {r for d in deployments for c in d.spec.template.spec.containers
                 for r in (c.resources.requests or {}) if r.startswith("nvidia.com/mig-")}
    assert requested == {"nvidia.com/mig-1g.10gb"}, requested
    assert sum(d.spec.replicas for d in deployments) == 1
    pods = lambda: core.list_namespaced_pod(namespace).items  # noqa: E731
    wait_for(lambda: len(pods()) == 1 or None, 60, "the one server pod admitted")
    events = core.list_namespaced_event(namespace).items
    assert [e.message for e in events if e.reason == "FailedCreate"] == [], "no pod was refused by the quota"
    used = client.CoreV1Api(api_client).read_namespaced_resource_quota("gpus", namespace).status.used
    assert used.get("requests.nvidia.com/mig-1g.10gb") == "1"


def test_a_lowered_quota_on_mig_instances_takes_a_replica_from_the_running_system_and_status_states_the_loss(
        run_operator, core, custom, api_client, kubectl):
    operator = run_operator(nodes=1)
    namespace = operator.namespace
    hard = {f"requests.nvidia.com/mig-{p}": "2" if p == "1g.10gb" else "0" for p in PROFILES}
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "gpus"}, "spec": {"hard": hard}})
    operator.start()
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("capped", demandRequestsPerSecond=2000))
    replicas = lambda: sum(d.spec.replicas for d in children(api_client, namespace)[0])  # noqa: E731
    wait_for(lambda: replicas() == 2 or None, 180, "two 1g.10gb replicas within the quota of 2")
    served = wait_for(lambda: (systems(custom, namespace)["capped"].get("status", {}).get("plan") or {})
                      .get("servedRequestsPerSecond"), 60, "the plan's served rate in status")

    core.patch_namespaced_resource_quota("gpus", namespace, {"spec": {"hard": {"requests.nvidia.com/mig-1g.10gb": "1"}}})

    def loss_stated():
        found = systems(custom, namespace)["capped"]
        degraded = condition(found, "Degraded") or {}
        return found if "a lowered quota took" in degraded.get("message", "") else None
    try:
        found = wait_for(loss_stated, 180, "Degraded QuotaReached stating the lowered quota's loss")
    except TimeoutError:
        raise AssertionError(f"{json.dumps(systems(custom, namespace)['capped'].get('status'), indent=1)}\n"
                             f"{operator.log_text()[-4000:]}") from None
    plan = found["status"]["plan"]
    assert plan["servedBeforeQuotaRequestsPerSecond"] == served > plan["servedRequestsPerSecond"], plan
    assert f"ResourceQuota {namespace}/gpus: requests.nvidia.com/mig-1g.10gb 1" in condition(found, "Degraded")["message"]
    wait_for(lambda: replicas() == 1 or None, 60, "one replica within the lowered quota")


POOL_FILE = EXAMPLES / "adapter-pools" / "support-bots.yaml"  # more than one server (test_adapter_pools.py)


def test_a_namespace_quota_on_whole_gpus_caps_its_adapter_pools_servers_every_pod_is_admitted_and_status_says_so(
        run_operator, core, custom, api_client, kubectl, vllm):
    """The plain `nvidia.com/gpu: 0` beside it is the API server's to accept and ignore (it counts extended resources
    only as `requests.<name>`): were it enforced, the one server's pod would be refused and the test fail."""
    operator = run_operator(nodes=1, adapter_servers=vllm)
    namespace = operator.namespace
    hard = {"requests.nvidia.com/gpu": "1", "nvidia.com/gpu": "0"}
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "whole-gpus"}, "spec": {"hard": hard}})
    # admission refuses every pod of the namespace until the quota controller has written the quota's status
    wait_for(lambda: core.read_namespaced_resource_quota("whole-gpus", namespace).status.hard, 60, "the quota's status")
    operator.start()
    wait_crd_established(api_client, "adapterpools.tessera.ai")
    kubectl("apply", "-n", namespace, "-f", str(POOL_FILE))

    def held_back():
        items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "adapterpools")["items"]
        found = condition(items[0], "Degraded") if items else None
        return found if found and found["reason"] == "QuotaReached" else None
    degraded = wait_for(held_back, 180, "AdapterPool Degraded QuotaReached")
    assert f"ResourceQuota {namespace}/whole-gpus: requests.nvidia.com/gpu 1" in degraded["message"], degraded["message"]
    apps = client.AppsV1Api(api_client)
    servers = lambda: apps.list_namespaced_deployment(namespace, label_selector="tessera.ai/pool=support-bots").items  # noqa: E731
    deployments = wait_for(lambda: servers() or None, 60, "the capped pool's server")
    assert [d.spec.template.spec.containers[0].resources.requests for d in deployments] == [{"nvidia.com/gpu": "1"}]
    pods = lambda: core.list_namespaced_pod(namespace).items  # noqa: E731
    wait_for(lambda: len(pods()) == 1 or None, 60, "the one server pod admitted")
    events = core.list_namespaced_event(namespace).items
    assert [e.message for e in events if e.reason == "FailedCreate"] == [], "no pod was refused by the quota"
    used = client.CoreV1Api(api_client).read_namespaced_resource_quota("whole-gpus", namespace).status.used
    assert used.get("requests.nvidia.com/gpu") == "1", used
