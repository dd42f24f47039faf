"""Never delete what serves, whatever the input (issue 28 item 6), tried as a hostile tenant would, on the test cluster.

Before make before break, ten systems applied in a second namespace made the
joint re-plan delete the first namespace's servers, and a demand change from
50 to 500 deleted a system's Deployments before any replacement existed. Now
the tenant's re-plan keeps what the first namespace runs (its served fraction,
its nodes' layouts and replicas: operator/reconcile/running_decide.py), and a
replacement that needs the old server's own MIG instance follows
--without-replacement (decide.replacements_in_place).

What is read: the API server's audit log (every DELETE of a Deployment, by
anyone, and the operator's writes to the first namespace's Deployments) and
each Deployment's uid, generation and pod-template digest; for the demand
change, the Deployments sampled every 0.3 s. Both wait for the re-plan to
have completed (its plan stored, by tessera_plans_stored_total, and reported
in the systems' status) and its servers to be up, so a solve that never ends
cannot pass them. Why a Deployment's availability means something on KWOK:
tests/e2e/test_serving_node_change.py's docstring.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import (MANAGED, audit_events, audit_lines, condition, new_namespace, operator_writes,
                               server_fingerprints, system_yaml, systems, wait_ready)
from .test_serving_node_change import MIG_CONFIG, Sampler, no_task_below_its_capacity_in_force

READY_TIMEOUT_S = 240
PLANS = "tessera_plans_stored_total"
TENANTS = 10
TENANT_RPS = 6000
"""Ten of these take about ten of the pool's sixteen GPUs: the joint re-plan packs the pool around `steady`."""


def deployment_deletes(audit_log, since: int, namespace: str) -> list[dict]:
    """Every DELETE of a Deployment in `namespace` after audit line `since`, whoever sent it."""
    return [event for event in audit_events(audit_log, since)
            if event.get("verb") in ("delete", "deletecollection")
            and event["objectRef"].get("resource") == "deployments" and event["objectRef"].get("namespace") == namespace]


def planned_and_reported(custom, namespace: str, names: list[str]):
    """Every system's plan reported for its spec (observedGeneration, a Planned condition); None before."""
    found = systems(custom, namespace)
    return all(n in found and (found[n].get("status") or {}).get("observedGeneration") == found[n]["metadata"][
        "generation"] and condition(found[n], "Planned") and (found[n]["status"].get("plan") or {}) for n in names)


@pytest.fixture
def tenant(core):
    """The second namespace, the hostile tenant's."""
    name = new_namespace(core, "tenant")
    yield name
    core.delete_namespace(name)


def serving_then_tenants_applied(operator, tenant: str, kubectl, custom, api_client, tenant_rps: int, during,
                                 settled=None):
    """`steady` Ready in the operator's namespace, then the tenant's ten systems applied, their joint re-plan
    stored and reported, `settled()` (default: their servers available) and two more reconciles. `during(phase)`
    is called at "serving" (before the tenant's systems are applied) and "settled" (at the end), and its answers
    are returned."""
    operator.extra_args = ["--namespace", tenant]
    operator.start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("steady"))
    wait_ready(custom, operator.namespace, ["steady"], READY_TIMEOUT_S, operator)
    plans, seen = operator.metric(PLANS), [during("serving")]
    names = [f"grab-{i}" for i in range(TENANTS)]
    kubectl("apply", "-n", tenant, "-f", "-",
            input="---\n".join(system_yaml(n, demandRequestsPerSecond=tenant_rps) for n in names))
    wait_for(lambda: operator.metric(PLANS) > plans and planned_and_reported(custom, tenant, names),
             READY_TIMEOUT_S, "the joint re-plan stored and reported", interval=1.0)
    wait_for(settled or (lambda: servers_available(api_client, tenant)), READY_TIMEOUT_S, "the tenant settled")
    reconciles = operator.metric("tessera_reconciles_total")
    wait_for(lambda: operator.metric("tessera_reconciles_total") >= reconciles + 2, 60, "two reconciles after it")
    return [*seen, during("settled")]


def test_ten_systems_of_a_second_namespace_neither_delete_nor_roll_a_deployment_of_the_first(
        run_operator, tenant, cluster, custom, api_client, kubectl):
    operator = run_operator(nodes=2, resync_s=3.0)
    first = operator.namespace
    (before, start), (after, _) = serving_then_tenants_applied(
        operator, tenant, kubectl, custom, api_client, TENANT_RPS,
        lambda _: (server_fingerprints(api_client, first), audit_lines(cluster.audit_log)))

    assert deployment_deletes(cluster.audit_log, start, first) == []
    writes = [(w["verb"], w["objectRef"].get("name")) for w in operator_writes(cluster.audit_log, start)
              if w["objectRef"].get("resource") == "deployments" and w["objectRef"].get("namespace") == first]
    assert after == before, f"the operator's writes to them: {writes}"
    assert condition(systems(custom, first)["steady"], "Ready")["status"] == "True"


