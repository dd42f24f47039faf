"""AdapterPool servers get their adapters loaded, and keep them: at start, after a restart, on a new pod.

The operator runs as a subprocess against the test cluster (as in
test_adapter_pools.py) and reaches each fake pod's server through its one
address hook, `--adapter-server-url`, at the vLLM stand-in
(tests/cluster/vllm_standin.py: vLLM 0.8.5's `/v1/models` and
`/v1/load_lora_adapter`, one process per pod). What each server must hold
is computed here by `tessera place`'s own placement of the same file; what
it holds is what the stand-in registered; whether a pod is Ready is what
the API server says.

KWOK would make the readiness gate vacuous: its default pod stage sets
every gate's condition True and Ready True by itself. The test cluster's
stages (tests/cluster/kwok-stages.yaml) leave gates to their owner, and
each test checks that a Running pod with its IP stays not Ready while its
server does not list its adapters, before tessera opens the gate.
"""

from __future__ import annotations

import json
import time
from functools import partial

import yaml
from kubernetes import client

from cluster.kube import wait_for
from cluster.weights_store import adapter_files
from tessera.operator import naming
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.api.status import ADAPTER_LOAD_FAILED
from tessera.operator.reconcile.adapter_loading import (FAILURES_ANNOTATION, MISSING, NOT_ANSWERING, SOME_FAILED,
                                                        loaded_value)
from tessera.operator.reconcile.adapter_pool_decide import within
from tessera.operator.settings import OperatorSettings
from tessera.planner.placement import place
from tessera.planner.placement.pool_file import load_problem

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .test_adapter_pools import POOL, POOL_FILE, adapter_pool, wait_pool_ready

RESTORED_WITHIN_S = 30
DEFAULT_FAILURES = OperatorSettings().adapter_load_failures
WAIT_S = 60


def placed() -> dict[str, list[str]]:
    """Each server Deployment's adapters, by the placement the operator makes of the same file."""
    servers = place(within(load_problem(POOL_FILE), 8), "tessera").servers
    return {child_name(POOL, "server", str(i)): list(s.adapters) for i, s in enumerate(servers)}


def server_pods(core, namespace: str, deployment: str) -> list:
    return [p for p in core.list_namespaced_pod(namespace, label_selector=f"tessera.ai/deployment={deployment}").items
            if p.metadata.deletion_timestamp is None]


def ready_pod(core, namespace: str, deployment: str):
    """The server's one pod, once it is Ready; else None."""
    pods = server_pods(core, namespace, deployment)
    return pods[0] if len(pods) == 1 and is_ready(pods[0]) else None


def condition(pod, kind: str):
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def is_ready(pod) -> bool:
    ready = condition(pod, "Ready")
    return ready is not None and ready.status == "True"


def gate_open(pod) -> bool:
    gate = condition(pod, naming.ADAPTERS_LOADED)
    return gate is not None and gate.status == "True"


def waiting_for_its_server(pod) -> bool:
    """Running with an IP, asked by tessera (the gate says its server does not answer), and not Ready."""
    gate = condition(pod, naming.ADAPTERS_LOADED)
    return (pod.status.phase == "Running" and bool(pod.status.pod_ip) and gate is not None
            and (gate.status, gate.reason) == ("False", NOT_ANSWERING))


def assert_loaded(vllm, pod, adapters: list[str]) -> None:
    """The pod is Ready through its open gate, its server holds exactly its placed adapters from their paths,
    and the annotation says so."""
    namespace, name = pod.metadata.namespace, pod.metadata.name
    assert vllm.paths(namespace, name) == {a: f"/adapters/{a}" for a in adapters}, name
    assert gate_open(pod) and is_ready(pod), pod.status.conditions
    assert pod.metadata.annotations[naming.LOADED_ADAPTERS] == loaded_value(adapters)


def assert_others_loaded(vllm, core, namespace: str, others) -> None:
    """Every other server's pod turns Ready holding its placed adapters."""
    for other, its_adapters in others:
        assert_loaded(vllm, wait_for(partial(ready_pod, core, namespace, other), WAIT_S, f"{other} Ready",
                                     interval=0.5), its_adapters)


