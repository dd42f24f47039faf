"""The leader killed mid-change: the standby takes over within 30 s and finishes re-partitioning the serving node.

test_serving_node_change.py's scenario (two nodes of one GPU, `riser`'s demand
rises past what its serving node's layout carries) with two operators on one
Lease. The leader exits at a kill point inside the node's change
(operator/testhooks.py: no clean-up, its Lease held
until it expires, as a crash leaves it); the standby has only the cluster to
go on, and must take the change's remaining steps: scale the node's
Deployments to zero, relabel it, bring its new Deployments up, lift tessera's
cordon. The test first checks what the killed leader left (the node cordoned
by tessera, its config unchanged), so a change that finished before the kill
cannot pass it. Why the servers' availability means something on KWOK:
test_serving_node_change.py's docstring (the stand-in allocates MIG instances
only after a layout is applied and refuses to re-partition a node whose GPUs
pods hold). The harness's lease duration is 4 s.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from cluster.kube import wait_for
from tessera.operator.testhooks import EXIT_CODE

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import MANAGED, OperatorProcess, pinned_node, system_yaml, wait_ready
from .test_serving_node_change import (CORDONED, MIG_CONFIG, READY_TIMEOUT_S, Sampler,
                                       no_deployment_deleted_while_it_served_before_its_replacements,
                                       no_task_below_its_capacity_in_force, wait_for_change)

TAKE_OVER_S = 30
POINTS = ["after-cordon", "after-scale-to-zero"]
"""Where the node is cordoned and its change half done. after-uncordon leaves only the Deployments to apply, as
after-mig-success does; the unit tests take every resume point (tests/tessera_operator/test_serving_node_resume.py)."""


@pytest.mark.parametrize("point", POINTS)
def test_a_standby_finishes_the_serving_node_change_a_killed_leader_began(point, run_operator, api_client, custom,
                                                                           kubectl, tmp_path):
    leader = run_operator(nodes=2, gpus_per_node=1)
    leader.extra_args = ["--without-replacement", "wait"]
    leader.start(exit_at=point)
    namespace = leader.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("riser", demandRequestsPerSecond=200))
    wait_ready(custom, namespace, ["riser"], READY_TIMEOUT_S, leader)
    serving = _serving_node(api_client, namespace)
    (tmp_path / "standby").mkdir()
    standby = OperatorProcess(leader.kubeconfig, tmp_path / "standby", namespace, leader.pool,
                              leader.state_namespace, leader.resync_s, leader.extra_args)
    sampler = Sampler(api_client, namespace, leader.pool.nodes)
    try:
        standby.start()
        wait_for(lambda: "standby: Lease" in standby.log_text(), 60, "the second operator on standby")
        sampler.start()
        kubectl("patch", "compoundinferencesystem", "riser", "-n", namespace, "--type", "merge",
                "-p", '{"spec": {"demandRequestsPerSecond": 12000}}')
        assert leader.wait_exit(timeout=READY_TIMEOUT_S) == EXIT_CODE, leader.log_text()
        killed = time.monotonic()
        node = client.CoreV1Api(api_client).read_node(serving)
        assert node.spec.unschedulable and node.metadata.annotations.get(CORDONED), "killed before the cordon"
        assert node.metadata.labels.get(MIG_CONFIG) == sampler.samples[0][2][serving][2], "killed after the relabel"
        wait_for(lambda: "leading: took Lease" in standby.log_text(), TAKE_OVER_S, "the standby's take-over",
                 interval=0.2)
        print(f"kill point {point}: the standby took over {time.monotonic() - killed:.1f} s after the kill")
        found = wait_for_change(custom, namespace, standby, sampler, serving)
    finally:
        sampler.done.set()
        sampler.join(timeout=5)
        standby.stop()

    assert found["riser"]["status"]["plan"]["servedRequestsPerSecond"] == 12000
    _, _, nodes = sampler.samples[-1]
    assert nodes[serving][:2] == (False, None), "the standby lifted tessera's cordon and its record"
    log = standby.log_text()
    assert "scaled to zero" in log or point == "after-scale-to-zero", "the standby took the step after the cordon"
    assert "lift tessera's cordon" in log and f"node {serving}: asked mig-manager" in log, log
    assert no_task_below_its_capacity_in_force(sampler.samples), "also across the hand-over"
    assert no_deployment_deleted_while_it_served_before_its_replacements(sampler.samples)


def _serving_node(api_client, namespace: str) -> str:
    (serving,) = {pinned_node(d) for d in client.AppsV1Api(api_client).list_namespaced_deployment(
        namespace, label_selector=MANAGED).items if d.metadata.labels.get("tessera.ai/component") == "model-server"}
    return serving
