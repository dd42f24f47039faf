"""A stable route per adapter, decided without a cluster (operator/reconcile/adapter_routes.py).

The pool and its placement are the example's (the real placement); pods are
plain objects as the API server returns them, and what each server holds is
given as adapter_loading.held_copies returns it.
"""

from __future__ import annotations

import yaml

from tessera.operator import naming
from tessera.operator.api.adapter_pools import read_adapter_pool
from tessera.operator.reconcile.actions import ApplyChild, DeleteChild
from tessera.operator.reconcile.adapter_loading import placed_adapters
from tessera.operator.reconcile.adapter_pool_decide import deployment_name, planned_servers
from tessera.operator.reconcile.adapter_routes import (route_summaries, routed_pods, ADAPTER_LABEL, SERVICE_NAME_LABEL, SLICE_MANAGER,
                                                       SLICE_MANAGER_LABEL, decide_inference_pools, decide_routes,
                                                       hashed_name,
                                                       readable_name)
from tessera.operator.reconcile.snapshot import route_services

from .test_adapter_pool_decide import EXAMPLE, SETTINGS, decided, gpu_pool

PORT = 8000
BOTS = EXAMPLE.parent / "support-bots.yaml"
"""An example pool the placement puts on more than one server."""


def adapter_pool(**spec_changes):
    document = yaml.safe_load(BOTS.read_text())
    document["metadata"] = {"name": "support", "namespace": "shop", "uid": "uid-ap", "generation": 2}
    document["spec"].update(spec_changes)
    return read_adapter_pool(document)


def pool_servers(**spec_changes):
    return decided(adapter_pool(**spec_changes), gpu_pool())


SERVERS = pool_servers()
PLACED = placed_adapters([SERVERS])
REF = SERVERS.pool.ref
ADAPTERS = [a.name for a in SERVERS.pool.spec.adapters]


def server(index: int) -> tuple[str, dict[str, str]]:
    """Server `index`'s Deployment and its adapters' sources."""
    name = deployment_name(REF, index)
    return name, PLACED[("shop", name)]


def pod(name: str, index: int = 0, ready: bool = True, ip: str = "10.0.0.1") -> dict:
    labels = {naming.POOL_LABEL: "support", naming.DEPLOYMENT_LABEL: server(index)[0]}
    return {"metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}", "labels": labels},
            "spec": {"nodeName": "gpu-a"},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def holds_all(*pods: dict) -> dict[str, dict[str, str]]:
    """Each pod's server holds a copy of the placed source of every adapter placed on it."""
    return {p["metadata"]["uid"]: dict(PLACED[("shop", p["metadata"]["labels"][naming.DEPLOYMENT_LABEL])]) for p in pods}


def applied(actions, kind: str) -> dict[str, dict]:
    return {a.body["metadata"]["name"]: a.body for a in actions if isinstance(a, ApplyChild) and a.kind == kind}


def slice_of(actions, adapter: str) -> dict:
    return applied(actions, "EndpointSlice")[readable_name("support", adapter)]


def pods_in(body: dict) -> list[str]:
    return [e["targetRef"]["name"] for e in body["endpoints"]]


def live(actions) -> list[dict]:
    """The applied bodies as the API server returns them (with a uid)."""
    return [{**a.body, "metadata": {**a.body["metadata"], "uid": f"uid-{a.body['metadata']['name']}"}}
            for a in actions if isinstance(a, ApplyChild)]


def test_every_adapter_of_the_pool_gets_a_service_without_a_selector_named_pool_dash_adapter():
    services = applied(decide_routes([SERVERS], [], PLACED, {}, [], [], PORT), "Service")
    assert set(services) == {f"support-{a}" for a in ADAPTERS}
    body = services[f"support-{ADAPTERS[0]}"]
    assert "selector" not in body["spec"] and body["spec"]["ports"][0]["port"] == PORT
    assert body["metadata"]["labels"][ADAPTER_LABEL] == ADAPTERS[0]
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-ap"


def test_the_slice_lists_exactly_the_ready_pods_whose_server_holds_the_adapter():
    _, on_first = server(0)
    adapter = next(iter(on_first))
    holder, starting, elsewhere = pod("s0-a"), pod("s0-b", ready=False), pod("s1-a", index=1, ip="10.0.0.2")
    actions = decide_routes([SERVERS], [holder, starting, elsewhere], PLACED, holds_all(holder, starting, elsewhere),
                            [], [], PORT)
    body = slice_of(actions, adapter)
    assert pods_in(body) == ["s0-a"]
    assert body["endpoints"][0]["addresses"] == ["10.0.0.1"] and body["endpoints"][0]["conditions"]["ready"]


