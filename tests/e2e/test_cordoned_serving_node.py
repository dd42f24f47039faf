"""An admin's `kubectl cordon` of a serving node (no drain) is make before break (issue 28, "The operator, part 2").

The cordoned node leaves its pool at once and the pool plans again without
it, but a cordon stops no pod: the node's servers keep serving until the
re-plan's replacements on the other node are available, and only then go.

Two one-GPU nodes; `steady` serves 200 requests/s from one replica on one of
them. Pods are sampled every 0.2 s (tests/e2e/test_quotas.py's Sampler) from
before the cordon.

KWOK makes a pod Ready the moment it is scheduled, which would leave almost no
time in which a deleted old Deployment shows (and the free node's layout
change alone is short): so the free node is tainted NoSchedule (a taint no
server tolerates) before the cordon. The re-plan's replacement pod there stays
Pending, not Ready; the old Deployment on the cordoned node must still be there
and available after three more reconciles (the old rule deleted it in the
reconcile that saw the cordon, and the system served nothing until the
replacement was up). Only then is the taint lifted, and the system must end
served from the free node alone, the old Deployment gone, the admin's cordon
never lifted, and no sample without a Ready server pod.
"""

from __future__ import annotations

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import gpu_resource, pinned_node, pods_not_running, system_yaml, wait_ready
from .test_node_churn import served_only_on, servers
from .test_quotas import Sampler, hold_new_pods

READY_TIMEOUT_S = 120


def test_an_admins_cordon_of_a_serving_node_keeps_its_servers_until_the_re_plans_replacements_are_available(
        run_operator, core, api_client, custom, kubectl, cluster):
    operator = run_operator(nodes=2, resync_s=2.0, gpus_per_node=1).start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("steady", demandRequestsPerSecond=200))
    wait_ready(custom, namespace, ["steady"], READY_TIMEOUT_S, operator)
    (old,) = servers(api_client, namespace)
    cordoned = pinned_node(old)
    (free,) = set(operator.pool.nodes) - {cordoned}
    hold_new_pods(core, [free], True)

    with Sampler(cluster.kubeconfig, namespace, gpu_resource(old), "steady") as sampler:
        kubectl("cordon", cordoned)
        pending = lambda: [p for p in core.list_namespaced_pod(namespace).items  # noqa: E731
                           if p.status.phase == "Pending"
                           and p.metadata.labels.get("tessera.ai/deployment") != old.metadata.name]
        wait_for(pending, 60, f"the re-plan's server pod, Pending on {free}")
        started = operator.metric("tessera_reconciles_total")
        wait_for(lambda: operator.metric("tessera_reconciles_total") >= started + 3, 60, "three more reconciles")
        kept = {d.metadata.name: d.status.available_replicas for d in servers(api_client, namespace)}
        assert kept.get(old.metadata.name) == old.spec.replicas, (
            f"the cordoned node's server was not kept serving while its replacement is Pending: {kept}")
        hold_new_pods(core, [free], False)
        try:
            wait_for(lambda: served_only_on(api_client, custom, operator, {free}), READY_TIMEOUT_S,
                     f"steady served in full from {free} alone, nothing pinned to {cordoned}")
        except TimeoutError:
            raise AssertionError(f"{pods_not_running(api_client, namespace)}\n{operator.log_text()[-4000:]}") from None

    assert min(s["ready"] for s in sampler.samples) >= 1, "a sample without a Ready server pod"
    assert sampler.replicas[old.metadata.name][-1] == old.spec.replicas, "deleted, never scaled down"
    assert core.read_node(cordoned).spec.unschedulable, "the admin's cordon is never lifted"