def load_failed(custom, namespace: str) -> dict | None:
    """The pool's Degraded condition, once its reason is AdapterLoadFailed."""
    found = adapter_pool(custom, namespace) or {}
    return next((c for c in found.get("status", {}).get("conditions", [])
                 if c["type"] == "Degraded" and c["reason"] == ADAPTER_LOAD_FAILED), None)


def start_ready_pool(run_operator, vllm, kubectl, custom):
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    kubectl("apply", "-n", operator.namespace, "-f", str(POOL_FILE))
    wait_pool_ready(custom, operator, kubectl)
    return operator


def test_a_server_pod_is_ready_only_once_its_server_lists_every_adapter_placed_on_it(
        run_operator, core, custom, kubectl, vllm):
    vllm.hold_new = True  # every server "still loading its weights": no answer
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    kubectl("apply", "-n", operator.namespace, "-f", str(POOL_FILE))
    servers = placed()
    assert len(servers) >= 2

    def all_waiting():
        pods = [p for d in servers for p in server_pods(core, operator.namespace, d)]
        return pods if len(pods) == len(servers) and all(waiting_for_its_server(p) for p in pods) else None
    pods = wait_for(all_waiting, WAIT_S, "every server pod Running and asked by tessera", interval=0.5)
    time.sleep(2)  # KWOK's stages and the Deployment controller have had their turn
    for pod in pods:
        pod = core.read_namespaced_pod(pod.metadata.name, operator.namespace)
        assert not is_ready(pod) and not gate_open(pod), pod.status.conditions
        assert vllm.listed(operator.namespace, pod.metadata.name) == []
    deployments = client.AppsV1Api(core.api_client).list_namespaced_deployment(
        operator.namespace, label_selector=f"tessera.ai/pool={POOL}").items
    assert all(not d.status.available_replicas for d in deployments)

    vllm.release()
    found = wait_pool_ready(custom, operator, kubectl)
    assert found["status"]["plan"]["serversReady"] == len(servers)
    for deployment, adapters in servers.items():
        (pod,) = server_pods(core, operator.namespace, deployment)
        assert_loaded(vllm, pod, adapters)


def restart_server(core, vllm, pod) -> float:
    """The pod's container restarts: a new vLLM process, nothing registered (and the kubelet's restart count); when."""
    namespace, name = pod.metadata.namespace, pod.metadata.name
    vllm.restart(namespace, name)
    restarted = time.monotonic()
    (status,) = pod.status.container_statuses
    core.patch_namespaced_pod_status(name, namespace, {"status": {"containerStatuses": [{
        "name": status.name, "image": status.image, "imageID": status.image_id or "", "ready": True,
        "restartCount": status.restart_count + 1, "state": {"running": {"startedAt": "2026-12-04T00:00:00Z"}}}]}})
    return restarted


def test_a_restarted_server_gets_its_adapters_back_within_30_s(run_operator, core, custom, kubectl, vllm):
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    deployment, adapters = next(iter(placed().items()))
    (pod,) = server_pods(core, operator.namespace, deployment)
    name = pod.metadata.name
    loads_before = vllm.loads(operator.namespace, name)

    restarted = restart_server(core, vllm, pod)
    wait_for(lambda: sorted(vllm.listed(operator.namespace, name)) == sorted(adapters), RESTORED_WITHIN_S,
             "the restarted server's adapters loaded again", interval=0.2)
    assert time.monotonic() - restarted < RESTORED_WITHIN_S
    assert vllm.loads(operator.namespace, name) == loads_before + len(adapters)
    wait_for(lambda: gate_open(core.read_namespaced_pod(name, operator.namespace)), WAIT_S, "gate open", interval=0.5)
    assert_loaded(vllm, core.read_namespaced_pod(name, operator.namespace), adapters)