def test_ten_systems_of_a_second_namespace_on_a_one_node_pool_leave_the_first_at_its_capacity_and_say_why(
        run_operator, tenant, core, custom, api_client, kubectl):
    """The tenant's systems would need the node's MIG config changed, and with no other node `steady` would serve
    nothing while it changes: the re-plan they caused keeps the node's layout for `steady` (running_decide.py), and
    each of them reads Degraded `HeldForRunningSystems`, naming `steady`. Sampled every 0.3 s from before the
    tenant's systems are applied until two reconciles after they say so."""
    operator = run_operator(nodes=1, resync_s=3.0)
    (node,) = operator.pool.nodes
    sampler = Sampler(api_client, operator.namespace, operator.pool.nodes)
    names = [f"grab-{i}" for i in range(TENANTS)]

    def sampling(phase: str) -> str | None:
        if phase == "serving":
            sampler.start()
        else:
            sampler.done.set()
            sampler.join(timeout=5)
        return (core.read_node(node).metadata.labels or {}).get(MIG_CONFIG)

    def held_and_said() -> bool:
        found = systems(custom, tenant)
        return all((condition(found[n], "Degraded") or {}).get("reason") == "HeldForRunningSystems" for n in names)
    try:
        before, after = serving_then_tenants_applied(operator, tenant, kubectl, custom, api_client, 2000, sampling,
                                                     held_and_said)
    finally:
        sampler.done.set()
    assert no_task_below_its_capacity_in_force(sampler.samples)
    assert after == before, "the node's MIG config changed"
    assert all(cordon is False for _, _, nodes in sampler.samples for cordon, _, _ in nodes.values())
    message = condition(systems(custom, tenant)["grab-0"], "Degraded")["message"]
    assert f"{operator.namespace}/steady" in message and node in message, message
    assert condition(systems(custom, operator.namespace)["steady"], "Ready")["status"] == "True"


def model_servers(api_client, namespace: str) -> list:
    deployments = client.AppsV1Api(api_client).list_namespaced_deployment(namespace, label_selector=MANAGED).items
    return [d for d in deployments if d.metadata.labels.get("tessera.ai/component") == "model-server"]


def servers_available(api_client, namespace: str) -> bool:
    servers = model_servers(api_client, namespace)
    return bool(servers) and all((d.status.available_replicas or 0) == d.spec.replicas for d in servers)


def server_names(api_client, namespace: str) -> set[str]:
    return {d.metadata.name for d in model_servers(api_client, namespace)}


def demand_raised_on_one_node(operator, api_client, custom, kubectl, settled) -> Sampler:
    """`steady` Ready at 50 requests/s on a one-node pool, then raised to 500, sampled from before the patch until
    `settled()` holds after the plan for 500 is reported. On this node the plan for 50 runs resnet152 on the GPU's
    only instance and the plan for 500 resnet101 x2 MPS on that same instance (a new layout would re-partition
    the serving node, which the change price avoids): the replacement needs the old server's instance."""
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("steady", demandRequestsPerSecond=50))
    wait_ready(custom, namespace, ["steady"], READY_TIMEOUT_S, operator)
    sampler = Sampler(api_client, namespace, operator.pool.nodes)
    sampler.start()
    try:
        kubectl("patch", "compoundinferencesystem", "steady", "-n", namespace, "--type", "merge",
                "-p", '{"spec": {"demandRequestsPerSecond": 500}}')
        wait_for(lambda: planned_and_reported(custom, namespace, ["steady"])
                 and systems(custom, namespace)["steady"]["status"]["plan"]["demandRequestsPerSecond"] == 500,
                 READY_TIMEOUT_S, "the plan for 500 requests/s reported")
        wait_for(settled, READY_TIMEOUT_S, "settled after the plan for 500")
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
    return sampler


def test_a_demand_change_from_50_to_500_on_the_old_servers_own_instance_waits_serving_with_without_replacement_wait(
        run_operator, cluster, api_client, custom, kubectl):
    """The replacement can start only once the old server is gone: a change without replacement capacity. With
    --without-replacement wait the old server keeps serving, untouched, and the system says why."""
    operator = run_operator(nodes=1, resync_s=3.0)
    operator.extra_args = ["--without-replacement", "wait"]
    operator.start()
    namespace, start = operator.namespace, audit_lines(cluster.audit_log)

    def held_and_said() -> bool:
        ready = condition(systems(custom, namespace)["steady"], "Ready") or {}
        return ready.get("reason") == "NoReplacementCapacity"
    sampler = demand_raised_on_one_node(operator, api_client, custom, kubectl, held_and_said)
    reconciles = operator.metric("tessera_reconciles_total")
    wait_for(lambda: operator.metric("tessera_reconciles_total") >= reconciles + 2, 60, "two reconciles after it")

    assert server_names(api_client, namespace) == set(sampler.samples[0][1]), "the old server is the one that serves"
    assert deployment_deletes(cluster.audit_log, start, namespace) == []
    assert no_task_below_its_capacity_in_force(sampler.samples)
    message = condition(systems(custom, namespace)["steady"], "Ready")["message"]
    assert operator.pool.nodes[0] in message and "--without-replacement wait" in message, message


def test_a_demand_change_from_50_to_500_on_the_old_servers_own_instance_states_the_loss_with_without_replacement_change(
        run_operator, core, api_client, custom, kubectl):
    """With --without-replacement change (the default) the old server goes first, and the replicas lost until its
    replacement is available are stated: a Warning Event, from Ready=False `ReplacedInPlace`."""
    operator = run_operator(nodes=1).start()
    namespace = operator.namespace
    sampler = demand_raised_on_one_node(
        operator, api_client, custom, kubectl,
        lambda: servers_available(api_client, namespace) and not replacement_pending(custom, namespace))
    wait_ready(custom, namespace, ["steady"], READY_TIMEOUT_S, operator)

    first, last = set(sampler.samples[0][1]), server_names(api_client, namespace)
    assert first - last, f"no Deployment was replaced ({sorted(first)}): the check would be vacuous"
    stated = [e.message for e in core.list_namespaced_event(namespace).items
              if e.reason == "ReplacedInPlace" and e.type == "Warning" and e.involved_object.name == "steady"]
    assert stated and all(old in stated[0] for old in first - last) and "replica(s) serve nothing" in stated[0], stated


def replacement_pending(custom, namespace: str) -> bool:
    found = condition(systems(custom, namespace)["steady"], "Progressing") or {}
    return found.get("reason") == "ReplacementPending"
