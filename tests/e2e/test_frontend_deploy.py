"""The operator deploys a system's frontend on the real test cluster (issue 25), asserted on the objects.

KWOK runs no containers: no request reaches a pod here, so what is checked is
what tessera wrote (the frontend's ConfigMap, Deployment and Services), what
the API server and the Deployment controller made of it (the Services select
the servers' pods), and the system's status. Requests through a real
frontend process are tests/frontend's.
"""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client

from cluster.kube import wait_for

from tessera.operator.reconcile.builders import CONFIGURATION_LABEL
from tessera.operator.reconcile.frontend_children import CONFIG_KEY

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import system_yaml, systems, wait_ready

READY_TIMEOUT_S = 240


def _planned_weights(core, operator) -> dict[str, list[float]]:
    """Per task, each served configuration's planned capacity, from the operator's stored pool plan."""
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    plan = json.loads(state.data["plan"])
    return {t["task"]: [c["replicas"] * c["segment_throughput_rps"] for c in t["configs"] if c["replicas"]]
            for t in plan["tasks"]}


def _frontend(core, namespace: str, address: str) -> tuple[str, dict]:
    name = address.split(".")[0]
    return name, yaml.safe_load(core.read_namespaced_config_map(name, namespace).data[CONFIG_KEY])


def test_the_operator_deploys_the_frontend_and_a_demand_change_updates_its_routing(run_operator, core, custom,
                                                                                   api_client, kubectl):
    operator = run_operator(nodes=2).start()
    namespace = operator.namespace
    kubectl("apply", "-n", namespace, "-f", "-", input=system_yaml("served", frontend={"maxInFlight": 256}))
    wait_ready(custom, namespace, ["served"], READY_TIMEOUT_S, operator)
    address = wait_for(lambda: (systems(custom, namespace)["served"].get("status") or {}).get("frontend", {})
                       .get("address"), 30, "status.frontend.address")
    name, config = _frontend(core, namespace, address)
    assert address == f"{name}.{namespace}.svc:8080"
    assert name in kubectl("get", "cis", "served", "-n", namespace).stdout  # the Frontend printer column

    apps = client.AppsV1Api(api_client)
    frontend = apps.read_namespaced_deployment(name, namespace)
    container = frontend.spec.template.spec.containers[0]
    assert container.args[0] == "frontend" and container.image.startswith("registry.invalid/tessera/tessera")
    assert core.read_namespaced_service(name, namespace).spec.ports[0].port == 8080
    assert config["system"] == "served" and config["settings"]["maxInFlight"] == 256

    # Each configuration has its own Service, selecting that configuration's server pods; the weights are the plan's.
    weights = _planned_weights(core, operator)
    for task in config["tasks"]:
        assert [c["weight"] for c in task["configurations"]] == pytest.approx(weights[task["name"]])
        for configuration in task["configurations"]:
            service = core.read_namespaced_service(configuration["url"].removeprefix("http://").split(".")[0],
                                                   namespace)
            selector = ",".join(f"{k}={v}" for k, v in service.spec.selector.items())
            assert CONFIGURATION_LABEL in service.spec.selector
            assert core.list_namespaced_pod(namespace, label_selector=selector).items, selector

    # A plan change (more demand) rewrites the config in place; the frontend is not rolled (a hot reload), and
    # 800 req/s stays within one frontend replica (--frontend-requests-per-replica 2,000).
    generation = frontend.metadata.generation
    kubectl("apply", "-n", namespace, "-f", "-",
            input=system_yaml("served", frontend={"maxInFlight": 256}, demandRequestsPerSecond=800))
    wait_for(lambda: _planned_weights(core, operator) != weights, 120, "a re-plan for the new demand")
    replanned = _planned_weights(core, operator)
    wait_for(lambda: [[c["weight"] for c in t["configurations"]] for t in _frontend(core, namespace, address)[1]["tasks"]]
             == [pytest.approx(replanned[t["name"]]) for t in config["tasks"]], 60, "the config of the new plan")
    assert apps.read_namespaced_deployment(name, namespace).metadata.generation == generation
