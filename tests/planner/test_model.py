"""SystemSpec and Pool: validation names field and reason; graph queries."""

import pytest
from pydantic import ValidationError

from tessera.planner.model import Pool, SystemSpec


def variant(name, accuracy=1.0, memory_gb=1.0):
    return {"name": name, "accuracy": accuracy, "gpuMemoryGigabytes": memory_gb}


def task(name, *variants):
    return {"name": name, "variants": list(variants) or [variant(f"{name}-v")]}


def spec(tasks=None, edges=(), **overrides):
    fields = {
        "name": "s",
        "tasks": tasks if tasks is not None else [task("a"), task("b")],
        "edges": list(edges),
        "slo": {"latencyMilliseconds": 100},
        "demandRequestsPerSecond": 10,
    }
    fields.update(overrides)
    return fields


def error_of(fields) -> str:
    with pytest.raises(ValidationError) as raised:
        SystemSpec.model_validate(fields)
    return str(raised.value)


def test_a_valid_spec_loads_with_defaults():
    system = SystemSpec.model_validate(spec(edges=[{"source": "a", "target": "b"}]))
    assert system.priority == "cost"
    assert system.slo.accuracy == 1.0
    assert system.edges[0].factor == 1.0


def test_duplicate_task_names_are_rejected_naming_the_task():
    message = error_of(spec(tasks=[task("a"), task("a")]))
    assert "duplicate task name 'a'" in message


def test_duplicate_variant_names_are_rejected_naming_the_variant():
    message = error_of(spec(tasks=[task("a", variant("v"), variant("v"))]))
    assert "duplicate variant name 'v'" in message
    assert "tasks.0.variants" in message


def test_duplicate_edges_are_rejected():
    edge = {"source": "a", "target": "b"}
    assert "duplicate edge name 'a->b'" in error_of(spec(edges=[edge, edge]))


@pytest.mark.parametrize("end", ["source", "target"])
def test_an_edge_naming_an_unknown_task_names_the_edge_end(end):
    edge = {"source": "a", "target": "b", end: "ghost"}
    message = error_of(spec(edges=[{"source": "a", "target": "b"}, edge]))
    assert f"edges[1].{end}: unknown task 'ghost'" in message


def test_a_self_loop_is_rejected():
    assert "edges[0]: task 'a' feeds itself" in error_of(spec(edges=[{"source": "a", "target": "a"}]))


def test_a_cycle_is_rejected_and_the_message_lists_it():
    edges = [{"source": "a", "target": "b"}, {"source": "b", "target": "c"}, {"source": "c", "target": "a"}]
    message = error_of(spec(tasks=[task("a"), task("b"), task("c")], edges=edges))
    assert "cycle" in message
    assert "a -> b -> c -> a" in message


def test_a_task_without_variants_is_rejected():
    message = error_of(spec(tasks=[{"name": "a", "variants": []}]))
    assert "tasks.0.variants" in message
    assert "at least 1 item" in message


def test_a_system_without_tasks_is_rejected():
    assert "at least 1 item" in error_of(spec(tasks=[]))


@pytest.mark.parametrize("factor", [0, -1.5])
def test_an_edge_factor_must_be_positive(factor):
    message = error_of(spec(edges=[{"source": "a", "target": "b", "factor": factor}]))
    assert "edges.0.factor" in message
    assert "greater than 0" in message


@pytest.mark.parametrize("factor", [0, -2])
def test_a_factor_by_variant_must_be_positive_and_names_the_variant(factor):
    edge = {"source": "a", "target": "b", "factorByVariant": {"a-v": factor}}
    message = error_of(spec(edges=[edge]))
    assert "edges.0.factorByVariant.a-v" in message
    assert "greater than 0" in message


def test_a_factor_by_variant_for_an_unknown_upstream_variant_is_rejected():
    edge = {"source": "a", "target": "b", "factorByVariant": {"nope": 2.0}}
    assert "edges[0].factorByVariant: 'a' has no variant 'nope'" in error_of(spec(edges=[edge]))


@pytest.mark.parametrize("latency", [0, -1])
def test_the_latency_slo_must_be_positive(latency):
    message = error_of(spec(slo={"latencyMilliseconds": latency}))
    assert "slo.latencyMilliseconds" in message
    assert "greater than 0" in message


@pytest.mark.parametrize("accuracy", [0, -0.1, 1.01])
def test_the_accuracy_slo_must_lie_in_zero_to_one(accuracy):
    assert "slo.accuracy" in error_of(spec(slo={"latencyMilliseconds": 100, "accuracy": accuracy}))


def test_an_accuracy_slo_of_exactly_one_is_allowed():
    assert SystemSpec.model_validate(spec(slo={"latencyMilliseconds": 100, "accuracy": 1})).slo.accuracy == 1


