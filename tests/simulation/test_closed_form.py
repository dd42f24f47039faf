"""The simulator against queueing theory on one replica."""

import numpy as np
import pytest

from tessera.planner.simulation import engine, metrics
from tessera.planner.simulation.entities import single_server
from tessera.planner.simulation.policies import Dispatch, Policies
from tessera.planner.simulation.workloads import constant

DETERMINISTIC = Policies(p99_over_p50=1.0)


def _latency(server, rate_rps: float, duration_s: float, policies: Policies = DETERMINISTIC) -> np.ndarray:
    server.systems[0].demand_rps = rate_rps
    output = engine.run(server, constant(duration_s), policies)
    return output.systems[0].latency


@pytest.mark.parametrize("utilisation", [0.3, 0.6, 0.85])
def test_unbatched_replica_has_the_md1_mean_wait(utilisation):
    service_s = 0.010
    server = single_server(batch=1, processes=1, batching_delay_s=0.0, latency_s=np.array([0.0, service_s]))
    latency = _latency(server, utilisation / service_s, duration_s=4000)
    md1_wait_s = utilisation * service_s / (2 * (1 - utilisation))  # Pollaczek-Khinchine, deterministic service
    assert np.mean(latency) - service_s == pytest.approx(md1_wait_s, rel=0.05)


def test_two_processes_share_one_queue_like_md2():
    # M/M/2 at 50% per server waits S/3 (Erlang C = 1/3); Cosmetatos's M/D/c correction
    # (accurate to a few %) gives M/D/2: 0.5 x (1 + 0.5 x (sqrt(14) - 2) / 16) x S/3 = 0.1757 S.
    service_s = 0.010
    pair = single_server(batch=1, processes=2, batching_delay_s=0.0, latency_s=np.array([0.0, service_s]))
    latency = _latency(pair, 2 * 0.5 / service_s, duration_s=4000,
                       policies=Policies(p99_over_p50=1.0, dispatch=Dispatch.EARLIEST_FREE))
    wait_s = np.mean(latency) - service_s
    assert wait_s == pytest.approx(0.1757 * service_s, rel=0.08)


def test_a_batch_left_unfilled_leaves_after_the_batching_delay():
    # 1 request/s against a batch of 8 and a 50 ms delay: almost every batch closes on the timer with
    # one request (a batch of one takes 2 ms); none waits longer than the delay plus a full batch.
    server = single_server(batch=8, processes=1, batching_delay_s=0.050,
                           latency_s=np.linspace(0.0, 0.016, 9))
    latency = _latency(server, rate_rps=1.0, duration_s=500)
    assert np.median(latency) == pytest.approx(0.050 + 0.002, abs=1e-9)
    assert latency.max() <= 0.050 + 0.016 + 1e-9


def test_batches_fill_without_waiting_for_the_timer_when_demand_is_high():
    server = single_server(batch=4, processes=1, batching_delay_s=10.0, latency_s=np.array([0, 1, 1, 1, 1.0]) * 1e-3)
    server.systems[0].demand_rps = 1000.0
    output = engine.run(server, constant(60), DETERMINISTIC)
    served = output.busy_s[0] / 1e-3  # batches run, each 1 ms
    assert served == pytest.approx(output.systems[0].source_arrival.size / 4, rel=0.01)
    assert np.max(output.systems[0].latency) < 0.05


def test_lognormal_spread_has_the_asked_p99_over_p50():
    server = single_server(batch=1, processes=64, batching_delay_s=0.0, latency_s=np.array([0.0, 0.010]))
    latency = _latency(server, rate_rps=200, duration_s=500,
                       policies=Policies(p99_over_p50=1.6, dispatch=Dispatch.EARLIEST_FREE))
    assert np.percentile(latency, 99) / np.percentile(latency, 50) == pytest.approx(1.6, rel=0.05)


def test_early_dropping_drops_what_cannot_meet_the_slo_and_keeps_the_rest_in_time():
    # Overloaded 2x: without dropping the queue grows without bound; with it, what is served is on time.
    server = single_server(batch=1, processes=1, batching_delay_s=0.0, latency_s=np.array([0.0, 0.010]),
                           slo_s=0.050)
    server.systems[0].demand_rps = 200.0
    report = metrics.report(engine.run(server, constant(120), Policies(p99_over_p50=1.0, early_dropping=True)))
    outcome = report.systems[0]
    assert outcome.violation_pct == 0.0
    assert outcome.drop_pct == pytest.approx(50, abs=3)
