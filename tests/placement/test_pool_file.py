"""An AdapterPool file becomes a placement problem through the API's own model and the bounded loader."""

from pathlib import Path

import pytest
import yaml

from tessera.planner.input_files import InputError
from tessera.planner.placement.pool_file import PoolFileError, load_problem, problem_from_spec, spec_from_object

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "adapter-pools"


def _written(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _example(name: str = "support-bots.yaml") -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_pool_becomes_a_problem_with_every_adapter_at_its_rate(path):
    document = yaml.safe_load(path.read_text())
    spec = document["spec"]
    problem = load_problem(path)
    assert [(a.name, a.rank, a.rate_rps) for a in problem.adapters] == [
        (a["name"], a["rank"], a["expectedRequestsPerSecond"]) for a in spec["adapters"]]
    assert problem.name == document["metadata"]["name"]
    assert problem.model == "qwen2.5-7b-instruct" and problem.gpu == spec["gpuProduct"]
    assert problem.max_model_len == spec["baseModel"]["maxModelLengthTokens"]
    assert problem.bound.min_served_fraction == spec["serviceBound"].get("minServedFraction")
    assert problem.bound.p99_ttft_ms == spec["serviceBound"].get("p99TimeToFirstTokenMilliseconds")
    assert problem.limits.max_servers == spec["limits"]["maxServers"]
    assert problem.limits.max_lora_slots == spec["limits"].get("maxLoraSlotsPerServer")


def test_a_pool_without_limits_gets_the_api_default_server_cap(tmp_path):
    document = _example()
    del document["spec"]["limits"]
    assert load_problem(_written(tmp_path, document)).limits.max_servers == 16


def test_a_pool_with_only_a_demand_source_has_no_rate_to_place_and_says_which_adapter():
    document = _example()
    document["spec"]["demandSource"] = {"query": "sum by (adapter) (rate(vllm_requests_total[5m]))"}
    del document["spec"]["adapters"][2]["expectedRequestsPerSecond"]
    spec = spec_from_object(document, "pool.yaml")  # valid for the API
    with pytest.raises(PoolFileError, match=r"spec\.adapters\[2\]\.expectedRequestsPerSecond: placement needs"):
        problem_from_spec(spec)


def test_the_file_of_a_pool_placement_cannot_express_is_named_with_the_field(tmp_path):
    document = _example()
    document["spec"]["meanOutputTokens"] = 1500
    with pytest.raises(PoolFileError, match=r"pool\.yaml \(support-bots\): spec\.meanOutputTokens: 1500 tokens"):
        load_problem(_written(tmp_path, document))


def test_snake_case_attribute_names_are_unknown_fields_as_on_the_api_server(tmp_path):
    document = _example()
    document["spec"]["service_bound"] = document["spec"].pop("serviceBound")
    with pytest.raises(PoolFileError, match=r"spec\.serviceBound: Field required") as error:
        load_problem(_written(tmp_path, document))
    assert "spec.service_bound" in str(error.value)


def test_an_alias_bomb_is_refused_by_the_bounded_loader_before_it_expands(tmp_path):
    path = tmp_path / "pool.yaml"
    path.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"b{i}: &b{i} [*a, *a, *a, *a]\n" for i in range(8)))
    with pytest.raises(InputError, match=r"pool\.yaml: refused: more than \d+ aliases"):
        load_problem(path)
