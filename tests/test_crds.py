from tessera.operator.crds import crd, rendered


def test_checked_in_crds_match_the_models():
    for path, text in rendered().items():
        assert path.exists(), f"{path} is missing: run `tessera crds --write`"
        assert path.read_text() == text, f"{path} is stale: run `tessera crds --write`"


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_crd_schema_is_structural():
    schema = crd("CompoundInferenceSystem")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for node in _walk(schema):
        assert "$ref" not in node and "$defs" not in node
        assert node.get("type") != "null"
        assert not ("properties" in node and "additionalProperties" in node)
        assert not isinstance(node.get("exclusiveMinimum"), (int, float)) or isinstance(node["exclusiveMinimum"], bool)


def test_crd_schema_keeps_the_validation_bounds():
    spec = crd("CompoundInferenceSystem")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    latency = spec["properties"]["slo"]["properties"]["latencyMilliseconds"]
    assert latency["minimum"] == 0 and latency["exclusiveMinimum"] is True
    assert "name" not in spec["properties"]
    assert set(spec["required"]) >= {"tasks", "slo", "demandRequestsPerSecond"}
