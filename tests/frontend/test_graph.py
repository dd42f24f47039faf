"""The frontend carries a request through the task graph: each edge's mode, joins, the gathered response."""

import pytest

from support.oip_stub import StubModel
from frontend.harness import ONE_ROW, counted, make_config, post, run


def test_a_split_edge_sends_one_request_per_item_and_the_response_gathers_them_in_order():
    models = {"detector": StubModel(items=3), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        status, answer, _ = await post(session, url)
        assert status == 200
        (gathered,) = answer["outputs"]
        assert gathered["name"] == "classify.echo.items"
        assert gathered["shape"] == [3, 2]
        assert gathered["data"] == [0, 0, 1, 1, 2, 2]

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 1)]},
                                         [{"source": "detect", "target": "classify", "mode": "split",
                                           "splitOutput": "items"}]), scenario)
    assert [seen["inputs"][0]["shape"] for seen in models["classifier"].seen] == [[1, 2]] * 3


def test_a_split_of_no_items_calls_no_child_and_answers_without_its_outputs():
    models = {"detector": StubModel(items=0), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        status, answer, _ = await post(session, url)
        assert (status, answer["outputs"]) == (200, [])

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 1)]},
                                         [{"source": "detect", "target": "classify", "mode": "split",
                                           "splitOutput": "items"}]), scenario)
    assert models["classifier"].seen == []


def test_a_response_edge_passes_the_parents_outputs_and_a_request_edge_the_original_request():
    models = {"first": StubModel(), "by-response": StubModel(), "by-request": StubModel()}

    async def scenario(frontend, url, session):
        status, _, _ = await post(session, url)
        assert status == 200

    run(models, lambda stub: make_config(
        stub, {"a": [("first", 1, 1)], "b": [("by-response", 1, 1)], "c": [("by-request", 1, 1)]},
        [{"source": "a", "target": "b"}, {"source": "a", "target": "c", "mode": "request"}]), scenario)
    assert [t["name"] for t in models["by-response"].seen[0]["inputs"]] == ["echo.frame"]
    assert models["by-request"].seen[0]["inputs"] == ONE_ROW["inputs"]


def test_a_task_with_two_parents_runs_once_with_both_contributions_named_by_parent():
    models = {"left": StubModel(delay_s=0.05), "right": StubModel(), "join": StubModel()}

    async def scenario(frontend, url, session):
        status, answer, _ = await post(session, url)
        assert status == 200
        assert [o["name"] for o in answer["outputs"]] == ["j.echo.l.echo.frame", "j.echo.r.echo.frame"]

    run(models, lambda stub: make_config(
        stub, {"l": [("left", 1, 1)], "r": [("right", 1, 1)], "j": [("join", 1, 1)]},
        [{"source": "l", "target": "j"}, {"source": "r", "target": "j"}]), scenario)
    assert len(models["join"].seen) == 1


def test_a_failing_task_is_named_in_a_502_and_counted_as_failed():
    models = {"detector": StubModel(items=2), "classifier": StubModel(fail_status=500)}

    async def scenario(frontend, url, session):
        status, answer, headers = await post(session, url)
        assert status == 502
        assert "task 'classify' failed" in answer["error"] and "HTTP 500" in answer["error"]
        assert headers["Tessera-Failed-Task"] == "classify"
        assert counted(frontend, "failed") == 1

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 1)]},
                                         [{"source": "detect", "target": "classify", "mode": "split",
                                           "splitOutput": "items"}]), scenario)


def test_a_split_on_an_output_the_parent_did_not_send_names_the_parent():
    models = {"detector": StubModel(), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        status, answer, _ = await post(session, url)
        assert status == 502
        assert "task 'detect' failed: its response has no output 'items'" in answer["error"]

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 1)]},
                                         [{"source": "detect", "target": "classify", "mode": "split",
                                           "splitOutput": "items"}]), scenario)


def test_an_unreachable_task_is_named_in_a_502():
    models = {"m": StubModel()}

    async def scenario(frontend, url, session):
        status, answer, _ = await post(session, url)
        assert status == 502 and "task 'only' failed" in answer["error"]

    def build(stub):
        config = make_config(stub, {"only": [("m", 1, 1)]})
        config.tasks[0].configurations[0].url = "http://127.0.0.1:9/v2/models/m/infer"  # the discard port
        return config

    run(models, build, scenario)


@pytest.mark.parametrize("weights", [(1, 3), (2, 5)])
def test_routing_sends_each_configuration_its_planned_share(weights):
    models = {"small": StubModel(), "large": StubModel()}

    async def scenario(frontend, url, session):
        for _ in range(70):
            assert (await post(session, url))[0] == 200

    run(models, lambda stub: make_config(stub, {"t": [("small", weights[0], 1), ("large", weights[1], 1)]}),
        scenario)
    share = len(models["small"].seen) / 70
    assert share == pytest.approx(weights[0] / sum(weights), abs=1 / 70)


def test_every_hop_is_observed_per_task_and_configuration():
    models = {"detector": StubModel(items=2), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        assert (await post(session, url))[0] == 200
        stage = {task: frontend.registry.get_sample_value(
            "tessera_frontend_stage_seconds_count", {"system": "demo", "task": task, "configuration": model})
            for task, model in (("detect", "detector"), ("classify", "classifier"))}
        assert stage == {"detect": 1, "classify": 2}

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 1)]},
                                         [{"source": "detect", "target": "classify", "mode": "split",
                                           "splitOutput": "items"}]), scenario)
