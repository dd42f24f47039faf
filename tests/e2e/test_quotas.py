"""A namespace's ResourceQuota on GPUs caps what tessera gives it (issue 29 item 2), on the test cluster.

The API server's own quota admission is what is tested against: a pod beyond the quota is refused
(FailedCreate on its ReplicaSet, the pod never exists). With every profile but 1g.10gb at 0 and one
1g.10gb instance, a system asking for far more than one instance carries gets a plan of one 1g.10gb
replica, every pod of it is admitted, and its status says the quota holds it back. On whole GPUs, which
only AdapterPool servers request: a quota of one GPU leaves a pool that needs several servers one, its pod
admitted, and its status says so. A change the quota does not fit beside the old pods (new Deployments, one on a
second node with room for them) moves one replica at a time: no pod refused, the quota never passed; so does a
Deployment of two replicas stepping off a node an admin cordoned.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import urllib3
from kubernetes import client, config, watch

from cluster.kube import wait_crd_established, wait_for

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .operator_harness import (EXAMPLES, GROUP, MANAGED, VERSION, children, condition, pods_not_running, server_fingerprints, system_yaml,
                               systems, wait_ready)

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


class Sampler:
    """The namespace read every 0.2 s on a thread of its own (its own client): per sample, the GPU instances its
    pods request (pods not finished), the replicas tessera's Deployments ask for, the Ready pods, and the system's
    Progressing condition. Beside it a watch records every Deployment's replicas as each write sets them (a step
    that lasts less than a sample is seen there)."""

    def __init__(self, kubeconfig, namespace: str, resource: str, system: str):
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.namespace, self.resource, self.system = namespace, resource, system
        self.samples: list[dict] = []
        self.replicas: dict[str, list[int]] = {}
        """Deployment name -> its spec.replicas, each as a watch event carried it (consecutive repeats dropped)."""
        self.stopping = threading.Event()
        self.watch = watch.Watch()
        self.threads = [threading.Thread(target=self.sample, daemon=True),
                        threading.Thread(target=self.watch_deployments, daemon=True)]

    def sample(self) -> None:
        core, apps, custom = client.CoreV1Api(self.api), client.AppsV1Api(self.api), client.CustomObjectsApi(self.api)
        while not self.stopping.wait(0.2):
            pods = [p for p in core.list_namespaced_pod(self.namespace).items
                    if p.status.phase not in ("Succeeded", "Failed")]
            deployments = apps.list_namespaced_deployment(self.namespace, label_selector=MANAGED).items
            self.samples.append({
                "requested": sum(int((c.resources.requests or {}).get(self.resource, 0))
                                 for p in pods for c in p.spec.containers),
                "asked": sum(d.spec.replicas for d in deployments
                             if self.resource in (d.spec.template.spec.containers[0].resources.requests or {})),
                "ready": sum(1 for p in pods if any(c.type == "Ready" and c.status == "True"
                                                    for c in p.status.conditions or [])),
                "progressing": condition(systems(custom, self.namespace).get(self.system, {}), "Progressing"),
            })

    def watch_deployments(self) -> None:
        apps = client.AppsV1Api(self.api)
        try:
            for event in self.watch.stream(apps.list_namespaced_deployment, self.namespace, label_selector=MANAGED,
                                           timeout_seconds=600):
                steps = self.replicas.setdefault(event["object"].metadata.name, [])
                if not steps or steps[-1] != event["object"].spec.replicas:
                    steps.append(event["object"].spec.replicas)
        except urllib3.exceptions.HTTPError:
            if not self.stopping.is_set():
                raise  # a watch cut short while the test reads it: its steps would be incomplete

    def __enter__(self) -> "Sampler":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopping.set()
        self.watch.stop()
        self.api.close()  # ends the watch's open response
        for thread in self.threads:
            thread.join(5)


def hold_new_pods(core, nodes: list[str], held: bool) -> None:
    """A NoSchedule taint no server tolerates on every node of the pool (or none): a pod created meanwhile stays
    Pending, not Ready; the pods running stay (NoSchedule evicts nothing)."""
    for node in nodes:
        core.patch_node(node, {"spec": {"taints": [{"key": "test.tessera.ai/hold", "effect": "NoSchedule"}]
                                        if held else None}})


def test_a_change_the_quota_does_not_fit_beside_the_old_pods_moves_one_replica_at_a_time_without_a_refused_pod(
        run_operator, core, custom, api_client, kubectl, cluster):
    """Two 1g.10gb instances in the quota (every other profile 0), two nodes of one GPU. At 200 requests/s the
    plan is one resnet101 replica on one node; at 2,000 it is two resnet50 replicas in other configurations (other
    Deployments: one on each node, the second node's layout has room beside the old pod, the quota has none: old
    1 + new 2 > 2). Sampled every 0.2 s, and every Deployment write seen through a watch: what tessera asks for
    and what the pods request never pass the quota, no pod is refused (no FailedCreate), the system reads
    Progressing QuotaTransition naming the quota with Warning Events, the old Deployment goes down one replica
    at a time to none before it is deleted, never fewer replicas are Ready than served before (at most one less),
    and the system ends Ready with the two new replicas available.

    KWOK makes a pod Ready the moment it is scheduled, which would let a rule that scales an old Deployment down
    without waiting for the new pods' readiness pass: the pool's nodes are tainted NoSchedule before the change,
    so the first new pod stays Pending (not Ready), the old Deployment must hold its replica over three
    reconciles (the Ready count would drop to 0 otherwise), and only then is the taint lifted."""
    def more_demand(namespace: str, old: dict[str, int]) -> None:
        kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("capped", demandRequestsPerSecond=2000))
    moves_one_replica_at_a_time(run_operator, core, custom, api_client, kubectl, cluster, before_rps=200,
                                change=more_demand)


def test_a_cordoned_nodes_deployment_of_two_replicas_steps_off_it_one_replica_at_a_time_inside_the_quota(
        run_operator, core, custom, api_client, kubectl, cluster):
    """The same quota and nodes. At 2,000 requests/s the plan is two resnet50 replicas on one node's GPU (one
    Deployment of two replicas). An admin cordons that node: the re-plan puts both replicas on the other node
    (another Deployment), whose two pods do not fit the quota beside the old two. The old Deployment serves on
    the cordoned node (a cordon stops no pod) and steps off it 2 -> 1 -> 0, the first step before any new pod
    (the quota has no room for one), the second only once the new pod is Ready; the same samples and assertions
    as above."""
    def cordon_the_old_node(namespace: str, old: dict[str, int]) -> None:
        (node,) = {p.spec.node_name for p in core.list_namespaced_pod(namespace).items
                   if p.metadata.labels.get("tessera.ai/deployment") in old}
        core.patch_node(node, {"spec": {"unschedulable": True}})
    moves_one_replica_at_a_time(run_operator, core, custom, api_client, kubectl, cluster, before_rps=2000,
                                change=cordon_the_old_node)


def moves_one_replica_at_a_time(run_operator, core, custom, api_client, kubectl, cluster, before_rps: int,
                                change: Callable[[str, dict[str, int]], None]) -> None:
    """A quota of two 1g.10gb instances (every other profile 0) on two nodes of one GPU: the system planned at
    `before_rps`, then `change` (given the namespace and the old Deployments' replicas) makes the plan serve it
    with two replicas in other Deployments, which do not fit the quota beside the old ones. What both tests above
    assert of that change."""
    operator = run_operator(nodes=2, resync_s=2.0, gpus_per_node=1)
    namespace, resource = operator.namespace, "nvidia.com/mig-1g.10gb"
    hard = {f"requests.nvidia.com/mig-{p}": "2" if p == "1g.10gb" else "0" for p in PROFILES}
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "gpus"}, "spec": {"hard": hard}})
    wait_for(lambda: core.read_namespaced_resource_quota("gpus", namespace).status.hard, 60, "the quota's status")
    operator.start()
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("capped", demandRequestsPerSecond=before_rps))
    wait_ready(custom, namespace, ["capped"], 180, operator)
    old = {d.metadata.name: d.spec.replicas for d in children(api_client, namespace)[0]}
    served = sum(old.values())
    hold_new_pods(core, operator.pool.nodes, True)

    with Sampler(cluster.kubeconfig, namespace, resource, "capped") as sampler:
        change(namespace, old)
        pending = lambda: [p for p in core.list_namespaced_pod(namespace).items  # noqa: E731
                           if p.status.phase == "Pending" and p.metadata.labels["tessera.ai/deployment"] not in old]
        wait_for(pending, 180, "the first new pod, Pending")
        replicas = lambda: {n: sampler.replicas[n][-1] for n in old}  # noqa: E731
        before = replicas()
        started = operator.metric("tessera_reconciles_total")
        wait_for(lambda: operator.metric("tessera_reconciles_total") >= started + 3, 60, "three more reconciles")
        assert replicas() == before, "no old replica goes while a new pod is not Ready"
        hold_new_pods(core, operator.pool.nodes, False)
        try:
            wait_for(lambda: not set(old) & set(server_fingerprints(api_client, namespace)) or None, 120,
                     "the old Deployments gone")
        except TimeoutError:
            raise AssertionError(f"{old}\n{sampler.samples[-1]}\n{pods_not_running(api_client, namespace)}\n"
                                 f"{operator.log_text()}") from None
        wait_ready(custom, namespace, ["capped"], 60, operator)

    samples = sampler.samples
    assert max(s["requested"] for s in samples) <= 2, "the pods' requests never pass the quota"
    assert max(s["asked"] for s in samples) <= 2, "tessera never asks for more than the quota"
    assert min(s["ready"] for s in samples) >= max(1, served - 1), "one replica at most is not Ready at a time"
    for name, replicas_before in old.items():
        assert sampler.replicas[name] == list(range(replicas_before, -1, -1)), "one replica at a time, down to none"
    events = core.list_namespaced_event(namespace).items
    assert [e.message for e in events if e.reason == "FailedCreate"] == [], "no pod was refused by the quota"
    stepped = [e for e in events if e.reason == "QuotaTransition"]
    assert stepped and all(e.type == "Warning" for e in stepped)
    transition = next(s["progressing"] for s in samples
                      if s["progressing"] and s["progressing"]["reason"] == "QuotaTransition")
    assert f"ResourceQuota {namespace}/gpus" in transition["message"], transition["message"]
    new = children(api_client, namespace)[0]
    assert sum(d.spec.replicas for d in new) == sum(d.status.available_replicas or 0 for d in new) == 2
