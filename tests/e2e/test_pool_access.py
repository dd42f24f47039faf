"""Who may use a GPU pool, on the test cluster (issue 29 item 3): --pool-namespaces POOL=SELECTOR.

The selector is evaluated by the API server (it lists the namespaces that match), so this is where the
rule is shown: a system in a namespace the selector does not match is Invalid, PoolNotAllowed, and
nothing of it is created; once an admin labels the namespace, the next resync plans and deploys it.
"""

from __future__ import annotations

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import H100, children, condition, system_yaml, systems, wait_ready

TENANT_LABEL = "tessera.test/gpu-tenant"
READY_TIMEOUT_S = 180


def test_a_system_outside_the_pools_namespaces_is_invalid_and_runs_nothing_until_its_namespace_is_admitted(
        run_operator, core, custom, api_client, kubectl):
    operator = run_operator(nodes=1)
    operator.extra_args = ["--pool-namespaces", f"{H100}={TENANT_LABEL}=true"]
    operator.start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("outsider"))

    def refused():
        found = condition(systems(custom, namespace).get("outsider", {}), "Invalid")
        return found if found and found["status"] == "True" else None
    invalid = wait_for(refused, 120, "the system Invalid")
    assert invalid["reason"] == "PoolNotAllowed"
    assert repr(namespace) in invalid["message"] and f"{TENANT_LABEL}=true" in invalid["message"]
    deployments, services = children(api_client, namespace)
    assert deployments == [] and services == [], "nothing of a refused system is created"
    kubectl("label", "namespace", namespace, f"{TENANT_LABEL}=true")
    wait_ready(custom, namespace, ["outsider"], READY_TIMEOUT_S, operator)
    assert children(api_client, namespace)[0], "admitted: its servers deployed"
