"""The whole-slice cuts' integer knapsack: the fewest compute slices whose instances carry a demand."""

from __future__ import annotations

import itertools

import pytest

from tessera.planner.milp import fewest_slices


def brute_force(capacity: dict[int, float], demand: float, most: int) -> int:
    sizes = sorted(capacity)
    best = most
    for counts in itertools.product(range(most + 1), repeat=len(sizes)):
        slices = sum(size * count for size, count in zip(sizes, counts))
        if slices < best and sum(capacity[size] * count for size, count in zip(sizes, counts)) >= demand:
            best = slices
    return best


@pytest.mark.parametrize("demand", [1.0, 99.0, 100.0, 101.0, 260.0, 349.0, 500.0, 777.0])
def test_the_fewest_slices_match_a_brute_force_search(demand):
    capacity = {1: 100.0, 2: 250.0, 3: 330.0}
    assert fewest_slices(capacity, demand, most=12) == brute_force(capacity, demand, most=12)


def test_a_larger_instance_can_beat_rounding_up_the_best_per_slice_rate():
    # 1g carries 100 (100 per slice), 2g 190: 300 req/s needs 3 slices of 1g, not the 2g's rate rounded
    assert fewest_slices({1: 100.0, 2: 190.0}, 300.0, most=10) == 3
    assert fewest_slices({1: 100.0, 2: 190.0}, 190.0, most=10) == 2


def test_past_the_cap_the_answer_is_the_cap_an_under_estimate():
    assert fewest_slices({1: 1.0}, 1000.0, most=7) == 7


def test_without_any_usable_instance_no_slice_count_carries_demand():
    assert fewest_slices({}, 5.0, most=29) == 29
