"""An AdapterPool's per-adapter rates from its demandSource (operator/reconcile/adapter_pool_demand.py, pure).

Readings are Prometheus' instant-query answers as JSON (the shape the HTTP
API returns); the hysteresis is the compound systems' (demand/hysteresis.py).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import promql_parser as pp

from tessera.operator.api.adapter_pools import read_adapter_pool
from tessera.operator.demand import hysteresis as hy
from tessera.operator.demand.prometheus import Reason, unknown
from tessera.operator.demand.promql import selectors
from tessera.operator.api import status as st
from tessera.operator.reconcile.actions import PostEvent
from tessera.operator.reconcile.adapter_pool_decide import (choose_placement, decide_placement_record,
                                                            decide_pool_status, decide_servers, moves_between,
                                                            pool_status, with_rates, within)
from tessera.operator.reconcile.adapter_pool_demand import (AdapterReadings, PoolWindows, adapter_readings,
                                                            decide_rates, demand_query, demand_status,
                                                            metrics_condition, recorded_rates, rates_record,
                                                            windows_from_status)
from tessera.planner.adapter_pool import AdapterDemandQuery
from tessera.planner.placement import place

from .test_adapter_pool_replacement import NOW, pool_document, reconcile, scenario_adapters

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
RULES = hy.Windows(stabilization_s=300, repartition_s=600, step=0.25)
PLACED = {"a": 10.0, "b": 5.0, "c": 1.0}
PRIORS: dict[str, float | None] = {"a": 8.0, "b": 5.0, "c": None}


def answer(*series: tuple[dict, object]) -> dict:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [1.0, str(v)]} for m, v in series]}}


def readings(rates: dict[str, float]) -> AdapterReadings:
    return AdapterReadings(dict(rates))


def test_each_series_goes_to_the_adapter_its_label_names_and_the_others_are_ignored():
    found = adapter_readings(answer(({"adapter": "a"}, 3.5), ({"adapter": "b"}, "NaN"), ({"adapter": "c"}, -1),
                                    ({"adapter": "stranger"}, 9), ({"adapter": "a"}, 7), ({"other": "c"}, 2)),
                             "adapter", {"a", "b", "c"})
    assert found.rates == {"a": 3.5}  # NaN, negative, no such adapter, a second series of a, no label: ignored
    assert (found.failure, found.ignored) == (None, 5)


def test_an_adapter_without_a_series_keeps_the_rate_it_was_placed_for_and_counts_unknown():
    decision = decide_rates(PLACED, PRIORS, readings({"a": 10.1}), PoolWindows(), T0, RULES)
    assert decision.rates == PLACED  # b and c read nothing: neither is zero
    assert (decision.measured, decision.unknown, decision.move) == (1, 2, hy.Move.HOLD)


def test_a_query_that_fails_keeps_every_rate_restarts_the_window_and_says_why():
    open_window = PoolWindows(below_since=T0, peak_ratio=0.5, last_reading=T0)
    failed = AdapterReadings({}, unknown(Reason.TIMEOUT, "no answer from Prometheus within 5 s"))
    decision = decide_rates(PLACED, PRIORS, failed, open_window, T0 + timedelta(seconds=15), RULES)
    assert decision.rates == PLACED and decision.move == hy.Move.UNKNOWN
    assert (decision.windows.below_since, decision.windows.peak_ratio) == (None, None)
    condition = metrics_condition(decision)
    assert (condition.status, condition.reason) == (False, Reason.TIMEOUT)
    assert "the placement in force keeps serving" in condition.message


def test_readings_within_the_tolerance_hold_the_placed_rates():
    jitter = {"a": 10.4, "b": 4.8, "c": 1.04}  # each within 5%
    decision = decide_rates(PLACED, PRIORS, readings(jitter), PoolWindows(), T0, RULES)
    assert decision.rates == PLACED and decision.move == hy.Move.HOLD


def test_a_rise_beyond_the_tolerance_is_placed_for_at_once_the_others_keep_their_rate():
    decision = decide_rates(PLACED, PRIORS, readings({"a": 12.0, "b": 5.1, "c": 1.0}), PoolWindows(), T0, RULES)
    assert decision.move == hy.Move.UP and decision.windows.last_scale_up == T0
    assert decision.rates == {"a": 12.0, "b": 5.0, "c": 1.0}


def test_a_fall_waits_the_stabilization_window_then_takes_one_bounded_step_no_lower_than_the_windows_peak():
    low = {"a": 2.0, "b": 5.0, "c": 1.0}
    windows, now = PoolWindows(), T0
    for _ in range(20):  # every 15 s for 300 s, a's reading at a fifth of its placed rate, once at 0.7 of it
        decision = decide_rates(PLACED, PRIORS, readings(low if now != T0 + timedelta(seconds=60) else
                                                         {**low, "a": 7.0}), windows, now, RULES)
        assert decision.rates == PLACED and decision.move == hy.Move.WAIT
        windows, now = decision.windows, now + timedelta(seconds=15)
    decision = decide_rates(PLACED, PRIORS, readings(low), windows, now, RULES)
    assert decision.move == hy.Move.DOWN
    assert decision.rates == {"a": 7.5, "b": 5.0, "c": 1.0}  # max(0.7 peak share, 1 - 25% step) of 10


def test_an_adapter_with_neither_a_prior_nor_a_placed_rate_nor_a_reading_is_placed_at_the_pools_median():
    decision = decide_rates(None, {"a": 8.0, "b": 2.0, "c": None, "d": 4.0}, readings({}), PoolWindows(), T0, RULES)
    assert decision.rates == {"a": 8.0, "b": 2.0, "c": 4.0, "d": 4.0}
    assert decision.unknown == 4


def test_the_query_is_confined_to_the_pools_namespace_whatever_it_names():
    source = AdapterDemandQuery(query='sum by (adapter) (rate(requests_total{namespace!="shop"}[1m])) '
                                      'or rate(other_total{namespace="bank"}[1m])')
    query = demand_query(source, "bots", "shop", {})
    assert isinstance(query, str)
    found = selectors(pp.parse(query))
    assert {s.name for s in found} == {"requests_total", "other_total"}
    assert all([(m.op, m.value) for m in s.matchers.matchers if m.name == "namespace"]
               == [(pp.MatchOp.Equal, "shop")] for s in found)
    refused = demand_query(AdapterDemandQuery(query="sum(("), "bots", "shop", {})
    assert not isinstance(refused, str) and refused.reason == Reason.QUERY_REJECTED


def test_a_10_percent_rate_change_measured_moves_few_adapters():
    """Readings 10% above the placed rates for a tenth of 200 adapters re-place the pool through the re-placement
    against the placement in force: few adapters move (a fresh placement moves 90 of them)."""
    document = pool_document(scenario_adapters(200, 120.0))
    document["spec"]["demandSource"] = {"query": "sum by (adapter) (rate(requests_total[1m]))"}
    problem = within(read_adapter_pool(document).problem, 16)
    before = place(problem, "tessera")
    placed = {a.name: a.rate_rps for a in problem.adapters}
    hotter = set(random.Random(3).sample(sorted(placed), 20))
    measured = {name: rate * (1.1 if name in hotter else 1.0) for name, rate in placed.items()}
    decision = decide_rates(placed, placed, readings(measured), PoolWindows(), T0, RULES)
    assert decision.move == hy.Move.UP
    moves = choose_placement(with_rates(problem, decision.rates), before).moves
    assert moves is not None and not moves.afresh
    assert len(moves.moved) <= 10  # 5% of 200
    assert len(moves_between(before, place(with_rates(problem, decision.rates), "tessera"), True).moved) > 10


def test_a_pool_with_only_a_demand_source_is_valid():
    document = pool_document(scenario_adapters(20))
    document["spec"]["demandSource"] = {"query": "sum by (adapter) (rate(requests_total[1m]))"}
    for adapter in document["spec"]["adapters"]:
        del adapter["expectedRequestsPerSecond"]
    pool = read_adapter_pool(document)
    assert pool.valid, pool.error


def test_status_gives_counts_and_totals_and_the_windows_resume_from_it():
    decision = decide_rates(PLACED, PRIORS, readings({"a": 2.0, "b": 5.0}), PoolWindows(last_reading=T0),
                            T0 + timedelta(seconds=15), RULES)
    status = demand_status(decision, {}, T0 + timedelta(seconds=15), RULES)
    assert (status["adaptersMeasured"], status["adaptersUnknown"], status["placedForRequestsPerSecond"],
            status["observedRequestsPerSecond"]) == (2, 1, 16.0, 7.0)
    resumed = windows_from_status({"demand": status})
    assert resumed.below_since == decision.windows.below_since and resumed.peak_ratio == 0.2


def test_the_rates_record_reads_back_as_written_and_a_broken_one_as_none():
    assert recorded_rates(rates_record(PLACED)) == PLACED
    assert recorded_rates('{"a": "x"}') is None and recorded_rates("[1]") is None and recorded_rates(None) is None


def test_a_pool_whose_query_fails_keeps_its_placement_writes_no_child_and_posts_an_event():
    """The operator has no Prometheus here (a failure of the table in docs/demand.md, like an unreachable one): the
    pool is placed for its priors, recorded in its placement ConfigMap; the next reconcile writes no child, and the
    turn of MetricsAvailable to False is an Event."""
    document = pool_document(scenario_adapters(60))
    document["spec"]["demandSource"] = {"query": "sum by (adapter) (rate(requests_total[1m]))"}
    _, _, live = reconcile(document, [])
    (record,) = [c for c in live if c["kind"] == "ConfigMap"]
    assert recorded_rates(record["data"]["rates.json"]) == {a["name"]: a["expectedRequestsPerSecond"]
                                                            for a in document["spec"]["adapters"]}
    read_before = {"conditions": [{"type": "MetricsAvailable", "status": "True", "reason": "DemandRead",
                                   "message": "60 adapter(s) measured", "lastTransitionTime": NOW}]}
    again, planned, _ = reconcile(pool_document(document["spec"]["adapters"], status=read_before) | {
        "spec": document["spec"]}, live)
    assert again.moves is not None and not again.moves.changed
    assert decide_placement_record(again, live) == [] and decide_servers(planned, live, True) == []
    assert again.demand is not None
    condition = metrics_condition(again.demand)
    assert (condition.status, condition.reason) == (False, Reason.NOT_CONFIGURED)
    phase, conditions, summary = pool_status(again.pool, again, planned, live)
    status = st.build_status(1, phase, [*conditions, condition], summary, again.pool.status, NOW,
                             demand_status(again.demand, again.pool.status, T0, RULES))
    events = [a.body for a in decide_pool_status(again.pool, status, NOW) if isinstance(a, PostEvent)]
    assert [e["reason"] for e in events if e["message"].startswith("MetricsAvailable")] == [Reason.NOT_CONFIGURED]
    assert status["demand"]["adaptersUnknown"] == 60 and "observedRequestsPerSecond" not in status["demand"]
