"""AdapterPool server pods' loads and readiness gates, decided without a cluster (operator/reconcile/adapter_loading.py).

Pods are plain objects as the API server returns them; what their servers
list is given as `Listed`, as the reconcile reads it from `GET /v1/models`.
"""

from __future__ import annotations

import json

from tessera.operator import naming
from tessera.operator.reconcile.actions import LoadAdapter
from tessera.operator.reconcile.adapter_loading import (ERROR_CHARS, FAILURES_ANNOTATION, HOLDS_PREFIX, LOADED_ANNOTATION, LABELLED_MOST, LOAD_RETRY_S, SOURCES_ANNOTATION, LOADED,
                                                        MISSING, NOT_ANSWERING, RECORDED_MOST, SOME_FAILED, Failure,
                                                        Listed, Retry, decide_loads, decide_readiness, held_copies,
                                                        failures_value, loaded_value, loading_requeue,
                                                        placed_adapters, record_failures, server_loads, server_url,
                                                        serving, decide_unloads, unplaced_listed)
from tessera.operator.reconcile.adapter_pool_decide import ServerLoad, planned_servers
from tessera.operator.settings import OperatorSettings

from .test_adapter_pool_decide import adapter_pool, decided, gpu_pool

NOW = "2026-12-04T01:00:00Z"
EARLIER = "2026-12-04T00:00:00Z"
SERVER = ("shop", "support-server-0")
PLACED = {SERVER: {"billing": "src-b", "returns": "src-r", "shipping": "src-s"}}
WEIGHTS = {SERVER: {name: (f"s3://adapters/{name}", f"sha256:{i:064x}") for i, name in enumerate(PLACED[SERVER])}}
RETRY = Retry(limit=3, cap_s=300.0, now=1_000_000.0)
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


def recorded(*names: str) -> dict[str, str]:
    """The annotation of a pod whose server's copies of `names` tessera loaded from their placed sources."""
    return {SOURCES_ANNOTATION: json.dumps({name: PLACED[SERVER][name] for name in names})}


FETCH_URL = "http://10.244.0.7:8001"


def listing(*names: str, of=None) -> dict[str, Listed]:
    return {(of or pod())["metadata"]["uid"]: Listed(URL, adapters=frozenset(names))}


