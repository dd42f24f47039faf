"""The stage latency model: batch latency + max(batch latency, batch formation time, p99 queueing wait)."""

import math

import pytest

from tessera.planner.latency import (Routing, arrival_dispersion, batch_spread, bulk_share, fits_budget,
                                     max_replica_load_rps,
                                     max_segment_load_rps, min_segment_load_rps, p99_batch_latency_ms,
                                     queueing_wait_p99_ms, replica_dispersion, rounds_ahead, stage_latency_ms)
from tessera.planner.profiles import Profile, ProfileSource, measured_spread


def test_batch_one_takes_twice_the_batch_latency_at_any_load():
    assert stage_latency_ms(10, batch=1, mps=1, load_per_segment_rps=0) == 20
    assert stage_latency_ms(10, batch=1, mps=3, load_per_segment_rps=1e6) == 20


def test_slow_batch_formation_adds_the_formation_time():
    # 4 requests per batch at 100 req/s: 3 more arrive in 30 ms.
    assert stage_latency_ms(10, batch=4, mps=1, load_per_segment_rps=100) == pytest.approx(10 + 30)


def test_fast_batch_formation_is_hidden_behind_the_batch_in_progress():
    # 3 more requests at 1000 req/s take 3 ms < 10 ms batch latency.
    assert stage_latency_ms(10, batch=4, mps=1, load_per_segment_rps=1000) == pytest.approx(20)


def test_mps_processes_split_the_load_and_fill_their_batches_slower():
    # 200 req/s over 2 processes is 100 req/s each: 3 requests in 30 ms.
    assert stage_latency_ms(10, batch=4, mps=2, load_per_segment_rps=200) == pytest.approx(40)


def test_a_batched_segment_without_load_never_fills_a_batch():
    assert stage_latency_ms(10, batch=2, mps=1, load_per_segment_rps=0) == math.inf


def test_min_load_is_zero_for_batch_one():
    assert min_segment_load_rps(10, batch=1, mps=4, budget_ms=15) == 0


def test_min_load_fills_mps_batches_within_the_slack_after_one_batch():
    # 2 processes x 3 requests within 50 - 10 = 40 ms: 150 req/s.
    assert min_segment_load_rps(10, batch=4, mps=2, budget_ms=50) == pytest.approx(150)


def test_min_load_is_infinite_when_the_budget_leaves_no_slack():
    assert min_segment_load_rps(10, batch=4, mps=1, budget_ms=10) == math.inf
    assert min_segment_load_rps(10, batch=4, mps=1, budget_ms=5) == math.inf


def test_at_the_min_load_the_stage_latency_equals_the_budget():
    load = min_segment_load_rps(10, batch=8, mps=3, budget_ms=60)
    assert stage_latency_ms(10, batch=8, mps=3, load_per_segment_rps=load) == pytest.approx(60)


def test_a_budget_fits_only_twice_the_batch_latency():
    assert fits_budget(10, 20)
    assert fits_budget(10, 25)
    assert not fits_budget(10, 19.9)


def test_the_queueing_wait_is_the_diffusion_p99_and_grows_with_load_and_dispersion():
    # ln(100) / 2 x 50 x 1 / (100 x 50) s = 23.0 ms at half load; bulks of 4 (D = 5) wait five times longer.
    assert queueing_wait_p99_ms(50, 100, dispersion=1) == pytest.approx(math.log(100) / 2 * 10)
    assert queueing_wait_p99_ms(50, 100, dispersion=5) == pytest.approx(5 * math.log(100) / 2 * 10)
    assert queueing_wait_p99_ms(90, 100, 1) > queueing_wait_p99_ms(50, 100, 1)
    assert queueing_wait_p99_ms(100, 100, 1) == math.inf


def test_dispersion_zero_or_no_load_means_no_wait():
    assert queueing_wait_p99_ms(99, 100, dispersion=0) == 0
    assert queueing_wait_p99_ms(0, 100, dispersion=5) == 0


def test_a_queued_request_waits_for_the_batch_in_progress_and_the_whole_rounds_ahead_then_its_own():
    # batch 1, 10 ms, 100 rps: at 50 rps the p99 wait is 23 ms, 2.3 requests ahead: two more rounds.
    assert rounds_ahead(50, 100, dispersion=1, round_requests=1) == 2
    assert stage_latency_ms(10, 1, 1, 50, throughput_rps=100, dispersion=1) == pytest.approx(10 + 10 + 2 * 10)


def test_a_batching_server_takes_mps_x_batch_requests_a_round_so_less_than_a_round_ahead_adds_no_wait():
    # batch 2 on 3 processes, 80 ms, 75 rps: 2.3 requests ahead at 50 rps ride in the next round.
    assert rounds_ahead(50, 75, dispersion=1, round_requests=6) == 0
    assert stage_latency_ms(80, 2, 3, 50, throughput_rps=75, dispersion=1) == pytest.approx(160)


def test_the_most_load_lets_the_queue_ahead_reach_the_rounds_the_budget_holds():
    # 175 ms hold two 80 ms batches and no more round: below 6 requests ahead, 2.3026 lam = 6 (75 - lam).
    most = max_segment_load_rps(80, 75, 1, budget_ms=175, round_requests=6)
    assert most == pytest.approx(450 / (6 + math.log(100) / 2))
    assert stage_latency_ms(80, 2, 3, most, 75, 1) == pytest.approx(160)
    assert stage_latency_ms(80, 2, 3, most * 1.01, 75, 1) == pytest.approx(240)