def test_a_pod_whose_copy_is_of_another_source_is_not_on_the_route_until_it_is_loaded_again():
    _, on_first = server(0)
    adapter = next(iter(on_first))
    holder = pod("s0-a")
    stale = {"uid-s0-a": {**on_first, adapter: "an-old-source"}}
    assert pods_in(slice_of(decide_routes([SERVERS], [holder], PLACED, stale, [], [], PORT), adapter)) == []
    assert pods_in(slice_of(decide_routes([SERVERS], [holder], PLACED, holds_all(holder), [], [], PORT),
                            adapter)) == ["s0-a"]


def test_an_adapter_no_pod_holds_has_a_route_with_an_empty_slice():
    body = slice_of(decide_routes([SERVERS], [], PLACED, {}, [], [], PORT), ADAPTERS[0])
    assert body["endpoints"] == []


def test_the_slice_belongs_to_its_service_and_to_tessera_not_to_the_endpointslice_controller():
    labels = slice_of(decide_routes([SERVERS], [], PLACED, {}, [], [], PORT), ADAPTERS[0])["metadata"]["labels"]
    assert labels[SERVICE_NAME_LABEL] == f"support-{ADAPTERS[0]}"
    assert labels[SLICE_MANAGER_LABEL] == SLICE_MANAGER != "endpointslice-controller.k8s.io"


def test_routes_that_already_say_so_are_not_written_again():
    holder = pod("s0-a")
    first = decide_routes([SERVERS], [holder], PLACED, holds_all(holder), [], [], PORT)
    written = live(first)
    services = [b for b in written if b["kind"] == "Service"]
    slices = [b for b in written if b["kind"] == "EndpointSlice"]
    assert decide_routes([SERVERS], [holder], PLACED, holds_all(holder), services, slices, PORT) == []


def test_a_re_placement_moves_the_adapter_to_the_pods_of_its_new_server():
    name, on_first = server(0)
    adapter = next(iter(on_first))
    before, after = pod("s0-a"), pod("s1-a", index=1, ip="10.0.0.2")
    moved = {**PLACED, ("shop", name): {}, ("shop", server(1)[0]): {**server(1)[1], adapter: on_first[adapter]}}
    held = {"uid-s0-a": on_first, "uid-s1-a": moved[("shop", server(1)[0])]}
    assert pods_in(slice_of(decide_routes([SERVERS], [before, after], moved, held, [], [], PORT), adapter)) == ["s1-a"]


def test_the_pods_a_routes_slice_lists_are_read_back_per_adapter_where_an_unload_waits():
    name, on_first = server(0)
    adapter = next(iter(on_first))
    holder, other = pod("s0-a"), pod("s1-a", index=1, ip="10.0.0.2")
    slices = [b for b in live(decide_routes([SERVERS], [holder, other], PLACED, holds_all(holder, other), [], [], PORT))
              if b["kind"] == "EndpointSlice"]
    routed = routed_pods(slices)
    assert ("uid-s0-a", adapter) in routed and ("uid-s1-a", adapter) not in routed
    assert {a for uid, a in routed if uid == "uid-s1-a"} == set(server(1)[1])


def test_a_name_another_service_has_makes_the_new_route_take_the_hashed_name():
    theirs = {"kind": "Service", "metadata": {"name": f"support-{ADAPTERS[0]}", "namespace": "shop", "uid": "u"}}
    services = applied(decide_routes([SERVERS], [], PLACED, {}, [theirs], [], PORT), "Service")
    assert f"support-{ADAPTERS[0]}" not in services
    assert hashed_name("support", ADAPTERS[0]) in services


def test_a_route_keeps_the_name_its_service_has():
    hashed = hashed_name("support", ADAPTERS[0])
    ours = {"kind": "Service", "metadata": {"name": hashed, "namespace": "shop", "uid": "u", "labels": {
        naming.MANAGED_BY: "tessera", naming.CHILD_KIND_LABEL: "adapter-route", naming.POOL_LABEL: "support",
        ADAPTER_LABEL: ADAPTERS[0]}}}
    services = applied(decide_routes([SERVERS], [], PLACED, {}, [ours], [], PORT), "Service")
    assert hashed in services and f"support-{ADAPTERS[0]}" not in services


def foreign_service(name: str) -> dict:
    return {"kind": "Service", "metadata": {"name": name, "namespace": "shop", "uid": f"u-{name}"}}


def test_the_pools_status_gives_its_routes_name_pattern_and_only_the_routes_named_otherwise():
    taken = [foreign_service(f"support-{ADAPTERS[0]}")]
    (summary,) = route_summaries([SERVERS], taken).values()
    assert summary.pattern == "support-{adapter}"
    assert [(e.adapter, e.service) for e in summary.exceptions] == [(ADAPTERS[0], hashed_name("support", ADAPTERS[0]))]
    assert summary.exceptions_count == 1 and summary.unrouted == 0
    services = applied(decide_routes([SERVERS], [], PLACED, {}, taken, [], PORT), "Service")
    assert all(summary.pattern.format(adapter=a) in services for a in ADAPTERS[1:])  # the pattern is what is written


