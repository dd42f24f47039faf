"""Issue 8's hostile specs through the operator: what the API server lets through is Invalid, nothing more.

The corpus (tests/hostile/corpus.py) is the command line's; each of its
CompoundInferenceSystem documents is offered to the API server first
(dry run, strict field validation, as kubectl does). Those the schema
rejects never reach tessera (tests/e2e/test_api_crds.py covers that path);
those it accepts, plus an unreachable SLO, are created beside a good system.
Each must turn Invalid with the planner's diagnosis naming the field and a
Warning Event, the operator must keep running, and the good system must keep
its plan: the same Deployments (by uid), Ready.
"""

from __future__ import annotations

import json

import yaml

from cluster.kube import wait_for
from hostile.corpus import spec, spec_cases

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import children, condition, is_true, system_yaml, systems, wait_ready

READY_TIMEOUT_S = 240
INVALID_TIMEOUT_S = 180
UNREACHABLE = "spec-slo-unreachable"
SHAPE = {k: v for k, v in spec().items() if k != "spec"}
GROUP, VERSION, PLURAL = "tessera.ai", "v1alpha1", "compoundinferencesystems"


def _documents() -> dict[str, tuple[dict, tuple[str, ...]]]:
    """case id -> (a CompoundInferenceSystem named after the case, the words its diagnosis must contain)."""
    found = {}
    for case in spec_cases():
        if case.argv[0] != "plan" or (case.code != 2 and case.id != UNREACHABLE):
            continue  # other commands, or a pool too small (Degraded, not Invalid: test_operator.py)
        text = case.files.get("spec.yaml")
        if not isinstance(text, str) or len(text) > 1_000_000:
            continue  # bytes, generated files and 50 MB documents are file-level cases: kubectl never sends them
        try:
            document = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError, ValueError):
            continue  # not an object kubectl could send
        if not (isinstance(document, dict) and isinstance(document.get("spec"), dict)
                and {k: v for k, v in document.items() if k != "spec"} == SHAPE):
            continue  # the object's shape (kind, apiVersion, metadata) is the API server's to refuse, not tessera's
        document["metadata"] = {"name": case.id}
        found[case.id] = (document, tuple(word for word in case.says if word != "spec.yaml"))
    return found


def _accepted(custom, namespace: str, document: dict) -> bool:
    api = custom.api_client
    response = api.rest_client.pool_manager.request(
        "POST", f"{api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
                f"?dryRun=All&fieldValidation=Strict",
        body=json.dumps(document).encode(), headers={"Content-Type": "application/json"})
    return response.status == 201


def test_hostile_specs_the_schema_lets_through_are_invalid_and_the_good_system_keeps_its_plan(
        run_operator, custom, api_client, kubectl):
    operator = run_operator(nodes=2).start()
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml("steady"))
    wait_ready(custom, operator.namespace, ["steady"], READY_TIMEOUT_S, operator)
    before = {d.metadata.uid for d in children(api_client, operator.namespace)[0]}

    through = {case: (document, says) for case, (document, says) in _documents().items()
               if _accepted(custom, operator.namespace, document)}
    assert {"spec-cycle", "spec-profile-unknown-variant", UNREACHABLE} <= through.keys(), sorted(through)
    for document, _ in through.values():
        custom.create_namespaced_custom_object(GROUP, VERSION, operator.namespace, PLURAL, document)

    found = wait_for(lambda: (s := systems(custom, operator.namespace)) and all(
        is_true(s[case], "Invalid") for case in through) and s, INVALID_TIMEOUT_S, "every hostile system Invalid")
    for case, (_, says) in through.items():
        invalid = condition(found[case], "Invalid")
        assert found[case]["status"]["phase"] == "Invalid", case
        assert all(word in invalid["message"] for word in says), (case, says, invalid["message"])
    events = json.loads(kubectl("get", "events", "-n", operator.namespace, "-o", "json").stdout)["items"]
    warned = {e["involvedObject"]["name"] for e in events if e["type"] == "Warning"}
    assert set(through) <= warned

    assert operator.alive()
    assert is_true(found["steady"], "Ready") and not is_true(found["steady"], "Invalid")
    assert {d.metadata.uid for d in children(api_client, operator.namespace)[0]} == before
