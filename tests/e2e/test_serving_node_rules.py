"""The rules of a serving node's change on the test cluster (issue 28 items 2 and 8), each short.

The scene is tests/e2e/test_serving_node_change.py's: `riser` serves 200
requests/s from one instance of a one-GPU node; its demand rises to 12,000,
which needs a new layout on that node (and, where the pool has one, a second
node). Each test changes one thing of it and reads what the rule promises:
a pod tessera does not own on the serving node's GPUs (never cordoned, never
re-partitioned), an approval-only maintenance rule (held until the admin's
annotation names the config), a pool with no other node under
`--without-replacement change` (the node changes anyway, with the replicas
lost stated in status and a Warning Event, and serves again), and two
systems whose two serving nodes both need a new layout (one at a time, by
--max-changing-nodes' default).

Why a cordon or a relabel seen here is tessera's doing and the stand-in's
allocatable counts make availability mean something: the docstring of
test_serving_node_change.py. The nodes are sampled every 0.3 s from before
the demand rises, so a cordon lifted within a second is still seen.
"""

from __future__ import annotations

import re

from kubernetes import client

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import MANAGED, condition, pinned_node, system_yaml, systems, wait_ready
from .test_serving_node_change import Sampler, no_task_below_its_capacity_in_force

READY_TIMEOUT_S = 120
APPROVE = "tessera.ai/approve-mig-config"


def riser_serving(operator, api_client, custom, kubectl) -> tuple[str, Sampler]:
    """`riser` Ready at 200 requests/s; its serving node, and a sampler started on the pool's nodes."""
    operator.start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("riser", demandRequestsPerSecond=200))
    wait_ready(custom, namespace, ["riser"], READY_TIMEOUT_S, operator)
    (serving,) = {pinned_node(d) for d in servers(api_client, namespace)}
    sampler = Sampler(api_client, namespace, operator.pool.nodes)
    sampler.start()
    return serving, sampler


def rise(kubectl, namespace: str) -> None:
    kubectl("patch", "compoundinferencesystem", "riser", "-n", namespace, "--type", "merge",
            "-p", '{"spec": {"demandRequestsPerSecond": 12000}}')


def servers(api_client, namespace: str) -> list:
    return [d for d in client.AppsV1Api(api_client).list_namespaced_deployment(namespace, label_selector=MANAGED).items
            if d.metadata.labels.get("tessera.ai/component") == "model-server"]


def mig_reason(custom, namespace: str) -> tuple[str | None, str]:
    found = condition(systems(custom, namespace)["riser"], "MigLayoutApplied") or {}
    return found.get("reason"), found.get("message", "")


def available_on(api_client, namespace: str, node: str) -> bool:
    return any(pinned_node(d) == node and (d.status.available_replicas or 0) > 0
               for d in servers(api_client, namespace))


def two_more_reconciles(operator) -> None:
    reconciles = operator.metric("tessera_reconciles_total")
    wait_for(lambda: operator.metric("tessera_reconciles_total") >= reconciles + 2, 60, "two reconciles more")


def untouched(sampler: Sampler, node: str) -> None:
    """The node was never cordoned and its MIG config never changed, at any sample."""
    first = sampler.samples[0][2][node][2]
    touched = [(round(at - sampler.samples[0][0], 1), nodes[node]) for at, _, nodes in sampler.samples
               if nodes[node][0] or nodes[node][1] is not None or nodes[node][2] != first]
    assert not touched, f"{node} was cordoned or relabelled (s, (unschedulable, tessera's record, config)): {touched}"