def test_an_adapter_whose_both_route_names_are_taken_gets_no_route_and_the_status_says_so():
    taken = [foreign_service(f"support-{ADAPTERS[0]}"), foreign_service(hashed_name("support", ADAPTERS[0]))]
    (summary,) = route_summaries([SERVERS], taken).values()
    assert summary.unrouted == 1 and summary.unrouted_examples == [ADAPTERS[0]]
    services = applied(decide_routes([SERVERS], [], PLACED, {}, taken, [], PORT), "Service")
    assert not [b for b in services.values() if b["metadata"]["labels"][ADAPTER_LABEL] == ADAPTERS[0]]


def test_a_name_too_long_is_hashed_and_pairs_that_join_alike_get_different_names():
    long = readable_name("p" * 40, "a" * 40)
    assert len(long) == naming.MAX_NAME and long == hashed_name("p" * 40, "a" * 40)
    assert readable_name("a-b", "c") == readable_name("a", "b-c") == "a-b-c"
    assert hashed_name("a-b", "c") != hashed_name("a", "b-c")


def test_the_routes_of_adapters_no_longer_in_the_spec_are_deleted():
    written = live(decide_routes([SERVERS], [], PLACED, {}, [], [], PORT))
    fewer = pool_servers(adapters=SERVERS.pool.spec.model_dump(by_alias=True, mode="json")["adapters"][1:])
    actions = decide_routes([fewer], [], placed_adapters([fewer]), {},
                            [b for b in written if b["kind"] == "Service"],
                            [b for b in written if b["kind"] == "EndpointSlice"], PORT)
    deleted = sorted((a.child["kind"], a.child["metadata"]["name"]) for a in actions if isinstance(a, DeleteChild))
    assert deleted == [("EndpointSlice", f"support-{ADAPTERS[0]}"), ("Service", f"support-{ADAPTERS[0]}")]


def test_an_invalid_pools_routes_stay_as_they_are():
    written = live(decide_routes([SERVERS], [], PLACED, {}, [], [], PORT))
    invalid = type(SERVERS)(adapter_pool(gpuProduct=None), held=[])
    assert decide_routes([invalid], [], {}, {}, written, [], PORT) == []


PICKER = {"name": "support-picker", "port": {"number": 9002}}


def test_where_the_cluster_serves_inference_pools_a_pool_with_a_picker_gets_one_selecting_all_its_servers():
    servers = pool_servers(endpointPickerRef=PICKER)
    (action,) = decide_inference_pools([servers], True, [], PORT)
    body = action.body
    assert (body["apiVersion"], body["kind"], body["metadata"]["name"]) == (
        "inference.networking.k8s.io/v1", "InferencePool", "support")
    assert body["spec"]["endpointPickerRef"] == {"kind": "Service", "name": "support-picker", "port": {"number": 9002},
                                                 "failureMode": "FailClose"}
    assert body["spec"]["targetPorts"] == [{"number": PORT}]
    selector = body["spec"]["selector"]["matchLabels"].items()
    templates = [d["spec"]["template"]["metadata"]["labels"]
                 for d, _ in planned_servers(gpu_pool(), servers, SETTINGS, set(), {})]
    assert len(templates) > 1 and all(selector <= labels.items() for labels in templates)


def test_where_the_cluster_does_not_serve_inference_pools_none_is_written():
    assert decide_inference_pools([pool_servers(endpointPickerRef=PICKER)], False, [], PORT) == []


def test_an_inference_pool_that_already_says_so_is_not_written_again():
    servers = pool_servers(endpointPickerRef=PICKER)
    written = live(decide_inference_pools([servers], True, [], PORT))
    assert decide_inference_pools([servers], True, written, PORT) == []


def test_a_pool_that_names_no_picker_any_more_loses_its_inference_pool():
    written = live(decide_inference_pools([pool_servers(endpointPickerRef=PICKER)], True, [], PORT))
    (action,) = decide_inference_pools([SERVERS], True, written, PORT)
    assert isinstance(action, DeleteChild) and action.child["kind"] == "InferencePool"


def test_the_routes_see_tesseras_services_of_their_namespaces_from_the_children_and_the_others_from_their_listing():
    ours = live(decide_routes([SERVERS], [], PLACED, {}, [], [], PORT))
    elsewhere = {"kind": "Service", "metadata": {"name": "support-x", "namespace": "other", "uid": "u-x"}}
    deployment = {"kind": "Deployment", "metadata": {"name": "support-0", "namespace": "shop", "uid": "u-d"}}
    theirs = foreign_service("theirs")
    services = route_services([*ours, elsewhere, deployment], [theirs], ["shop"])
    assert sorted(s["metadata"]["name"] for s in services) == sorted(
        [*(b["metadata"]["name"] for b in ours if b["kind"] == "Service"), "theirs"])
    assert decide_routes([SERVERS], [], PLACED, {}, list(services), [b for b in ours if b["kind"] == "EndpointSlice"],
                         PORT) == []  # the routes already there, as one listing gives them, are kept as they are
