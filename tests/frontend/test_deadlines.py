"""Deadlines per hop, early dropping by the plan's least times, back-pressure, and the outcome counts."""

import asyncio

import pytest

from support.oip_stub import StubModel
from frontend.harness import counted, make_config, post, run

SPLIT = [{"source": "detect", "target": "classify", "mode": "split", "splitOutput": "items"}]


def test_every_hop_carries_the_budget_left_and_a_child_gets_less_than_its_parent():
    models = {"detector": StubModel(items=1, delay_s=0.03), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        assert (await post(session, url))[0] == 200

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 1)]},
                                         SPLIT, slo_ms=500), scenario)
    parent, child = models["detector"].seen[0]["budget_ms"], models["classifier"].seen[0]["budget_ms"]
    assert 450 < parent <= 500  # what the first hop got: the SLO less the time the frontend took to send it
    assert parent - child >= 30


def test_a_request_whose_budget_cannot_cover_the_path_ahead_is_dropped_before_the_hop_with_its_reason():
    # The classifier needs 80 ms at a batch of one; after a 40 ms detector, 100 ms of SLO leave 60.
    models = {"detector": StubModel(items=2, delay_s=0.04), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        status, answer, headers = await post(session, url)
        assert (status, headers["Tessera-Dropped"]) == (503, "deadline")
        assert "dropped early before task 'classify'" in answer["error"]
        assert counted(frontend, "dropped", "deadline") == 1

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 80)]},
                                         SPLIT, slo_ms=100), scenario)
    assert models["classifier"].seen == []


def test_a_request_doomed_at_the_source_never_reaches_a_server():
    # The source's own batch of one plus the classifier's exceed the SLO from the start.
    models = {"detector": StubModel(items=1), "classifier": StubModel()}

    async def scenario(frontend, url, session):
        assert (await post(session, url))[0] == 503

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 60)], "classify": [("classifier", 1, 60)]},
                                         SPLIT, slo_ms=100), scenario)
    assert models["detector"].seen == []


def test_with_early_dropping_off_the_same_request_is_served_and_counted_late():
    models = {"detector": StubModel(items=1, delay_s=0.04), "classifier": StubModel(delay_s=0.08)}

    async def scenario(frontend, url, session):
        status, _, headers = await post(session, url)
        assert (status, headers["Tessera-Outcome"]) == (200, "late")
        assert counted(frontend, "late") == 1

    run(models, lambda stub: make_config(stub, {"detect": [("detector", 1, 1)], "classify": [("classifier", 1, 80)]},
                                         SPLIT, slo_ms=100, earlyDropping=False), scenario)


def test_a_margin_drops_what_the_least_time_alone_would_let_through():
    models = {"only": StubModel()}

    async def scenario(frontend, url, session):
        assert (await post(session, url))[0] == 503

    # 100 ms SLO, 60 ms least time: kept by the rule alone, dropped with a 50 ms margin.
    run(models, lambda stub: make_config(stub, {"t": [("only", 1, 60)]}, slo_ms=100, dropMarginMilliseconds=50),
        scenario)
    assert models["only"].seen == []


def test_beyond_max_in_flight_requests_get_429_at_once_and_are_counted_as_dropped_for_overload():
    models = {"slow": StubModel(delay_s=0.3)}

    async def scenario(frontend, url, session):
        answers = await asyncio.gather(*(post(session, url) for _ in range(6)))
        statuses = sorted(status for status, _, _ in answers)
        assert statuses == [200, 200, 429, 429, 429, 429]
        assert counted(frontend, "dropped", "overload") == 4
        assert counted(frontend, "ok") == 2

    run(models, lambda stub: make_config(stub, {"t": [("slow", 1, 1)]}, maxInFlight=2), scenario)


@pytest.mark.parametrize("outcome", ["ok", "late"])
def test_the_latency_histogram_counts_every_answered_request(outcome):
    models = {"m": StubModel(delay_s=0.02)}

    async def scenario(frontend, url, session):
        for _ in range(3):
            assert (await post(session, url))[2]["Tessera-Outcome"] == outcome
        histogram = frontend.registry.get_sample_value("tessera_frontend_request_seconds_count", {"system": "demo"})
        assert histogram == counted(frontend, outcome) == 3

    slo = 1000 if outcome == "ok" else 10
    run(models, lambda stub: make_config(stub, {"t": [("m", 1, 0)]}, slo_ms=slo, earlyDropping=False), scenario)
