"""The preflight's decisions: each missing prerequisite is a finding that says what to do."""

from __future__ import annotations

import copy

from tessera.operator import preflight
from tessera.operator.api import status as st
from tessera.operator.settings import OperatorSettings

SETTINGS = OperatorSettings(namespaces=["inference"], gpu_operator_namespace="gpu-operator")
POLICY = {"spec": {"mig": {"strategy": "mixed"}, "migManager": {"enabled": True}}}
EXPECTED = preflight.expected_crds()


def seen(**changes) -> preflight.Seen:
    present = {"namespaces": {"gpu-operator": True, "inference": True}, "cluster_policy": POLICY,
               "crds": copy.deepcopy(EXPECTED)}
    return preflight.Seen(**{**present, **changes})


def reasons(observed: preflight.Seen) -> list[str]:
    return [f.reason for f in preflight.findings(observed, SETTINGS, EXPECTED)]


def test_a_cluster_with_everything_in_place_has_no_finding():
    assert preflight.findings(seen(), SETTINGS, EXPECTED) == []
    condition = preflight.condition([])
    assert (condition.type, condition.status, condition.reason) == (st.PREREQUISITES_MET, True, st.ALL_PRESENT)


def test_a_missing_gpu_operator_namespace_names_it_and_the_setting_to_change():
    (finding,) = preflight.findings(seen(namespaces={"gpu-operator": False, "inference": True}), SETTINGS, EXPECTED)
    assert finding.reason == st.GPU_OPERATOR_NAMESPACE_MISSING
    assert "'gpu-operator'" in finding.message and "gpuOperator.namespace" in finding.message


def test_a_missing_watched_namespace_names_it():
    (finding,) = preflight.findings(seen(namespaces={"gpu-operator": True, "inference": False}), SETTINGS, EXPECTED)
    assert finding.reason == st.WATCHED_NAMESPACE_MISSING and "'inference'" in finding.message


def test_a_missing_cluster_policy_says_how_to_install_the_gpu_operator():
    (finding,) = preflight.findings(seen(cluster_policy=None), SETTINGS, EXPECTED)
    assert finding.reason == st.CLUSTER_POLICY_MISSING and "mig.strategy=mixed" in finding.message


def test_a_cluster_policy_with_the_single_strategy_or_no_mig_manager_is_reported():
    assert reasons(seen(cluster_policy={"spec": {"mig": {"strategy": "single"}}})) == [st.MIG_STRATEGY_NOT_MIXED]
    assert reasons(seen(cluster_policy={"spec": {}})) == [st.MIG_STRATEGY_NOT_MIXED]  # the GPU Operator's default
    disabled = {"spec": {"mig": {"strategy": "mixed"}, "migManager": {"enabled": False}}}
    assert reasons(seen(cluster_policy=disabled)) == [st.MIG_MANAGER_DISABLED]


def test_a_missing_crd_says_how_to_install_this_versions_crds():
    crds = {**copy.deepcopy(EXPECTED), "adapterpools.tessera.ai": None}
    (finding,) = preflight.findings(seen(crds=crds), SETTINGS, EXPECTED)
    assert finding.reason == st.CRD_MISSING and "--force-conflicts" in finding.message


def test_a_crd_that_does_not_serve_this_version_is_reported():
    crds = copy.deepcopy(EXPECTED)
    crds["compoundinferencesystems.tessera.ai"]["spec"]["versions"][0]["served"] = False
    assert reasons(seen(crds=crds)) == [st.CRD_VERSION_NOT_SERVED]


def test_a_crd_with_an_older_schema_is_outdated():
    crds = copy.deepcopy(EXPECTED)
    schema = crds["compoundinferencesystems.tessera.ai"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["frontend"]
    assert reasons(seen(crds=crds)) == [st.CRD_OUTDATED]


def test_empty_values_and_fields_outside_the_schema_are_no_difference():
    crds = copy.deepcopy(EXPECTED)
    version = crds["compoundinferencesystems.tessera.ai"]["spec"]["versions"][0]
    version["deprecated"] = False
    version["schema"]["openAPIV3Schema"]["properties"]["status"]["required"] = []
    assert reasons(seen(crds=crds)) == []


def test_what_tessera_may_not_read_is_a_finding_not_a_missing_object():
    crds = {k: v for k, v in copy.deepcopy(EXPECTED).items() if k != "adapterpools.tessera.ai"}
    observed = seen(crds=crds, forbidden=("CRD adapterpools.tessera.ai",))
    (finding,) = preflight.findings(observed, SETTINGS, EXPECTED)
    assert finding.reason == st.READ_FORBIDDEN and "adapterpools.tessera.ai" in finding.message


def test_the_condition_carries_the_first_reason_and_every_message():
    observed = seen(namespaces={"gpu-operator": False, "inference": False}, cluster_policy=None)
    found = preflight.findings(observed, SETTINGS, EXPECTED)
    condition = preflight.condition(found)
    assert not condition.status and condition.reason == st.GPU_OPERATOR_NAMESPACE_MISSING
    assert all(f.message in condition.message for f in found) and len(found) == 3


def test_a_missing_prerequisite_is_a_warning_event_once_per_change():
    missing = preflight.condition(preflight.findings(seen(cluster_policy=None), SETTINGS, EXPECTED))
    present = preflight.condition([])
    before = {"conditions": [present.as_dict(1, "t0")]}
    after = {"conditions": [missing.as_dict(1, "t1")]}
    (event,) = st.events_for(before, after)
    assert event.type == "Warning" and event.reason == st.CLUSTER_POLICY_MISSING
    assert st.events_for(after, after) == []