def test_a_serving_node_where_a_pod_tessera_does_not_own_holds_a_gpu_is_never_touched(
        run_operator, api_client, core, custom, kubectl):
    """A pod that is not tessera's holds a GPU of the serving node (bound there by name, as a pod another
    scheduler placed: the node's only MIG instance is riser's); the rise then needs the node's layout changed.
    Everything else of the change goes ahead (the free node's replicas are available, which is when the node
    would be cordoned), but the node is never cordoned nor relabelled, and the system reads
    MigLayoutApplied=False `NodeInUse`, naming the pod. (With the foreign-pod rule of serving_nodes.py removed,
    tessera goes on with the node's change and no NodeInUse comes: this test fails at its first wait.)"""
    operator = run_operator(nodes=2, gpus_per_node=1, resync_s=3.0)
    serving, sampler = riser_serving(operator, api_client, custom, kubectl)
    (free,) = set(operator.pool.nodes) - {serving}
    namespace = operator.namespace
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "someone-elses"},
        "spec": {"nodeName": serving, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "main", "image": "example.com/theirs:1",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    wait_for(lambda: core.read_namespaced_pod("someone-elses", namespace).status.phase == "Running", 60,
             "the foreign pod running on the serving node")
    try:
        rise(kubectl, namespace)
        wait_for(lambda: mig_reason(custom, namespace)[0] == "NodeInUse" and available_on(api_client, namespace, free),
                 READY_TIMEOUT_S, "NodeInUse, with the free node's replicas available")
        two_more_reconciles(operator)
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
    untouched(sampler, serving)
    reason, message = mig_reason(custom, namespace)
    assert reason == "NodeInUse" and f"{namespace}/someone-elses" in message and serving in message, message


def test_with_an_approval_only_maintenance_rule_a_serving_node_waits_for_the_admins_approval_of_its_config(
        run_operator, api_client, core, custom, kubectl):
    """`--maintenance-window never`: the rise's change of the serving node waits, named in status
    (`NodeChangeHeld`, with the approving command), while the free node changes at once (it serves nothing);
    the node is neither cordoned nor relabelled until the admin annotates it with the waiting config, and then
    changes and serves again. (With the rule's check removed from NodeHold.waits the node changes at once and
    no NodeChangeHeld comes: this test fails at its first wait.)"""
    operator = run_operator(nodes=2, gpus_per_node=1, resync_s=3.0)
    operator.extra_args = ["--maintenance-window", "never", "--without-replacement", "wait"]
    serving, sampler = riser_serving(operator, api_client, custom, kubectl)
    (free,) = set(operator.pool.nodes) - {serving}
    namespace = operator.namespace
    try:
        rise(kubectl, namespace)
        wait_for(lambda: mig_reason(custom, namespace)[0] == "NodeChangeHeld" and available_on(api_client, namespace,
                                                                                              free),
                 READY_TIMEOUT_S, "NodeChangeHeld, with the free node's replicas available")
        two_more_reconciles(operator)
        untouched(sampler, serving)
        _, message = mig_reason(custom, namespace)
        approval = re.search(rf"kubectl annotate node {re.escape(serving)} {re.escape(APPROVE)}=([\w.-]+)\)", message)
        assert approval and "no maintenance window" in message, message

        core.patch_node(serving, {"metadata": {"annotations": {APPROVE: approval.group(1)}}})
        before = sampler.samples[0][2][serving][2]
        wait_for(lambda: sampler.samples[-1][2][serving][2] == approval.group(1) and not sampler.samples[-1][2][
            serving][0] and available_on(api_client, namespace, serving), READY_TIMEOUT_S,
            "the approved config applied and the node serving again")
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
    assert before != approval.group(1)
    assert sampler.first(lambda _, nodes: nodes[serving][1] is not None) is not None, "tessera never cordoned it"
    assert no_task_below_its_capacity_in_force(sampler.samples)


def test_without_replacement_change_re_partitions_the_only_node_and_states_the_loss(
        run_operator, api_client, core, custom, kubectl):
    """A one-node pool: nothing can carry `riser` while its node changes (one GPU serves about 9,400 of the
    12,000 requests/s, with 1g.10gb x6 + 1g.20gb where 200 requests/s had one 1g.20gb). With
    `--without-replacement change` (the default) the node is cordoned anyway, its Deployments scaled to zero,
    and it serves again with its new layout; while it changes the status states the replicas lost (MigLayoutApplied=False, the cordon's loss)
    and a Warning Event says it. (With the change's reason left at NodeDraining, a Normal Event, this test fails
    at its first wait; with `--without-replacement wait` the node never changes and it fails there too.)"""
    operator = run_operator(nodes=1, gpus_per_node=1, resync_s=3.0)
    serving, sampler = riser_serving(operator, api_client, custom, kubectl)
    namespace = operator.namespace
    stated: list[str] = []

    def changing() -> bool:
        reason, message = mig_reason(custom, namespace)
        if reason == "NodeChangedWithoutReplacement":
            stated.append(message)
        return bool(stated)
    try:
        rise(kubectl, namespace)
        wait_for(changing, READY_TIMEOUT_S, "the change without replacement stated", interval=0.3)
        before = sampler.samples[0][2][serving][2]
        wait_for(lambda: sampler.samples[-1][2][serving][2] != before and not sampler.samples[-1][2][serving][0]
                 and available_on(api_client, namespace, serving), READY_TIMEOUT_S,
                 "the node relabelled, its cordon lifted and serving again")
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
    assert "riser/image-classification loses 1 replica(s) until the node serves again" in stated[0], stated[0]
    cordoned = sampler.first(lambda _, nodes: nodes[serving][1] is not None)
    assert cordoned is not None, "tessera never cordoned the node"
    events = [e.message for e in core.list_namespaced_event(namespace).items
              if e.reason == "NodeChangedWithoutReplacement" and e.type == "Warning"
              and e.involved_object.name == "riser"]
    assert events and "loses 1 replica(s)" in events[0], events


def test_at_most_one_serving_node_of_a_pool_changes_at_once_by_default(run_operator, api_client, custom, kubectl):
    """`a` and `b` serve 200 requests/s each from one instance, each on its own node of a four-node pool; both
    rise to 15,000 at once, which needs both serving nodes re-partitioned (7g.80gb each) besides the two free
    nodes (which carry part of each, so both have replacement capacity and may change once those are
    available). With --max-changing-nodes 1 (the default) they change one after the other: sampled every
    0.3 s, tessera's cordon is never on both at once, and both are cordoned in turn. (With the rule's check
    removed from serving_nodes._verdict both are cordoned together, 11 s after the rise: this test fails at
    `overlap`.)"""
    operator = run_operator(nodes=4, gpus_per_node=1, resync_s=3.0).start()
    namespace = operator.namespace
    for name in ("a", "b"):
        kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml(name, demandRequestsPerSecond=200))
        wait_ready(custom, namespace, [name], READY_TIMEOUT_S, operator)
    nodes = {d.metadata.labels["tessera.ai/system"]: pinned_node(d) for d in servers(api_client, namespace)}
    assert len(set(nodes.values())) == 2, f"the check needs a and b on two nodes: {nodes}"
    sampler = Sampler(api_client, namespace, operator.pool.nodes)
    sampler.start()
    try:
        kubectl("apply", "-n", namespace, "-f", "-",
                input="---\n".join(system_yaml(n, demandRequestsPerSecond=15000) for n in ("a", "b")))

        def both_changed_and_serving() -> bool:
            _, _, now = sampler.samples[-1]
            start = sampler.samples[0][2]
            return all(now[node][2] != start[node][2] and not now[node][0] and available_on(api_client, namespace, node)
                       for node in nodes.values())
        wait_for(both_changed_and_serving, 2 * READY_TIMEOUT_S, "both serving nodes changed and serving again")
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
    cordoned = [(round(at - sampler.samples[0][0], 1), sorted(n for n, (_, mark, _) in nodes_now.items() if mark))
                for at, _, nodes_now in sampler.samples]
    overlap = [(at, marked) for at, marked in cordoned if len(marked) > 1]
    assert not overlap, f"two serving nodes changed at once (s, tessera-cordoned nodes): {overlap}"
    assert {n for _, marked in cordoned for n in marked} == set(nodes.values()), cordoned