def gate(status: str, reason: str, message: str, since: str = EARLIER) -> dict:
    return {"type": naming.ADAPTERS_LOADED, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


ALL_LISTED = gate("True", LOADED, "the server lists all 3 adapters placed on it")


def test_a_running_pod_gets_a_load_for_each_placed_adapter_its_server_does_not_list():
    loads = decide_loads([pod(annotations=recorded("returns"))], PLACED, listing("returns"), RETRY, WEIGHTS)
    assert [(load.url, load.adapter, load.path) for load in loads] == [
        (URL, "billing", "/adapters/billing"), (URL, "shipping", "/adapters/shipping")]


def test_each_load_names_the_weights_the_pods_fetcher_is_asked_for_first():
    seen = {pod()["metadata"]["uid"]: Listed(URL, adapters=frozenset(), fetch_url=FETCH_URL)}
    loads = decide_loads([pod()], PLACED, seen, RETRY, WEIGHTS)
    assert [(load.fetch_url, load.uri, load.digest) for load in loads] == [
        (FETCH_URL, *WEIGHTS[SERVER][name]) for name in ("billing", "returns", "shipping")]


def test_a_server_that_lists_every_placed_adapter_gets_no_load():
    held = pod(annotations=recorded("billing", "returns", "shipping"))
    assert decide_loads([held], PLACED, listing("billing", "returns", "shipping", "extra"), RETRY, WEIGHTS) == []


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
    assert decide_loads([pod()], PLACED, listed, RETRY, WEIGHTS) == []
    (patch,) = decide_readiness([pod()], PLACED, listed, NOW, {}, RETRY, {})
    assert (gate_of(patch)["status"], gate_of(patch)["reason"]) == ("False", NOT_ANSWERING)
    assert "connection refused" in gate_of(patch)["message"]
    assert "metadata" not in patch.patch  # what it holds is unknown: the annotation stays


def test_the_gate_is_true_only_when_the_server_lists_every_placed_adapter():
    (missing,) = decide_readiness([pod()], PLACED, listing("billing", "returns"), NOW, {}, RETRY, {})
    assert (gate_of(missing)["status"], gate_of(missing)["reason"]) == ("False", MISSING)
    assert "shipping" in gate_of(missing)["message"]
    (loaded,) = decide_readiness([pod()], PLACED, listing("billing", "returns", "shipping"), NOW, {}, RETRY, {})
    assert gate_of(loaded) == {**ALL_LISTED, "lastTransitionTime": NOW}
    assert (loaded.namespace, loaded.name) == ("shop", "support-server-0-abc")


def test_the_gate_and_the_annotation_go_in_one_patch_of_the_status_subresource():
    (patch,) = decide_readiness([pod()], PLACED, listing("billing", "returns", "shipping"), NOW, {}, RETRY, {})
    assert patch.patch == {"status": {"conditions": [{**ALL_LISTED, "lastTransitionTime": NOW}]},
                           "metadata": {"annotations": {naming.LOADED_ADAPTERS: loaded_value(list(PLACED[SERVER]))}}}


def test_a_gate_and_annotation_that_already_say_what_the_server_lists_are_not_written_again():
    settled = pod(gate=ALL_LISTED,
                  annotations={naming.LOADED_ADAPTERS: loaded_value(["billing", "returns", "shipping"])})
    listed = listing("billing", "returns", "shipping", of=settled)
    assert decide_readiness([settled], PLACED, listed, NOW, {}, RETRY, {}) == []


def test_a_restarted_server_that_lists_none_turns_the_gate_false_from_now():
    restarted = pod(gate=ALL_LISTED)
    (patch,) = decide_readiness([restarted], PLACED, listing(of=restarted), NOW, {}, RETRY, {})
    assert (gate_of(patch)["status"], gate_of(patch)["lastTransitionTime"]) == ("False", NOW)
    assert patch.patch["metadata"] == {"annotations": {naming.LOADED_ADAPTERS: loaded_value([])}}


def test_a_changed_message_keeps_the_time_the_gate_last_changed_status():
    loading = pod(gate=gate("False", MISSING, "3 of 3 placed adapters not listed by the server: ..."))
    (patch,) = decide_readiness([loading], PLACED, listing("billing", of=loading), NOW, {}, RETRY, {})
    assert (gate_of(patch)["status"], gate_of(patch)["lastTransitionTime"]) == ("False", EARLIER)


def test_the_annotation_counts_and_digests_the_placed_adapters_the_server_lists_in_any_order():
    assert loaded_value(["returns", "billing"]) == loaded_value(["billing", "returns"])
    assert loaded_value(["billing", "returns"]).startswith("2:")
    assert loaded_value(["billing"]) != loaded_value(["returns"])
    (patch,) = decide_readiness([pod()], PLACED, listing("returns", "billing", "not-placed"), NOW, {}, RETRY, {})
    assert patch.patch["metadata"] == {"annotations": {naming.LOADED_ADAPTERS: loaded_value(["billing", "returns"])}}


def test_a_pod_of_no_placed_server_is_left_alone():
    stray = pod(deployment="support-server-9")
    assert decide_loads([stray], PLACED, listing(of=stray), RETRY, WEIGHTS) == []
    assert decide_readiness([stray], PLACED, listing(of=stray), NOW, {}, RETRY, {}) == []


def test_a_pod_whose_server_does_not_list_its_adapters_yet_is_looked_at_again_after_the_retry_delay():
    assert loading_requeue([pod()], PLACED, listing("billing"), {}, RETRY) == LOAD_RETRY_S
    not_answering = {pod()["metadata"]["uid"]: Listed(URL, error="refused")}
    assert loading_requeue([pod()], PLACED, not_answering, {}, RETRY) == LOAD_RETRY_S
    assert loading_requeue([pod()], PLACED, listing("billing", "returns", "shipping"), {}, RETRY) is None


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
    assert [tuple(names) for names in placed.values()] == [tuple(s.adapters) for s in servers.placement.servers]


def test_server_pods_are_ready_only_through_the_adapters_loaded_readiness_gate():
    obj, pool = adapter_pool(), gpu_pool()
    for body, _ in planned_servers(pool, decided(obj, pool), OperatorSettings(), set(), {}):
        assert body["spec"]["template"]["spec"]["readinessGates"] == [{"conditionType": "tessera.ai/adapters-loaded"}]


def test_loads_name_the_pod_and_why():
    (load, *_) = decide_loads([pod()], PLACED, listing(), RETRY, WEIGHTS)
    assert isinstance(load, LoadAdapter) and load.pod == "shop/support-server-0-abc" and "not listed" in load.reason


# -- failures (issue 30 item 4) --------------------------------------------------------

NOT_FOUND = "Loading lora shipping failed: No adapter found for /adapters/shipping"
SHIPPING_SOURCE = PLACED[SERVER]["shipping"]


def failing(tries: int, source: str = SHIPPING_SOURCE, at: float = RETRY.now) -> dict:
    """A pod whose annotation records `tries` failed loads of shipping, the last at `at`, and the others loaded."""
    record = failures_value({"shipping": Failure(tries, NOT_FOUND, source, int(at))})
    return pod(annotations={FAILURES_ANNOTATION: record, **recorded("billing", "returns")})


def test_a_failed_load_is_counted_with_the_engines_error_in_the_pods_annotation_written_with_the_gate():
    listed = listing("billing", "returns")
    records = record_failures([pod()], PLACED, {"shop/support-server-0-abc": {"shipping": NOT_FOUND}}, listed, RETRY)
    assert records == {"uid-support-server-0-abc": {"shipping": Failure(1, NOT_FOUND, SHIPPING_SOURCE,
                                                                        int(RETRY.now))}}
    (patch,) = decide_readiness([pod()], PLACED, listed, NOW, records, RETRY, {})
    assert patch.patch["metadata"]["annotations"][FAILURES_ANNOTATION] == failures_value(
        records["uid-support-server-0-abc"])
    assert gate_of(patch)["status"] == "False"  # one failure: still waited for


def test_a_restarted_operator_counts_on_from_the_pods_annotation():
    records = record_failures([failing(2)], PLACED, {"shop/support-server-0-abc": {"shipping": NOT_FOUND}},
                              listing("billing", "returns", of=failing(2)), RETRY)
    assert records["uid-support-server-0-abc"]["shipping"].tries == 3


def test_an_adapter_failed_limit_times_in_a_row_no_longer_holds_the_pods_gate():
    failed = failing(RETRY.limit)
    listed = listing("billing", "returns", of=failed)
    records = {"uid-support-server-0-abc": {"shipping": Failure(RETRY.limit, NOT_FOUND, SHIPPING_SOURCE, 0)}}
    (patch,) = decide_readiness([failed], PLACED, listed, NOW, records, RETRY, {})
    assert (gate_of(patch)["status"], gate_of(patch)["reason"]) == ("True", SOME_FAILED)
    assert "2 of the 3" in gate_of(patch)["message"] and "shipping" in gate_of(patch)["message"]


def test_a_failed_adapter_is_tried_again_only_once_its_wait_has_passed():
    just_failed = failing(RETRY.limit)
    assert decide_loads([just_failed], PLACED, listing("billing", "returns", of=just_failed), RETRY, WEIGHTS) == []
    waited = failing(RETRY.limit, at=RETRY.now - RETRY.wait_s(Failure(RETRY.limit, "", "", 0)))
    (load,) = decide_loads([waited], PLACED, listing("billing", "returns", of=waited), RETRY, WEIGHTS)
    assert load.adapter == "shipping" and "3 time(s) in a row" in load.reason


def test_an_adapter_not_yet_failed_is_tried_again_after_the_retry_delay_not_at_every_reconcile():
    just_tried = failing(RETRY.limit - 1)
    assert decide_loads([just_tried], PLACED, listing("billing", "returns", of=just_tried), RETRY, WEIGHTS) == []
    tried = failing(RETRY.limit - 1, at=RETRY.now - LOAD_RETRY_S)
    (load,) = decide_loads([tried], PLACED, listing("billing", "returns", of=tried), RETRY, WEIGHTS)
    assert load.adapter == "shipping"


def test_the_wait_between_tries_of_a_failed_adapter_doubles_up_to_the_cap():
    waits = [RETRY.wait_s(Failure(tries, "", "", 0)) for tries in range(1, 12)]
    assert waits[:RETRY.limit - 1] == [LOAD_RETRY_S] * (RETRY.limit - 1)
    assert waits[RETRY.limit - 1:RETRY.limit + 2] == [2 * LOAD_RETRY_S, 4 * LOAD_RETRY_S, 8 * LOAD_RETRY_S]
    assert max(waits) == RETRY.cap_s


def test_a_replacement_pod_starts_with_an_empty_failure_record_and_waits_for_the_adapter_its_predecessor_failed():
    old, new = failing(3), pod("support-server-0-new", annotations=recorded("billing", "returns"))
    seen = {**listing("billing", "returns", of=old), **listing("billing", "returns", of=new)}
    assert [load.adapter for load in decide_loads([old, new], PLACED, seen, RETRY, WEIGHTS)] == ["shipping"]  # the new pod's
    records = record_failures([old, new], PLACED, {}, seen, RETRY)
    assert records[new["metadata"]["uid"]] == {} and records[old["metadata"]["uid"]]["shipping"].tries == 3
    (patch,) = [p for p in decide_readiness([new], PLACED, seen, NOW, records, RETRY, {}) if p.name == new["metadata"]["name"]]
    assert gate_of(patch)["reason"] == MISSING  # not SomeAdaptersFailed: nothing of the old pod's record carries over


def test_a_server_pods_template_carries_none_of_the_records_tessera_writes_on_a_pod():
    obj, pool = adapter_pool(), gpu_pool()
    for body, _ in planned_servers(pool, decided(obj, pool), OperatorSettings(), set(), {}):
        template = body["spec"]["template"]["metadata"]
        assert not set(template.get("annotations") or {}) & {FAILURES_ANNOTATION, SOURCES_ANNOTATION, LOADED_ANNOTATION}
        assert not [label for label in template["labels"] if label.startswith(HOLDS_PREFIX)]


def test_a_changed_source_or_digest_starts_the_failure_count_afresh():
    edited = failing(RETRY.limit, source="the-old-source")
    listed = listing("billing", "returns", of=edited)
    (load,) = decide_loads([edited], PLACED, listed, RETRY, WEIGHTS)
    assert load.adapter == "shipping"
    records = record_failures([edited], PLACED, {"shop/support-server-0-abc": {"shipping": NOT_FOUND}}, listed, RETRY)
    assert records["uid-support-server-0-abc"]["shipping"].tries == 1


def test_an_adapter_the_server_lists_again_is_taken_off_the_record_and_the_annotation_removed():
    healed = failing(RETRY.limit)
    listed = listing("billing", "returns", "shipping", of=healed)
    records = record_failures([healed], PLACED, {"shop/support-server-0-abc": {"shipping": None}}, listed, RETRY)
    assert records == {"uid-support-server-0-abc": {}}
    (patch,) = decide_readiness([healed], PLACED, listed, NOW, records, RETRY, {})
    assert patch.patch["metadata"]["annotations"][FAILURES_ANNOTATION] is None
    assert gate_of(patch)["reason"] == LOADED


def test_the_record_keeps_a_bounded_error_for_a_bounded_number_of_adapters():
    many = {SERVER: {f"a{i:04d}": "src" for i in range(2000)}}
    errors = {"shop/support-server-0-abc": {name: "x" * 5000 for name in many[SERVER]}}
    records = record_failures([pod()], many, errors, listing(), RETRY)["uid-support-server-0-abc"]
    assert len(records) == RECORDED_MOST and all(len(f.error) == ERROR_CHARS for f in records.values())
    assert len(failures_value(records) or "") < 40_000


def test_a_pod_held_back_only_by_failed_adapters_is_looked_at_again_when_the_next_try_is_due():
    failed = failing(RETRY.limit)
    records = {"uid-support-server-0-abc": {"shipping": Failure(RETRY.limit, NOT_FOUND, SHIPPING_SOURCE,
                                                                int(RETRY.now))}}
    listed = listing("billing", "returns", of=failed)
    assert loading_requeue([failed], PLACED, listed, records, RETRY) == 2 * LOAD_RETRY_S


def test_each_servers_loaded_and_failed_adapters_are_summed_up_for_the_pools_status():
    failed = failing(RETRY.limit)
    records = {"uid-support-server-0-abc": {"shipping": Failure(RETRY.limit, NOT_FOUND, SHIPPING_SOURCE, 0)}}
    loads = server_loads([failed], PLACED, listing("billing", "returns", of=failed), records, RETRY)
    assert loads == {SERVER: ServerLoad(2, {"shipping": NOT_FOUND})}


def test_a_listed_adapter_of_another_or_an_unrecorded_source_is_unloaded_and_loaded_again():
    edited = pod(annotations={SOURCES_ANNOTATION: json.dumps({"billing": "the-old-source", "returns": "src-r"})})
    loads = decide_loads([edited], PLACED, listing("billing", "returns", "shipping", of=edited), RETRY, WEIGHTS)
    assert [(load.adapter, load.replace) for load in loads] == [("billing", True), ("shipping", True)]


def test_the_sources_record_holds_the_placed_source_of_a_copy_loaded_now_and_the_recorded_one_of_the_others():
    loaded_before = pod(annotations={SOURCES_ANNOTATION: json.dumps({"billing": "the-old-source"})})
    listed = listing("billing", "returns", of=loaded_before)
    held = held_copies([loaded_before], PLACED, listed, {"shop/support-server-0-abc": {"returns": None,
                                                                                       "shipping": NOT_FOUND}})
    assert held == {"uid-support-server-0-abc": {"billing": "the-old-source", "returns": "src-r"}}


def test_a_server_that_does_not_answer_keeps_its_sources_record():
    before = pod(annotations=recorded("billing"))
    listed = {before["metadata"]["uid"]: Listed(URL, error="connection refused")}
    assert held_copies([before], PLACED, listed, {}) == {"uid-support-server-0-abc": {"billing": "src-b"}}


def test_the_pod_is_labelled_with_each_adapter_it_holds_a_copy_of_the_placed_source_of():
    held = {"uid-support-server-0-abc": {"billing": "src-b", "returns": "the-old-source"}}
    (patch,) = decide_readiness([pod()], PLACED, listing("billing", "returns"), NOW, {}, RETRY, held)
    assert patch.patch["metadata"]["labels"] == {f"{HOLDS_PREFIX}billing": "src-b"}
    assert json.loads(patch.patch["metadata"]["annotations"][SOURCES_ANNOTATION]) == held["uid-support-server-0-abc"]


def test_the_label_of_an_adapter_the_pod_no_longer_holds_is_removed():
    labelled = pod()
    labelled["metadata"]["labels"][f"{HOLDS_PREFIX}returns"] = "src-r"
    held = {"uid-support-server-0-abc": {"billing": "src-b"}}
    (patch,) = decide_readiness([labelled], PLACED, listing("billing", of=labelled), NOW, {}, RETRY, held)
    assert patch.patch["metadata"]["labels"] == {f"{HOLDS_PREFIX}billing": "src-b", f"{HOLDS_PREFIX}returns": None}


def test_at_most_the_label_bound_of_adapters_are_labelled_in_the_placements_order():
    many = {(SERVER): {f"a{i}": f"src-{i}" for i in range(LABELLED_MOST + 5)}}
    held = {"uid-support-server-0-abc": dict(many[SERVER])}
    (patch,) = decide_readiness([pod()], many, listing(*many[SERVER]), NOW, {}, RETRY, held)
    assert list(patch.patch["metadata"]["labels"]) == [f"{HOLDS_PREFIX}a{i}" for i in range(LABELLED_MOST)]


def test_an_adapter_the_server_lists_but_is_not_placed_on_it_is_unloaded_once_no_route_lists_the_pod():
    held = pod(annotations=recorded("billing", "returns", "shipping"))
    (unload,) = decide_unloads([held], PLACED, listing("billing", "returns", "shipping", "moved"), routed=set())
    assert (unload.url, unload.pod, unload.adapter) == (URL, "shop/support-server-0-abc", "moved")
    assert "no longer lists the pod" in unload.reason


def test_an_unplaced_adapter_whose_route_still_lists_the_pod_is_not_unloaded_yet():
    held = pod(annotations=recorded("billing", "returns", "shipping"))
    seen = listing("billing", "returns", "shipping", "moved")
    assert decide_unloads([held], PLACED, seen, routed={("uid-support-server-0-abc", "moved")}) == []
    assert [name for _, _, name in unplaced_listed([held], PLACED, seen)] == ["moved"]  # still waiting


def test_placed_adapters_and_pods_of_no_placed_server_or_not_answering_are_never_unloaded():
    assert decide_unloads([pod()], PLACED, listing("billing", "returns"), routed=set()) == []
    assert decide_unloads([pod(deployment="other")], PLACED, listing("moved", of=pod(deployment="other")),
                          routed=set()) == []
    silent = {pod()["metadata"]["uid"]: Listed(URL, error="connection refused")}
    assert decide_unloads([pod()], PLACED, silent, routed=set()) == []
