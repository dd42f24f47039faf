"""A changed AdapterPool is re-placed with few moves, end to end: its servers keep running and keep their adapters.

The operator runs as a subprocess against the test cluster, the vLLM
stand-in answering for each fake pod (test_adapter_loading.py's fixtures and
steps). Which server holds an adapter is what the stand-in says each pod
registered, before and after the edit, not what tessera records (its
placement ConfigMap); whether a server restarted is what the API server
says of its Deployment (its generation) and its pod (the same one, of the
same pod-template hash). The edit is found by the placement itself: ~10%
of the adapters 10% hotter, such that a fresh placement of the edited pool
(what the operator did before re-placement) would move many of them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import yaml
from kubernetes import client

from cluster.kube import wait_for
from tessera.operator.api.adapter_pools import read_adapter_pool
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.reconcile.adapter_pool_decide import choose_placement, moves_between, within
from tessera.planner.placement import Placement, PlacementProblem, place

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .test_adapter_loading import server_pods, start_ready_pool
from .test_adapter_pools import POOL, POOL_FILE, adapter_pool

WAIT_S = 60
GPUS = 8
"""The one node's GPUs: the operator places the pool within them (test_adapter_pools.py)."""
MOST_MOVED = 3
"""Of the pool's 60 adapters, the most the edit may move: 5% (docs/adapter-placement.md)."""
FRESH_MOVES_AT_LEAST = 10
"""The edit chosen is one a fresh placement answers by moving at least this many adapters."""


def problem_of(document: dict) -> PlacementProblem:
    """The operator's own problem of a pool document (read_adapter_pool, within the node's GPUs)."""
    named = {**document, "metadata": {"name": POOL, "namespace": "any", "uid": "u", "generation": 1}}
    problem = read_adapter_pool(named).problem
    assert problem is not None
    return within(problem, GPUS)


def servers_by_name(placement: Placement) -> dict[str, list[str]]:
    return {child_name(POOL, "server", str(s.index)): list(s.adapters) for s in placement.servers}


def hotter(document: dict, names: set[str], factor: float = 1.1) -> dict:
    adapters = [{**a, "expectedRequestsPerSecond": round(a["expectedRequestsPerSecond"] * factor, 6)}
                if a["name"] in names else a for a in document["spec"]["adapters"]]
    return {**document, "spec": {**document["spec"], "adapters": adapters}}


def rate_changes(document: dict) -> Iterator[dict]:
    """The pool with a tenth of its adapters 10% hotter, a different tenth each."""
    names = [a["name"] for a in document["spec"]["adapters"]]
    for seed in range(50):
        yield hotter(document, set(random.Random(seed).sample(names, len(names) // 10)))


def a_rate_change_a_fresh_placement_answers_with_many_moves(document: dict) -> dict:
    before = place(problem_of(document), "tessera")
    for edited in rate_changes(document):
        if len(moves_between(before, place(problem_of(edited), "tessera"), True).moved) >= FRESH_MOVES_AT_LEAST:
            return edited
    raise AssertionError("no 10% rate change makes a fresh placement move many adapters: pick another edit")


def operator_placement(document: dict, previous: Placement) -> dict[str, list[str]]:
    """Each server Deployment's adapters as the operator places the edited pool against the one applied."""
    return servers_by_name(choose_placement(problem_of(document), previous).placement)


def holding(core, vllm, namespace: str) -> dict[str, tuple[str, str]] | None:
    """Adapter -> (the server Deployment, the uid of its one pod) that registered it, once every server has exactly
    one pod and no adapter is registered on two servers; else None."""
    apps = client.AppsV1Api(core.api_client)
    found: dict[str, tuple[str, str]] = {}
    for deployment in apps.list_namespaced_deployment(namespace, label_selector=f"tessera.ai/pool={POOL}").items:
        pods = server_pods(core, namespace, deployment.metadata.name)
        if len(pods) != 1:
            return None
        for adapter in vllm.listed(namespace, pods[0].metadata.name):
            if adapter in found:
                return None
            found[adapter] = (deployment.metadata.name, pods[0].metadata.uid)
    return found


def rolled_out(core, namespace: str) -> bool:
    apps = client.AppsV1Api(core.api_client)
    return all(d.status.observed_generation == d.metadata.generation and d.status.updated_replicas == 1
               and d.status.available_replicas == 1 and (d.status.replicas or 0) == 1
               for d in apps.list_namespaced_deployment(namespace, label_selector=f"tessera.ai/pool={POOL}").items)


def server_states(core, namespace: str) -> dict[str, tuple[int, str, str]]:
    """Each server Deployment's (generation, its pod's pod-template hash, its pod's uid)."""
    apps = client.AppsV1Api(core.api_client)
    states = {}
    for deployment in apps.list_namespaced_deployment(namespace, label_selector=f"tessera.ai/pool={POOL}").items:
        (pod,) = server_pods(core, namespace, deployment.metadata.name)
        states[deployment.metadata.name] = (deployment.metadata.generation, pod.metadata.labels["pod-template-hash"],
                                            pod.metadata.uid)
    return states


def test_a_10_percent_rate_change_moves_few_adapters_and_restarts_no_server(
        run_operator, core, custom, kubectl, vllm):
    """The operator is killed and started again before the edit: the placement in force is read back from the
    cluster, not remembered."""
    operator = start_ready_pool(run_operator, vllm, kubectl, custom)
    namespace = operator.namespace
    document = yaml.safe_load(POOL_FILE.read_text())
    first = place(problem_of(document), "tessera")
    before = wait_for(lambda: holding(core, vllm, namespace), WAIT_S, "every server lists its adapters")
    assert len(before) == len(document["spec"]["adapters"])
    states = server_states(core, namespace)
    edited = a_rate_change_a_fresh_placement_answers_with_many_moves(document)
    expected = operator_placement(edited, first)
    wanted = {a: d for d, names in expected.items() for a in names}
    operator.kill()
    operator.start()
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(edited))

    def settled():
        """The edit reconciled, every server rolled out, and each adapter on exactly one server: whatever the
        operator placed (a fresh placement settles too, so this test fails on its moves, not on a timeout)."""
        found = adapter_pool(custom, namespace) or {}
        status = found.get("status") or {}
        if status.get("observedGeneration") != found["metadata"]["generation"] or not rolled_out(core, namespace):
            return None
        held = holding(core, vllm, namespace)
        return (held, status) if held is not None and held.keys() == before.keys() else None
    after, status = wait_for(settled, WAIT_S, "every adapter on one server after the edit", interval=0.5)

    moved = sorted(a for a in after if before.get(a) != after[a])  # on another server, or on a new pod of its own
    assert 0 < len(moved) <= MOST_MOVED, moved  # a running server took it, without a restart
    assert {a: deployment for a, (deployment, _) in after.items()} == wanted  # the operator's, as computed here
    last = status["plan"].get("lastReplacement") or {"adaptersMoved": 0, "serversRestarted": 0}  # none: nothing moved
    assert (last["adaptersMoved"], last["serversRestarted"]) == (len(moved), 0)
    kept = {name: state for name, state in server_states(core, namespace).items() if name in states}
    assert kept == states  # every server runs on: same generation, pod-template hash and pod
