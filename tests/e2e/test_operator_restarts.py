"""Restart safety: an operator killed anywhere converges, once restarted, to the same children.

The operator exits (as a kill would leave things: no clean-up) at a named
kill point when TESSERA_TEST_EXIT_AT names it (operator/testhooks.py); a
test asserts that the point was reached (exit code 17), restarts the
operator without the hook, and compares what it made with a reference run
that was never killed: the same Deployments (task, MIG resource, node,
replicas, batch), Services and MIG layouts, no duplicates, no orphans,
within 60 s of the restart. Kills at random times are checked the same way.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter

import pytest
from kubernetes import client

from tessera.operator.testhooks import EXIT_CODE, KILL_POINTS

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import OperatorProcess, children, gpu_resource, pinned_node, signature, system_yaml, systems, wait_ready

SYSTEMS = {"small": {"demandRequestsPerSecond": 200}, "smaller": {"demandRequestsPerSecond": 80}}
CONVERGE_S = 60
FIRST_RUN_TIMEOUT_S = 240
POINTS = [*KILL_POINTS, "after-deployment:2"]
MIG_CONFIGMAP = "tessera-mig-parted-config"  # the one the test ClusterPolicy names


def _apply(kubectl, operator: OperatorProcess) -> list[str]:
    for name, changes in SYSTEMS.items():
        kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml(name, **changes))
    return list(SYSTEMS)


def _stray_deployment(api_client, custom, operator: OperatorProcess) -> None:
    """A child of the system that no plan wants (as an older plan leaves behind): tessera must delete it."""
    owner = systems(custom, operator.namespace)["small"]
    client.AppsV1Api(api_client).create_namespaced_deployment(operator.namespace, {
        "metadata": {"name": "small-stray", "labels": {"app.kubernetes.io/managed-by": "tessera",
                                                      "tessera.ai/system": "small", "tessera.ai/task": "x"},
                     "ownerReferences": [{"apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem",
                                          "name": "small", "uid": owner["metadata"]["uid"], "controller": True}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"stray": "yes"}},
                 "template": {"metadata": {"labels": {"stray": "yes"}},
                              "spec": {"containers": [{"name": "x", "image": "registry.invalid/x"}]}}},
    })


def _forget_mig_configs(core) -> None:
    """Earlier tests' plans wrote the same content-addressed configs: start from no ConfigMap, so this run writes it."""
    try:
        core.delete_namespaced_config_map(MIG_CONFIGMAP, "gpu-operator")
    except client.ApiException as error:
        if error.status != 404:
            raise


def _assert_converged(api_client, custom, operator: OperatorProcess, reference: dict) -> float:
    started = time.monotonic()
    wait_ready(custom, operator.namespace, list(SYSTEMS), CONVERGE_S, operator)
    deadline = started + CONVERGE_S
    while signature(api_client, operator.namespace, operator.pool) != reference and time.monotonic() < deadline:
        time.sleep(0.5)
    assert signature(api_client, operator.namespace, operator.pool) == reference
    deployments, _ = children(api_client, operator.namespace)
    identities = Counter((d.metadata.labels["tessera.ai/system"], d.metadata.labels["tessera.ai/task"],
                          pinned_node(d), gpu_resource(d), *sorted(
                              (e.name, e.value) for e in d.spec.template.spec.containers[0].env
                              if e.name in ("TESSERA_BATCH_SIZE", "TESSERA_PROCESSES", "TESSERA_VARIANT")))
                         for d in deployments)
    assert max(identities.values()) == 1, "duplicate Deployments"
    owners = {s["metadata"]["uid"] for s in systems(custom, operator.namespace).values()}
    assert all(d.metadata.owner_references[0].uid in owners for d in deployments), "orphaned Deployments"
    return time.monotonic() - started


