"""200 adapters through the operator: Ready, a route each, kopf's annotations and the status bounded.

The operator runs as a subprocess against the test cluster and reaches each
fake pod's server at the vLLM stand-in (as in test_adapter_loading.py). The
pool is built here (tests/e2e/scale_pool.py: ranks 8-64, skewed rates, every
other name too long for `<pool>-<adapter>`); what each server must hold is
`tessera place`'s own placement of it. bench/adapter_pool_scale.py applies
2,000 of the same kind (outside the test command).

The readiness gate is not KWOK's: KWOK's default pod stage sets every gate's
condition True and Ready True by itself, which would make "Ready" here mean
nothing. The test cluster's stages (tests/cluster/kwok-stages.yaml) leave the
gate to tessera, and the test checks it: every server is held (the stand-in
does not answer, as a vLLM still loading its weights) until each pod is
Running with its IP and tessera has set its gate False, and no pod is Ready
then; with KWOK's default stage that check fails. Only after the servers
answer, and list every adapter placed on them, are the pods and the pool
Ready.

The status is bounded: nothing in it grows with the adapters but counts. It
names no adapter but the 32 routes named otherwise it lists (of 100), and
status.plan stays under scale_pool.plan_bound: a fixed part, one entry per
server, the bounded lists; no term per adapter. A status that grew with the
adapters fails it: all 100 routes named otherwise listed (the cap on the list
removed) add 10 kB, one entry per adapter of a name and its server 10 kB.
"""

from __future__ import annotations

import json
import time

import yaml
from kubernetes import client

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .scale_pool import LONG_MIDDLE, kopf_annotation_bytes, placed, plan_bound, routes, scale_pool
from .test_adapter_loading import assert_loaded, gate_open, is_ready, server_pods, waiting_for_its_server
from .test_adapter_pools import POOL, adapter_pool, wait_pool_ready

ADAPTERS = 200
GPUS = 8
RATE_RPS = 100.0
"""Enough for four servers of the one node's eight GPUs."""
KOPF_ANNOTATIONS_MOST = 16 * 1024
ROUTES_LISTED = 32
WAIT_S = 90


def test_200_adapters_reach_ready_each_with_its_route_and_kopfs_annotations_and_the_status_stay_small(
        run_operator, core, custom, kubectl, vllm, weights):
    document = scale_pool(ADAPTERS, RATE_RPS, max_servers=GPUS)
    weights.s3.upload(document)  # each adapter's files where its weights.uri says, fetched before its load
    adapters = [a["name"] for a in document["spec"]["adapters"]]
    servers = placed(document, GPUS)
    assert len(servers) >= 3 and sum(map(len, servers.values())) == ADAPTERS
    vllm.hold_new = True  # every server "still loading its weights": no answer
    operator = run_operator(nodes=1, adapter_servers=vllm).start()
    wait_for(lambda: b"reconciled" in operator.log.read_bytes(), WAIT_S, "the operator's first reconcile")
    applied = time.monotonic()
    kubectl("apply", "--server-side", "-n", operator.namespace, "-f", "-", input=yaml.safe_dump(document))

    def all_waiting():
        pods = [p for d in servers for p in server_pods(core, operator.namespace, d)]
        return pods if len(pods) == len(servers) and all(waiting_for_its_server(p) for p in pods) else None
    pods = wait_for(all_waiting, WAIT_S, "every server pod Running and asked by tessera", interval=0.5)
    waiting = time.monotonic()
    time.sleep(1)  # KWOK's stages have had their turn on the gate tessera set
    for pod in pods:
        pod = core.read_namespaced_pod(pod.metadata.name, operator.namespace)
        assert not is_ready(pod) and not gate_open(pod), pod.status.conditions

    vllm.release()
    found = wait_pool_ready(custom, operator, kubectl)
    ready = time.monotonic()
    for deployment, names in servers.items():
        (pod,) = server_pods(core, operator.namespace, deployment)
        assert_loaded(vllm, pod, names)  # gate opened once its server listed every placed adapter
    holders = {a: sorted(p.metadata.name for p in server_pods(core, operator.namespace, d))
               for d, names in servers.items() for a in names}
    discovery = client.DiscoveryV1Api(core.api_client)

    def every_route():
        services, slices = routes(core, discovery, operator.namespace, POOL)
        return services if slices == holders else None
    services = wait_for(every_route, WAIT_S, "every adapter's route listing exactly its server's pod", interval=0.5)
    routed = time.monotonic()
    assert sorted(services) == sorted(adapters)

    found = adapter_pool(custom, operator.namespace)
    kopf_bytes = kopf_annotation_bytes(found)
    status, plan = found["status"], found["status"]["plan"]
    status_bytes, plan_bytes = len(json.dumps(status)), len(json.dumps(plan))
    print(f"\n{ADAPTERS} adapters on {len(servers)} servers: apply -> Ready {ready - applied:.1f} s (every pod "
          f"Running with its server held after {waiting - applied:.1f} s, the hold 1 s, then loads, gates and "
          f"status {ready - waiting - 1:.1f} s), -> every route {routed - applied:.1f} s; kopf's annotations "
          f"{kopf_bytes} B; status {status_bytes} B (plan {plan_bytes} B, bound {plan_bound(len(servers))} B)")
    assert kopf_bytes < KOPF_ANNOTATIONS_MOST
    assert plan_bytes < plan_bound(len(servers))
    assert plan["adaptersPlaced"] == ADAPTERS and plan["serversReady"] == len(servers)
    listed = {e["adapter"]: e["service"] for e in plan["routes"]["serviceExceptions"]}
    assert plan["routes"]["serviceExceptionsCount"] == sum(1 for a in adapters if LONG_MIDDLE in a) > ROUTES_LISTED
    assert len(listed) == ROUTES_LISTED and all(services[a] == name for a, name in listed.items())
    text = json.dumps(status)
    assert {a for a in adapters if f'"{a}"' in text} == set(listed)  # no adapter named but those listed
