"""AdapterPool server pods' loads and readiness gates, decided without a cluster (operator/reconcile/adapter_loading.py).

Pods are plain objects as the API server returns them; what their servers
list is given as `Listed`, as the reconcile reads it from `GET /v1/models`.
"""

from __future__ import annotations

from tessera.operator import naming
from tessera.operator.reconcile.actions import LoadAdapter
from tessera.operator.reconcile.adapter_loading import (LOAD_RETRY_S, LOADED, MISSING, NOT_ANSWERING, Listed,
                                                        decide_loads, decide_readiness, loaded_value,
                                                        loading_requeue, placed_adapters, server_url, serving)
from tessera.operator.reconcile.adapter_pool_decide import planned_servers
from tessera.operator.settings import OperatorSettings

from .test_adapter_pool_decide import adapter_pool, decided, gpu_pool

NOW = "2026-12-04T01:00:00Z"
EARLIER = "2026-12-04T00:00:00Z"
SERVER = ("shop", "support-server-0")
PLACED = {SERVER: ("billing", "returns", "shipping")}
URL = "http://10.244.0.7:8000"


def pod(name: str = "support-server-0-abc", gate: dict | None = None, annotations: dict | None = None,
        phase: str = "Running", ip: str | None = "10.244.0.7", deleting: bool = False, deployment: str = SERVER[1]):
    metadata = {"name": name, "namespace": "shop", "uid": f"uid-{name}", "labels": {"tessera.ai/deployment": deployment},
                "annotations": annotations or {}}
    if deleting:
        metadata["deletionTimestamp"] = NOW
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}, *([gate] if gate else [])]}
    if ip:
        status["podIP"] = ip
    return {"metadata": metadata, "status": status}


def listing(*names: str, of=None) -> dict[str, Listed]:
    return {(of or pod())["metadata"]["uid"]: Listed(URL, adapters=frozenset(names))}


