"""The twin check judges every adapter of a server, not only the server's total."""

import time
import warnings

import numpy as np
import pytest

from tessera.planner.placement import AdapterDemand, Placement, PlacementProblem, ServerModel, ServiceBound
from tessera.planner.placement.packing import describe
from tessera.planner.placement.server import ServerLoad
from tessera.planner.placement.twin_check import MAX_CHECKED_RATE_RPS, TwinCheckTooLarge, check_placement


def _zipf_adapters(n=60, total=25.0):
    weights = 1.0 / np.arange(1, n + 1)
    return tuple(AdapterDemand(f"a{i:02d}", 16, float(total * w / weights.sum())) for i, w in enumerate(weights))


def test_a_server_unstarved_by_the_09_rule_can_leave_cold_adapters_under_their_bound_and_the_guard_refuses_it():
    adapters = _zipf_adapters()
    problem = PlacementProblem(adapters, "qwen", bound=ServiceBound(min_served_fraction=0.9))
    model = ServerModel(problem)
    placement = Placement("hand", model.profile.model, (describe(model, 0, adapters, 8, 16),))
    checked = check_placement(placement, adapters, model.profile, problem.bound).servers[0]
    assert checked.twin.starts and not checked.twin.starved
    assert checked.twin.adapters_under_bound and not checked.twin.passed
    assert not model.predict(ServerLoad.of(adapters), 8, 16).guard_ok
    assert not checked.predicted_ok and not checked.disagrees


def test_a_server_the_memory_model_refuses_fails_the_check_without_simulating():
    adapters = tuple(AdapterDemand(f"a{i}", 32, 0.01) for i in range(249))
    problem = PlacementProblem(adapters, "qwen")
    model = ServerModel(problem)
    placement = Placement("hand", model.profile.model, (describe(model, 0, adapters, 249, 32),))
    checked = check_placement(placement, adapters, model.profile, problem.bound).servers[0]
    assert not checked.twin.starts and not checked.twin.passed and checked.twin.wall_s < 0.5


def test_each_adapters_p99_time_to_first_token_is_judged_against_the_bound():
    adapters = tuple(AdapterDemand(f"a{i}", 8, 0.2) for i in range(5))
    model = ServerModel(PlacementProblem(adapters, "qwen"))
    placement = Placement("hand", model.profile.model, (describe(model, 0, adapters, 5, 8),))
    loose = check_placement(placement, adapters, model.profile, ServiceBound(0.9, p99_ttft_ms=60_000.0)).servers[0]
    tight = check_placement(placement, adapters, model.profile, ServiceBound(0.9, p99_ttft_ms=1.0)).servers[0]
    assert loose.twin.passed and not loose.twin.adapters_over_ttft
    assert set(tight.twin.adapters_over_ttft) == {a.name for a in adapters} and not tight.twin.passed
    assert 1.0 < tight.twin.ttft_p99_ms < 60_000.0


def test_tessera_placement_of_a_skewed_200_adapter_pool_passes_the_twin_check_with_every_adapter_served():
    from tessera.planner.placement import plan_placement
    from tessera.planner.placement.scenarios import Scenario, problem_of

    report = plan_placement(problem_of(Scenario(200, 30.0, "llama", 1.2)), baselines=(), gate=False)  # the packing itself
    placement = report.placement
    assert placement.twin_ok and not [s.index for s in placement.servers if s.disagrees]
    assert all(s.twin.min_served_fraction >= 0.9 for s in placement.servers)


def test_a_server_offered_more_than_the_twin_simulates_is_refused_naming_its_hottest_adapter_before_any_simulation():
    adapters = (AdapterDemand("hot", 16, 1e7), AdapterDemand("cold", 16, 0.1))
    model = ServerModel(PlacementProblem(adapters, "qwen"))
    placement = Placement("hand", model.profile.model, (describe(model, 0, adapters, 2, 16),))
    started = time.perf_counter()
    with pytest.raises(TwinCheckTooLarge, match=r"1e\+07 req/s \('hot'\).*server 0 of the hand placement") as error:
        check_placement(placement, adapters, model.profile, ServiceBound())
    assert error.value.adapter == "hot" and time.perf_counter() - started < 0.5


def test_a_server_at_the_twin_checks_rate_limit_is_simulated():
    adapters = (AdapterDemand("hot", 16, MAX_CHECKED_RATE_RPS),)
    model = ServerModel(PlacementProblem(adapters, "qwen"))
    placement = Placement("hand", model.profile.model, (describe(model, 0, adapters, 1, 16),))
    checked = check_placement(placement, adapters, model.profile, ServiceBound()).servers[0]
    assert checked.twin.starts and checked.twin.starved


def test_a_server_whose_adapters_are_all_idle_passes_without_a_warning():
    adapters = (AdapterDemand("idle", 16, 0.0), AdapterDemand("quiet", 8, 0.0))
    model = ServerModel(PlacementProblem(adapters, "qwen"))
    placement = Placement("hand", model.profile.model, (describe(model, 0, adapters, 2, 16),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = check_placement(placement, adapters, model.profile, ServiceBound()).servers[0]
    assert checked.twin.passed
