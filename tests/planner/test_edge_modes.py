"""Edges say how the frontend makes a child's requests; the defaults keep every existing system valid."""

import pytest
from pydantic import ValidationError

from tessera.planner.model import Edge, SystemSpec
from tessera.planner.spec_file import load_systems
from tessera.shipped import default_example_systems


def system(edges: list[dict], tasks=("a", "b", "c")) -> SystemSpec:
    return SystemSpec.model_validate({
        "name": "s", "slo": {"latencyMilliseconds": 100}, "demandRequestsPerSecond": 1,
        "tasks": [{"name": t, "variants": [{"name": "v", "accuracy": 1, "gpuMemoryGigabytes": 1}]} for t in tasks],
        "edges": edges})


def test_an_edge_passes_the_parents_response_by_default_and_the_examples_stay_valid():
    assert Edge(source="a", target="b").mode == "response"
    assert all(e.mode == "response" for path in default_example_systems()
               for s in load_systems(path) for e in s.edges)


def test_a_split_edge_must_name_the_output_it_splits():
    with pytest.raises(ValidationError, match="splitOutput: give it exactly when mode is split"):
        Edge(source="a", target="b", mode="split")
    with pytest.raises(ValidationError, match="splitOutput: give it exactly when mode is split"):
        Edge.model_validate({"source": "a", "target": "b", "splitOutput": "boxes"})


def test_a_task_joining_several_parents_below_a_split_is_refused_naming_the_edge():
    with pytest.raises(ValidationError, match=r"edges\[1\].target: 'c' joins several parents below a split"):
        system([{"source": "a", "target": "b", "mode": "split", "splitOutput": "boxes"},
                {"source": "a", "target": "c"}, {"source": "b", "target": "c"}])


def test_a_join_outside_any_split_is_accepted():
    spec = system([{"source": "a", "target": "c"}, {"source": "b", "target": "c", "mode": "request"}])
    assert spec.sinks == ["c"]