def test_negative_demand_is_rejected_but_zero_is_allowed():
    assert "demandRequestsPerSecond" in error_of(spec(demandRequestsPerSecond=-1))
    assert SystemSpec.model_validate(spec(demandRequestsPerSecond=0)).demand_rps == 0


@pytest.mark.parametrize("where", ["top", "slo", "task", "variant", "edge"])
def test_extra_fields_are_forbidden_everywhere(where):
    fields = spec(edges=[{"source": "a", "target": "b"}])
    target = {"top": fields, "slo": fields["slo"], "task": fields["tasks"][0],
              "variant": fields["tasks"][0]["variants"][0], "edge": fields["edges"][0]}[where]
    target["colour"] = "blue"
    message = error_of(fields)
    assert "colour" in message
    assert "Extra inputs are not permitted" in message


def profile_point(**overrides):
    point = {"task": "a", "variant": "a-v", "gpuProduct": "H100-80GB", "migProfile": "1g.10gb", "batchSize": 1,
             "latencyMilliseconds": 5, "throughputRequestsPerSecond": 100}
    point.update(overrides)
    return point


def test_a_profile_in_the_spec_must_name_a_known_task():
    assert "profiles[0].task: unknown task 'ghost'" in error_of(spec(profiles=[profile_point(task="ghost")]))


def test_a_profile_in_the_spec_must_name_a_known_variant_of_its_task():
    message = error_of(spec(profiles=[profile_point(variant="ghost")]))
    assert "profiles[0]" in message and "'ghost'" in message


def diamond(**overrides) -> SystemSpec:
    """a -> b, a -> c, b -> d, c -> d."""
    edges = [{"source": "a", "target": "b", "factor": 2}, {"source": "a", "target": "c", "factor": 3},
             {"source": "b", "target": "d"}, {"source": "c", "target": "d", "factor": 0.5}]
    return SystemSpec.model_validate(spec(tasks=[task(n) for n in "abcd"], edges=edges, **overrides))


def test_sources_and_sinks_are_the_tasks_without_parents_and_children():
    system = diamond()
    assert system.sources == ["a"]
    assert system.sinks == ["d"]


def test_paths_are_every_source_to_sink_path():
    assert sorted(diamond().paths) == [("a", "b", "d"), ("a", "c", "d")]


def test_tasks_without_edges_are_each_their_own_path():
    system = SystemSpec.model_validate(spec())
    assert system.sources == ["a", "b"] and system.sinks == ["a", "b"]
    assert sorted(system.paths) == [("a",), ("b",)]


def test_demand_multiplies_along_edges_and_sums_over_parents():
    demand = diamond().demand({n: f"{n}-v" for n in "abcd"})
    assert demand == pytest.approx({"a": 10, "b": 20, "c": 30, "d": 20 * 1 + 30 * 0.5})


def test_demand_uses_the_factor_of_the_chosen_upstream_variant():
    tasks = [task("a", variant("small", 0.5), variant("big", 1.0)), task("b")]
    edge = {"source": "a", "target": "b", "factor": 2, "factorByVariant": {"big": 5}}
    system = SystemSpec.model_validate(spec(tasks=tasks, edges=[edge]))
    assert system.demand({"a": "small", "b": "b-v"})["b"] == pytest.approx(20)
    assert system.demand({"a": "big", "b": "b-v"})["b"] == pytest.approx(50)


def test_path_accuracy_is_the_product_of_normalised_accuracies():
    tasks = [task("a", variant("a1", 0.8), variant("a2", 0.4)), task("b", variant("b1", 0.9), variant("b2", 0.45))]
    system = SystemSpec.model_validate(spec(tasks=tasks, edges=[{"source": "a", "target": "b"}]))
    assert system.path_accuracy(("a", "b"), {"a": "a2", "b": "b2"}) == pytest.approx(0.25)
    assert system.path_accuracy(("a", "b"), {"a": "a1", "b": "b1"}) == pytest.approx(1.0)


def test_a_pool_rejects_an_unknown_gpu_product_naming_it():
    with pytest.raises(Exception) as raised:
        Pool(gpu="V100-16GB", gpus=2)
    assert "unknown GPU product 'V100-16GB'" in str(raised.value)


def test_an_unknown_gpu_product_is_a_validation_error_on_the_gpu_field():
    with pytest.raises(ValidationError) as raised:
        Pool(gpu="V100-16GB", gpus=2)
    assert raised.value.errors()[0]["loc"] == ("gpu",)


def test_a_pool_needs_at_least_one_gpu():
    with pytest.raises(ValidationError):
        Pool(gpu="H100-80GB", gpus=0)
