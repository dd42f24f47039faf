"""The stage latency model: batch latency + max(batch latency, batch formation time)."""

import math

import pytest

from tessera.planner.latency import fits_budget, min_segment_load_rps, stage_latency_ms


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
