"""The generated CRDs: in sync with the models, structural, and by Kubernetes conventions."""

import re

import pytest

from tessera.operator.api.v1alpha1 import CONDITION_TYPES, ConditionType
from tessera.operator.api.reference import reference_file, render_reference
from tessera.operator.api.crds import KINDS, crd, rendered

KIND_NAMES = sorted(KINDS)
SNAKE_CASE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")


def test_checked_in_crds_match_the_models():
    for path, text in rendered().items():
        assert path.exists(), f"{path} is missing: run `tessera crds --write`"
        assert path.read_text() == text, f"{path} is stale: run `tessera crds --write`"


def root(kind):
    return crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node, path="$"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def schemas(kind):
    """Every schema node below the root with its path (property schemas, items, map values)."""
    for path, node in _walk(root(kind)):
        if "type" in node or "properties" in node:
            yield path, node


def properties(kind):
    for path, node in schemas(kind):
        for name, sub in node.get("properties", {}).items():
            yield f"{path}.{name}", name, sub


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_crd_schema_is_structural(kind):
    for _, node in _walk(root(kind)):
        assert not {"$ref", "$defs", "propertyNames", "patternProperties"} & node.keys()
        assert node.get("type") != "null"
        assert not ("properties" in node and "additionalProperties" in node)
        assert not isinstance(node.get("exclusiveMinimum"), (int, float)) or isinstance(node["exclusiveMinimum"], bool)
        assert "default" not in node, "defaults are described, not stored by the API server"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_no_field_name_is_snake_case(kind):
    offenders = [path for path, name, _ in properties(kind) if SNAKE_CASE.match(name) or "_" in name]
    assert offenders == []


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_field_has_a_description(kind):
    undescribed = [path for path, _, sub in properties(kind) if not sub.get("description")]
    assert undescribed == ["$.metadata"], "the API server forbids a description on metadata"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_string_list_and_map_is_bounded(kind):
    unbounded = []
    for path, node in schemas(kind):
        if path in ("$.properties.apiVersion", "$.properties.kind"):
            continue  # the API server checks them against the CRD itself
        kind_of = node.get("type")
        if kind_of == "string" and not ({"maxLength", "enum"} & node.keys() or node.get("format") == "date-time"):
            unbounded.append(path)
        if kind_of == "array" and "maxItems" not in node:
            unbounded.append(path)
        if kind_of == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(path)
    assert unbounded == []


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_number_has_both_bounds(kind):
    spec = root(kind)["properties"]["spec"]
    open_ended = [path for path, node in _walk(spec)
                  if node.get("type") in ("number", "integer") and not {"minimum", "maximum"} <= node.keys()]
    assert open_ended == []


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_both_kinds_have_the_typed_status(kind):
    status = root(kind)["properties"]["status"]
    assert "x-kubernetes-preserve-unknown-fields" not in status
    assert {"observedGeneration", "phase", "conditions", "plan"} <= status["properties"].keys()
    condition = status["properties"]["conditions"]["items"]
    assert {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"} <= condition["properties"].keys()
    assert status["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert crd(kind)["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_condition_types_are_the_designs_ten_the_preflights_and_the_frontends():
    assert set(CONDITION_TYPES) == {"Ready", "Planned", "Progressing", "Degraded", "Invalid", "MigLayoutApplied",
                                    "ProfilesEstimated", "ProfilingComplete", "MetricsAvailable", "AdaptersPlaced",
                                    "PrerequisitesMet", "LatencySLOMet"}
    assert ConditionType.READY == "Ready"


def test_a_system_lists_print_ready_gpus_slices_pool_share_accuracy_latency_frontend_and_age_and_wide_its_priority():
    columns = crd("CompoundInferenceSystem")["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["Ready", "Phase", "GPUs", "Slices", "Pool-%", "Priority", "Accuracy",
                                            "Latency-ms", "Frontend", "Age"]
    assert [c["name"] for c in columns if c.get("priority")] == ["Priority"]


def test_names_are_list_map_keys_so_the_api_server_rejects_duplicates():
    spec = root("CompoundInferenceSystem")["properties"]["spec"]
    tasks = spec["properties"]["tasks"]
    assert (tasks["x-kubernetes-list-type"], tasks["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    assert tasks["items"]["properties"]["variants"]["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["properties"]["edges"]["x-kubernetes-list-map-keys"] == ["source", "target"]
    pool = root("AdapterPool")["properties"]["spec"]
    assert pool["properties"]["adapters"]["x-kubernetes-list-map-keys"] == ["name"]


def test_the_system_schema_keeps_the_validation_bounds():
    spec = root("CompoundInferenceSystem")["properties"]["spec"]
    latency = spec["properties"]["slo"]["properties"]["latencyMilliseconds"]
    assert latency["minimum"] == 0 and latency["exclusiveMinimum"] is True and latency["maximum"] == 3_600_000
    assert "name" not in spec["properties"]
    assert set(spec["required"]) >= {"tasks", "slo", "demandRequestsPerSecond"}
    assert any("e.source" in rule["rule"] for rule in spec["x-kubernetes-validations"])


def test_a_default_is_stated_in_the_description():
    port = root("CompoundInferenceSystem")["properties"]["spec"]["properties"]["tasks"]["items"]["properties"][
        "variants"]["items"]["properties"]["port"]
    assert port["description"].endswith("Default: 8000.")


def test_the_api_reference_in_docs_is_generated_from_the_crds():
    path, text = reference_file()
    assert path.read_text() == text, f"{path} is stale: run `tessera crds --write`"


def test_the_api_reference_lists_every_field_of_both_kinds():
    text = render_reference()
    for kind in KIND_NAMES:
        for path, _, _ in properties(kind):
            name = path.rsplit(".", 1)[1]
            if name not in ("apiVersion", "kind", "metadata") and "properties" not in name:
                assert f".{name}`" in text, path
