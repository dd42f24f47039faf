"""AdapterPoolSpec: the AdapterPool's spec; wire names, ranges and cross-field rules."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tessera.planner.adapter_pool import AdapterPoolSpec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adapter-pools" / "support-assistants.yaml"
DIGEST = "sha256:" + "ab" * 32


def pool(**overrides) -> dict:
    fields = {
        "name": "p",
        "baseModel": {"name": "Qwen/Qwen2.5-7B-Instruct", "image": "vllm/vllm-openai:v0.8.5",
                      "maxModelLengthTokens": 32768, "weights": {"uri": "hf://Qwen/Qwen2.5-7B-Instruct", "digest": DIGEST}},
        "gpuProduct": "H100-80GB",
        "adapters": [adapter("a"), adapter("b")],
        "serviceBound": {"minServedFraction": 0.9},
    }
    fields.update(overrides)
    return fields


def adapter(name, rank=16, rate=1.0, **overrides) -> dict:
    entry = {"name": name, "rank": rank, "weights": {"uri": f"s3://bucket/{name}", "digest": DIGEST}}
    if rate is not None:
        entry["expectedRequestsPerSecond"] = rate
    entry.update(overrides)
    return entry


def error_of(fields) -> str:
    with pytest.raises(ValidationError) as raised:
        AdapterPoolSpec.model_validate(fields, by_alias=True, by_name=False)
    return str(raised.value)


def test_the_example_pool_loads_and_exposes_attribute_names():
    document = yaml.safe_load(EXAMPLE.read_text())
    spec = AdapterPoolSpec.model_validate({**document["spec"], "name": document["metadata"]["name"]})
    assert spec.gpu == "H100-80GB" and spec.base_model.max_model_len == 32768
    assert spec.max_rank == 32 and spec.limits.max_lora_slots == 32
    assert spec.service_bound.min_served_fraction == 0.95
    assert {a.name: a.rate_rps for a in spec.adapters}["support-en"] == 2.0


def test_a_pool_serialises_to_camel_case_wire_names():
    dumped = AdapterPoolSpec.model_validate(pool()).model_dump(exclude_none=True)
    assert {"baseModel", "gpuProduct", "serviceBound", "limits"} <= dumped.keys()
    assert dumped["adapters"][0]["expectedRequestsPerSecond"] == 1.0


def test_duplicate_adapter_names_are_rejected_naming_the_adapter():
    assert "adapters[1].name: duplicate adapter name 'a'" in error_of(pool(adapters=[adapter("a"), adapter("a")]))


def test_an_adapter_without_a_rate_needs_a_demand_source():
    assert "adapters[0].expectedRequestsPerSecond" in error_of(pool(adapters=[adapter("a", rate=None)]))
    with_source = pool(adapters=[adapter("a", rate=None)], demandSource={"query": "sum by (adapter) (rate(x[5m]))"})
    assert AdapterPoolSpec.model_validate(with_source).adapters[0].rate_rps is None


def test_the_service_bound_needs_at_least_one_bound():
    assert "give minServedFraction" in error_of(pool(serviceBound={}))


@pytest.mark.parametrize("digest", ["sha256:abc", "md5:" + "a" * 32, ""])
def test_a_weights_digest_must_be_a_sha256(digest):
    assert "adapters.0.weights.digest" in error_of(pool(adapters=[adapter("a", weights={"uri": "s3://b/a", "digest": digest})]))


@pytest.mark.parametrize("field,value", [("rank", 0), ("rank", 1024), ("expectedRequestsPerSecond", float("nan")),
                                         ("expectedRequestsPerSecond", float("inf")), ("name", "Bad_Name")])
def test_adapter_fields_out_of_range_are_rejected_naming_the_field(field, value):
    assert f"adapters.0.{field}" in error_of(pool(adapters=[{**adapter("a"), field: value}]))


def test_snake_case_attribute_names_are_unknown_fields_on_the_wire():
    message = error_of(pool(gpu_product="H100-80GB"))
    assert "gpu_product" in message and "Extra inputs are not permitted" in message


def test_an_unknown_gpu_product_is_rejected():
    assert "gpuProduct" in error_of(pool(gpuProduct="V100-16GB"))