def test_a_restarted_server_of_a_pool_turned_invalid_gets_the_placement_in_force_back(
        run_operator, core, custom, kubectl, vllm):
    """The spec edited into one the placement refuses: the pool reads Invalid, naming the placement in force its
    placement ConfigMap records, and a server restarted meanwhile gets that placement's adapters back (before, an
    invalid pool's pods were neither loaded nor gated: it came back with none, its gate still open)."""
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    servers = placed()
    kubectl("patch", "adapterpool", POOL, "-n", operator.namespace, "--type=merge", "-p",
            json.dumps({"spec": {"meanPromptTokens": 5000}}))

    def invalid():
        found = adapter_pool(custom, operator.namespace) or {}
        return next((c for c in found.get("status", {}).get("conditions", [])
                     if c["type"] == "Invalid" and c["status"] == "True"), None)
    message = wait_for(invalid, WAIT_S, "the pool Invalid", interval=0.5)["message"]
    assert (f"the placement in force: {sum(map(len, servers.values()))} adapters on {len(servers)} server(s) "
            f"(ConfigMap {child_name(POOL, 'placement')})") in message
    deployment, adapters = next(iter(servers.items()))
    (pod,) = server_pods(core, operator.namespace, deployment)
    restarted = restart_server(core, vllm, pod)
    wait_for(lambda: sorted(vllm.listed(operator.namespace, pod.metadata.name)) == sorted(adapters),
             RESTORED_WITHIN_S, "the restarted server's adapters loaded again", interval=0.2)
    assert time.monotonic() - restarted < RESTORED_WITHIN_S
    assert_loaded(vllm, core.read_namespaced_pod(pod.metadata.name, operator.namespace), adapters)


def assert_a_new_pod_is_loaded_before_it_is_ready(core, vllm, namespace: str, deployment: str,
                                                  adapters: list[str], known: set[str]) -> None:
    """A pod of `deployment` not in `known` appears with its server not up: it stays not Ready while its server does
    not answer, and turns Ready once the server lists the deployment's adapters."""
    def new_pod_waiting():
        pods = [p for p in server_pods(core, namespace, deployment) if p.metadata.name not in known]
        return pods[0] if pods and waiting_for_its_server(pods[0]) else None
    new = wait_for(new_pod_waiting, WAIT_S, "the new server pod Running and asked by tessera", interval=0.5)
    time.sleep(2)
    new = core.read_namespaced_pod(new.metadata.name, namespace)
    assert not is_ready(new) and vllm.listed(namespace, new.metadata.name) == []

    vllm.release()
    wait_for(lambda: is_ready(core.read_namespaced_pod(new.metadata.name, namespace)), WAIT_S, "the new pod Ready",
             interval=0.5)
    assert_loaded(vllm, core.read_namespaced_pod(new.metadata.name, namespace), adapters)


def test_a_pod_that_replaces_a_server_pod_is_loaded_before_it_is_ready(run_operator, core, custom, kubectl, vllm):
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    deployment, adapters = next(iter(placed().items()))
    (old,) = server_pods(core, operator.namespace, deployment)
    vllm.hold_new = True  # the new pod's server is not up at first
    core.delete_namespaced_pod(old.metadata.name, operator.namespace)
    assert_a_new_pod_is_loaded_before_it_is_ready(core, vllm, operator.namespace, deployment, adapters,
                                                  {old.metadata.name})


def test_a_pod_added_by_a_scale_up_is_loaded_before_it_is_ready(run_operator, core, custom, kubectl, vllm):
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    deployment, adapters = next(iter(placed().items()))
    (first,) = server_pods(core, operator.namespace, deployment)
    vllm.hold_new = True
    kubectl("scale", "deployment", deployment, "-n", operator.namespace, "--replicas=2")
    assert_a_new_pod_is_loaded_before_it_is_ready(core, vllm, operator.namespace, deployment, adapters,
                                                  {first.metadata.name})
    assert is_ready(core.read_namespaced_pod(first.metadata.name, operator.namespace))  # the first kept serving