def gate(status: str, reason: str, message: str, since: str = EARLIER) -> dict:
    return {"type": naming.ADAPTERS_LOADED, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


ALL_LISTED = gate("True", LOADED, "the server lists all 3 adapters placed on it")


def test_a_running_pod_gets_a_load_for_each_placed_adapter_its_server_does_not_list():
    loads = decide_loads([pod()], PLACED, listing("returns"))
    assert [(load.url, load.adapter, load.path) for load in loads] == [
        (URL, "billing", "/adapters/billing"), (URL, "shipping", "/adapters/shipping")]


def test_a_server_that_lists_every_placed_adapter_gets_no_load():
    assert decide_loads([pod()], PLACED, listing("billing", "returns", "shipping", "extra")) == []


def test_only_a_running_pod_with_an_ip_that_is_not_being_deleted_is_asked():
    assert serving(pod())
    assert not serving(pod(phase="Pending"))
    assert not serving(pod(ip=None))
    assert not serving(pod(deleting=True))


def gate_of(patch) -> dict:
    (condition,) = patch.patch["status"]["conditions"]
    return condition


def test_a_server_that_does_not_answer_gets_no_load_and_its_gate_says_so():
    listed = {pod()["metadata"]["uid"]: Listed(URL, error="connection refused")}
    assert decide_loads([pod()], PLACED, listed) == []
    (patch,) = decide_readiness([pod()], PLACED, listed, NOW)
    assert (gate_of(patch)["status"], gate_of(patch)["reason"]) == ("False", NOT_ANSWERING)
    assert "connection refused" in gate_of(patch)["message"]
    assert "metadata" not in patch.patch  # what it holds is unknown: the annotation stays


def test_the_gate_is_true_only_when_the_server_lists_every_placed_adapter():
    (missing,) = decide_readiness([pod()], PLACED, listing("billing", "returns"), NOW)
    assert (gate_of(missing)["status"], gate_of(missing)["reason"]) == ("False", MISSING)
    assert "shipping" in gate_of(missing)["message"]
    (loaded,) = decide_readiness([pod()], PLACED, listing("billing", "returns", "shipping"), NOW)
    assert gate_of(loaded) == {**ALL_LISTED, "lastTransitionTime": NOW}
    assert (loaded.namespace, loaded.name) == ("shop", "support-server-0-abc")


def test_the_gate_and_the_annotation_go_in_one_patch_of_the_status_subresource():
    (patch,) = decide_readiness([pod()], PLACED, listing("billing", "returns", "shipping"), NOW)
    assert patch.patch == {"status": {"conditions": [{**ALL_LISTED, "lastTransitionTime": NOW}]},
                           "metadata": {"annotations": {naming.LOADED_ADAPTERS: loaded_value(list(PLACED[SERVER]))}}}


def test_a_gate_and_annotation_that_already_say_what_the_server_lists_are_not_written_again():
    settled = pod(gate=ALL_LISTED,
                  annotations={naming.LOADED_ADAPTERS: loaded_value(["billing", "returns", "shipping"])})
    assert decide_readiness([settled], PLACED, listing("billing", "returns", "shipping", of=settled), NOW) == []


def test_a_restarted_server_that_lists_none_turns_the_gate_false_from_now():
    restarted = pod(gate=ALL_LISTED)
    (patch,) = decide_readiness([restarted], PLACED, listing(of=restarted), NOW)
    assert (gate_of(patch)["status"], gate_of(patch)["lastTransitionTime"]) == ("False", NOW)
    assert patch.patch["metadata"] == {"annotations": {naming.LOADED_ADAPTERS: loaded_value([])}}


def test_a_changed_message_keeps_the_time_the_gate_last_changed_status():
    loading = pod(gate=gate("False", MISSING, "3 of 3 placed adapters not listed by the server: ..."))
    (patch,) = decide_readiness([loading], PLACED, listing("billing", of=loading), NOW)
    assert (gate_of(patch)["status"], gate_of(patch)["lastTransitionTime"]) == ("False", EARLIER)


def test_the_annotation_counts_and_digests_the_placed_adapters_the_server_lists_in_any_order():
    assert loaded_value(["returns", "billing"]) == loaded_value(["billing", "returns"])
    assert loaded_value(["billing", "returns"]).startswith("2:")
    assert loaded_value(["billing"]) != loaded_value(["returns"])
    (patch,) = decide_readiness([pod()], PLACED, listing("returns", "billing", "not-placed"), NOW)
    assert patch.patch["metadata"] == {"annotations": {naming.LOADED_ADAPTERS: loaded_value(["billing", "returns"])}}


def test_a_pod_of_no_placed_server_is_left_alone():
    stray = pod(deployment="support-server-9")
    assert decide_loads([stray], PLACED, listing(of=stray)) == []
    assert decide_readiness([stray], PLACED, listing(of=stray), NOW) == []


def test_a_pod_whose_server_does_not_list_its_adapters_yet_is_looked_at_again_after_the_retry_delay():
    assert loading_requeue([pod()], PLACED, listing("billing")) == LOAD_RETRY_S
    assert loading_requeue([pod()], PLACED, {pod()["metadata"]["uid"]: Listed(URL, error="refused")}) == LOAD_RETRY_S
    assert loading_requeue([pod()], PLACED, listing("billing", "returns", "shipping")) is None


def test_the_server_url_is_the_pods_ip_and_server_port_unless_the_template_points_elsewhere():
    settings = OperatorSettings()
    assert server_url(settings.adapter_server_url, pod(), settings.server_port) == "http://10.244.0.7:8000"
    assert server_url("http://127.0.0.1:4000/{namespace}/{pod}", pod(), 8000) == \
        "http://127.0.0.1:4000/shop/support-server-0-abc"


def test_each_placed_servers_adapters_are_those_of_its_deployment_in_the_placement():
    obj, pool = adapter_pool(), gpu_pool()
    servers = decided(obj, pool)
    placed = placed_adapters([servers])
    deployments = [body["metadata"]["name"] for body, _ in planned_servers(pool, servers, OperatorSettings(), set(), {})]
    assert list(placed) == [("shop", name) for name in deployments]
    assert list(placed.values()) == [tuple(s.adapters) for s in servers.placement.servers]


def test_server_pods_are_ready_only_through_the_adapters_loaded_readiness_gate():
    obj, pool = adapter_pool(), gpu_pool()
    for body, _ in planned_servers(pool, decided(obj, pool), OperatorSettings(), set(), {}):
        assert body["spec"]["template"]["spec"]["readinessGates"] == [{"conditionType": "tessera.ai/adapters-loaded"}]


def test_loads_name_the_pod_and_why():
    (load, *_) = decide_loads([pod()], PLACED, listing())
    assert isinstance(load, LoadAdapter) and load.pod == "shop/support-server-0-abc" and "not listed" in load.reason