def test_batch_formation_overlaps_the_queueing_wait():
    # batch 4 at 20 rps forms in 150 ms, longer than the 10 ms batch in progress plus a 0.5 ms wait.
    wait = queueing_wait_p99_ms(20, 400, 1)
    assert stage_latency_ms(10, 4, 1, 20, throughput_rps=400, dispersion=1) == pytest.approx(10 + 150)
    assert wait < 140


@pytest.mark.parametrize("dispersion", [1, 3, 18.8])
def test_at_the_most_load_the_rounds_ahead_fill_the_budget_after_two_batches(dispersion):
    # batch 4, 10 ms, 400 rps: 60 ms hold four rounds beside two batches, so up to 20 requests ahead.
    most = max_segment_load_rps(10, 400, dispersion, budget_ms=60, round_requests=4)
    assert 0 < most < 400
    assert queueing_wait_p99_ms(most, 400, dispersion) / 1000 * 400 == pytest.approx(20)
    assert stage_latency_ms(10, 4, 1, most, 400, dispersion) == pytest.approx(60)
    assert stage_latency_ms(10, 4, 1, most * 1.001, 400, dispersion) > 60


def test_the_most_load_is_zero_without_room_for_two_batches_and_the_throughput_without_queueing():
    assert max_segment_load_rps(10, 400, 1, budget_ms=19.9, round_requests=4) == 0
    assert max_segment_load_rps(10, 400, 1, budget_ms=20, round_requests=4) > 0  # less than a round ahead fits
    assert max_segment_load_rps(10, 400, 0, budget_ms=60, round_requests=4) == 400


def test_poisson_bulks_of_mean_m_have_dispersion_one_plus_m():
    assert arrival_dispersion(0) == 1
    assert arrival_dispersion(17.8) == pytest.approx(18.8)


def test_only_estimates_are_scaled_to_their_p99():
    assert p99_batch_latency_ms(Profile(latency_ms=10, throughput_rps=1, source=ProfileSource.ESTIMATED),
                                1.3) == pytest.approx(13)
    assert p99_batch_latency_ms(Profile(latency_ms=10, throughput_rps=1, source=ProfileSource.MEASURED), 1.3) == 10
    assert p99_batch_latency_ms(Profile(latency_ms=10, throughput_rps=1, source=ProfileSource.GIVEN), 1.3) == 10


def test_an_estimate_with_its_variants_measured_spread_is_scaled_by_that_not_the_default():
    estimate = Profile(latency_ms=10, throughput_rps=1, source=ProfileSource.ESTIMATED, spread=1.12)
    assert batch_spread(estimate, 1.3) == 1.12
    assert p99_batch_latency_ms(estimate, 1.3) == pytest.approx(11.2)


def test_the_measured_spread_is_the_median_p99_over_p50_of_the_measurements_that_recorded_both():
    def measured(p99, p50=None):
        return Profile(latency_ms=p99, throughput_rps=1, source=ProfileSource.MEASURED, p50_ms=p50)
    assert measured_spread([measured(11, 10), measured(30, 20), measured(12, 10), measured(50)]) == pytest.approx(1.2)
    assert measured_spread([measured(50), Profile(latency_ms=9, throughput_rps=1, source=ProfileSource.ESTIMATED,
                                                  p50_ms=3)]) is None


def test_per_request_routing_hands_a_replica_its_share_of_each_bulk():
    assert bulk_share(0.25, Routing.PER_REQUEST) == 0.25
    assert bulk_share(3.0, Routing.PER_REQUEST) == 1.0  # past the least demand it may take all of it
    assert replica_dispersion(20, 125, 500, Routing.PER_REQUEST) == pytest.approx(1 + 20 * 0.25)


def test_behind_a_service_a_replica_sees_the_p99_of_its_pinned_connections():
    # Binomial(16, 1/2): P(X <= 12) = 0.989, P(X <= 13) = 0.998, so 13 of 16 connections.
    assert bulk_share(0.5, Routing.PER_CONNECTION) == pytest.approx(13 / 16)
    # However small its share, a replica that gets requests holds one connection.
    assert bulk_share(1e-6, Routing.PER_CONNECTION) == pytest.approx(1 / 16)
    assert bulk_share(1e-6, Routing.PER_CONNECTION, connections=4) == pytest.approx(1 / 4)


def test_one_replica_routing_and_no_share_base_keep_the_whole_bulk():
    assert bulk_share(0.1, Routing.ONE_REPLICA) == 1.0
    assert replica_dispersion(20, 125, 0.0, Routing.PER_REQUEST) == 21


@pytest.mark.parametrize("routing", list(Routing))
@pytest.mark.parametrize("base", [50.0, 500.0, 5000.0])
def test_at_the_most_replica_load_the_wait_with_its_bulk_share_fills_the_budget(routing, base):
    most = max_replica_load_rps(2.0, 500.0, 70.0, bulk=20.0, base_rps=base, routing=routing, round_requests=1)
    def stage(load):
        return stage_latency_ms(2.0, 1, 1, load, 500.0, replica_dispersion(20.0, load, base, routing))
    assert stage(most) <= 70.0 * (1 + 1e-9)
    assert stage(most * (1 + 1e-3)) > 70.0
    # a split never carries less than the whole bulk, nor per request less than per connection
    assert most >= max_segment_load_rps(2.0, 500.0, 21.0, 70.0, round_requests=1) * (1 - 1e-12)
    if routing is Routing.PER_REQUEST:
        assert most >= max_replica_load_rps(2.0, 500.0, 70.0, 20.0, base, Routing.PER_CONNECTION,
                                            round_requests=1) * (1 - 1e-12)