@pytest.fixture(scope="module")
def reference(cluster, core, tmp_path_factory, kubectl, crds, mig_manager, api_client):
    """What an operator that is never killed makes of SYSTEMS on a fresh 2-node pool."""
    from .operator_harness import delete_pool, make_pool, new_namespace

    pool = make_pool(core, 2)
    operator = OperatorProcess(cluster.kubeconfig, tmp_path_factory.mktemp("reference"),
                               new_namespace(core, "ref"), pool, state_namespace=f"tessera-{pool.id}")
    try:
        operator.start()
        _apply(kubectl, operator)
        wait_ready(client.CustomObjectsApi(api_client), operator.namespace, list(SYSTEMS), FIRST_RUN_TIMEOUT_S,
                   operator)
        time.sleep(2)  # let the last Deployment status settle
        made = signature(api_client, operator.namespace, pool)
        operator.stop()  # a running reference operator would rewrite the MIG configs the tests reset
        yield made
    finally:
        operator.stop()
        core.delete_namespace(operator.namespace)
        delete_pool(core, pool)


@pytest.mark.parametrize("point", POINTS)
def test_a_restart_after_a_kill_converges_to_the_same_children(point, reference, run_operator, api_client, custom,
                                                               kubectl, core):
    operator = run_operator(nodes=2)
    _apply(kubectl, operator)
    if point == "after-stale-delete":
        _stray_deployment(api_client, custom, operator)
    if point == "after-mig-configmap":
        _forget_mig_configs(core)
    operator.start(exit_at=point)
    assert operator.wait_exit(timeout=FIRST_RUN_TIMEOUT_S) == EXIT_CODE, operator.log_text()
    operator.start()
    seconds = _assert_converged(api_client, custom, operator, reference)
    print(f"kill point {point}: converged {seconds:.1f} s after the restart")


def test_kills_at_random_times_converge_to_the_same_children(reference, run_operator, api_client, custom, kubectl):
    rng = random.Random(1107)
    operator = run_operator(nodes=2)
    _apply(kubectl, operator)
    for _ in range(4):
        operator.start()
        time.sleep(rng.uniform(2.0, 12.0))
        operator.kill()
    operator.start()
    seconds = _assert_converged(api_client, custom, operator, reference)
    print(f"random kills: converged {seconds:.1f} s after the last restart")


def _rename_to_the_older_scheme(api_client, namespace: str) -> set[str]:
    """Replace every child by the same object under the name the operator gave before `api.child_name`
    (`<system>-<task>` for Services, `<system>-<task>-<8 hex>` for Deployments): an upgrade in place."""
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    deployments, services = children(api_client, namespace)
    old_names = set()
    for kind, objects, create, delete in (
            ("Service", services, core.create_namespaced_service, core.delete_namespaced_service),
            ("Deployment", deployments, apps.create_namespaced_deployment, apps.delete_namespaced_deployment)):
        for obj in objects:
            body = api_client.sanitize_for_serialization(obj)
            labels = body["metadata"]["labels"]
            old = f"{labels['tessera.ai/system']}-{labels['tessera.ai/task']}"
            if kind == "Deployment":
                old += "-" + hashlib.sha256(obj.metadata.name.encode()).hexdigest()[:8]
                body["spec"]["selector"]["matchLabels"]["tessera.ai/deployment"] = old
                body["spec"]["template"]["metadata"]["labels"]["tessera.ai/deployment"] = old
            else:
                body["spec"].pop("clusterIP", None)
                body["spec"].pop("clusterIPs", None)
            body.pop("status", None)
            body["metadata"] = {key: body["metadata"][key] for key in ("labels", "annotations", "ownerReferences")}
            body["metadata"]["name"] = old
            create(namespace, body)
            delete(obj.metadata.name, namespace)
            old_names.add(old)
    return old_names


def test_children_under_the_older_names_are_replaced_without_orphans(reference, run_operator, api_client, custom,
                                                                    kubectl):
    operator = run_operator(nodes=2)
    _apply(kubectl, operator)
    operator.start()
    wait_ready(custom, operator.namespace, list(SYSTEMS), FIRST_RUN_TIMEOUT_S, operator)
    operator.stop()
    old_names = _rename_to_the_older_scheme(api_client, operator.namespace)

    operator.start()
    _assert_converged(api_client, custom, operator, reference)
    deployments, services = children(api_client, operator.namespace)
    assert not old_names & {o.metadata.name for o in [*deployments, *services]}