def test_an_adapter_the_server_cannot_load_is_failed_after_its_tries_and_its_pod_serves_the_others(
        run_operator, core, custom, kubectl, vllm):
    servers = placed()
    (deployment, adapters), *others = servers.items()
    broken = adapters[0]
    vllm.missing.add(f"/adapters/{broken}")  # vLLM's 404: no adapter found at the path
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    kubectl("apply", "-n", operator.namespace, "-f", str(POOL_FILE))

    def refused():
        pods = server_pods(core, operator.namespace, deployment)
        gate = condition(pods[0], naming.ADAPTERS_LOADED) if pods else None
        return pods[0] if gate is not None and gate.reason == MISSING else None
    pod = wait_for(refused, WAIT_S, "the broken adapter's pod reported missing it", interval=0.5)
    gate = condition(pod, naming.ADAPTERS_LOADED)
    assert gate.status == "False" and f"1 of {len(adapters)}" in gate.message and broken in gate.message
    assert not is_ready(pod)  # a failure short of the limit keeps the gate waiting

    pod = wait_for(partial(ready_pod, core, operator.namespace, deployment), WAIT_S, "the pod Ready without it",
                   interval=0.5)
    failures = json.loads(pod.metadata.annotations[FAILURES_ANNOTATION])
    assert failures[broken]["tries"] == DEFAULT_FAILURES and "No adapter found" in failures[broken]["error"]
    # each other adapter loaded once, the broken one tried exactly the limit's times (the next try waits 10 s)
    assert vllm.loads(operator.namespace, pod.metadata.name) == len(adapters) - 1 + DEFAULT_FAILURES
    assert sorted(vllm.listed(operator.namespace, pod.metadata.name)) == sorted(a for a in adapters if a != broken)
    assert condition(pod, naming.ADAPTERS_LOADED).reason == SOME_FAILED

    message = wait_for(partial(load_failed, custom, operator.namespace), WAIT_S,
                       "the pool Degraded AdapterLoadFailed", interval=0.5)["message"]
    assert f"{broken} on {deployment}: Loading lora {broken} failed: No adapter found for /adapters/{broken}" in message
    assert_others_loaded(vllm, core, operator.namespace, others)


def test_an_adapter_whose_files_do_not_match_its_digest_is_failed_never_loaded_and_the_others_load(
        run_operator, core, custom, kubectl, vllm, weights):
    """The files reach the pods only through tessera's fetcher (the stand-in finds an adapter only where it put
    them: without the fetch every load is refused); one whose files at its uri do not match its digest is never
    handed to vLLM, is failed after its tries with the fetcher's error, and the rest load."""
    document = yaml.safe_load(POOL_FILE.read_text())
    servers = placed()
    (deployment, adapters), *others = servers.items()
    tampered = adapters[0]
    entry = next(a for a in document["spec"]["adapters"] if a["name"] == tampered)
    entry["weights"]["uri"] += "-tampered"  # its digest kept: the files there are not the ones it pins
    weights.s3.put(entry["weights"]["uri"], {**adapter_files(tampered), "adapter_model.safetensors": b"other"})
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=yaml.safe_dump(document))

    pod = wait_for(partial(ready_pod, core, operator.namespace, deployment), WAIT_S, "the pod Ready without it",
                   interval=0.5)
    failures = json.loads(pod.metadata.annotations[FAILURES_ANNOTATION])
    assert failures[tampered]["tries"] == DEFAULT_FAILURES
    assert f"digest mismatch for {entry['weights']['uri']}" in failures[tampered]["error"]
    assert vllm.loads(operator.namespace, pod.metadata.name) == len(adapters) - 1  # never asked to load it
    assert sorted(vllm.listed(operator.namespace, pod.metadata.name)) == sorted(a for a in adapters if a != tampered)
    assert not (weights.folder / tampered).exists()  # the mismatching copy never reached /adapters
    for adapter in adapters[1:]:  # the others' files as fetched and checked
        assert (weights.folder / adapter / "adapter_config.json").read_bytes() == adapter_files(adapter)[
            "adapter_config.json"]

    message = wait_for(partial(load_failed, custom, operator.namespace), WAIT_S,
                       "the pool Degraded AdapterLoadFailed", interval=0.5)["message"]
    assert f"{tampered} on {deployment}: fetching its files: digest mismatch" in message
    assert_others_loaded(vllm, core, operator.namespace, others)
