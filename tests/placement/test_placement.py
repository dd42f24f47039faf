"""Placement: tessera's packing, the baselines, the lower bound, judged by the predictors."""

import dataclasses
import math

import numpy as np
import pytest

from tessera.planner.placement import (AdapterDemand, PlacementProblem, PoolLimits, ServerModel, lower_bound, place,
                                       zigzag_order)
from tessera.planner.placement.bound import server_capacity_rps
from tessera.planner.placement.packing import STRATEGIES
from tessera.planner.placement.scenarios import Scenario, problem_of
from tessera.planner.placement.model import MOST_BUSY_PER_SLOT, MOST_CYCLE_S
from tessera.planner.placement.server import FEWEST_SWEPT_ADAPTERS, ServerLoad
from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.sim import OUTSTANDING_REQUEST_CAP, ServerConfig, simulate
from tessera.planner.twin.sweep import N_LEVELS
from tessera.planner.twin.workload import VLLM_MAX_LORA_RANKS, Workload, server_max_lora_rank


@pytest.fixture(scope="module", params=["qwen", "llama"])
def pool(request):
    problem = problem_of(Scenario(adapters=400, total_rps=70.0, model=request.param))
    return problem, ServerModel(problem)


def test_zigzag_order_takes_ranks_descending_and_alternates_hot_and_cold_within_a_rank():
    adapters = [AdapterDemand(f"a{i}", rank, rate) for i, (rank, rate) in
                enumerate([(8, 1.0), (32, 0.1), (8, 3.0), (32, 0.5), (8, 2.0), (32, 0.3), (8, 0.5)])]
    order = [(a.rank, a.rate_rps) for a in zigzag_order(adapters)]
    assert order == [(32, 0.5), (32, 0.1), (32, 0.3), (8, 3.0), (8, 0.5), (8, 2.0), (8, 1.0)]


@pytest.mark.parametrize("strategy", ["tessera", "maxbase", "maxbase*", "dlora", "random"])
def test_every_strategy_places_every_adapter_exactly_once(pool, strategy):
    problem, model = pool
    placement = place(problem, strategy, model)
    names = [n for s in placement.servers for n in s.adapters]
    assert sorted(names) == sorted(a.name for a in problem.adapters)


def test_tessera_servers_start_keep_up_and_pass_the_guard(pool):
    problem, model = pool
    placement = place(problem, "tessera", model)
    by_name = {a.name: a for a in problem.adapters}
    for server in placement.servers:
        load = ServerLoad.of(by_name[n] for n in server.adapters)
        assert not model.profile.refuses_to_start(server.max_loras, server.max_lora_rank)
        assert server.max_lora_rank == max(by_name[n].rank for n in server.adapters)
        assert server.predicted is not None and server.predicted.keeps_up
        assert server.max_loras >= load.n or (load.busy8 <= MOST_BUSY_PER_SLOT * server.max_loras
                                               and server.predicted.cycle_s <= MOST_CYCLE_S)


def test_tessera_uses_no_more_servers_than_the_baselines_whose_servers_the_predictors_call_healthy(pool):
    problem, model = pool
    tessera = place(problem, "tessera", model).servers_used
    for strategy in ("maxbase", "maxbase*", "dlora", "random"):
        baseline = place(problem, strategy, model)
        if baseline.predicted_ok:
            assert tessera <= baseline.servers_used, strategy


def test_maxbase_fills_servers_to_the_most_slots_memory_starts_and_is_blind_to_rates():
    problem = PlacementProblem(tuple(AdapterDemand(f"a{i}", 32, 0.2) for i in range(600)), "qwen")
    model = ServerModel(problem)
    full = place(problem, "maxbase", model).servers[0]
    assert full.max_loras == len(full.adapters) == model.most_startable_slots(32)
    assert full.starts and not model.starts(full.max_loras + 1, 32)
    assert not full.predicted_ok  # 47 req/s on one server
    assert place(problem, "tessera", model).predicted_ok


def test_slot_limit_and_adapters_per_server_limit_are_respected():
    problem = dataclasses.replace(problem_of(Scenario(300, 30.0, "qwen")),
                                  limits=PoolLimits(max_adapters_per_server=70, max_lora_slots=48))
    placement = place(problem, "tessera")
    assert all(len(s.adapters) <= 70 and s.max_loras <= 48 for s in placement.servers)


def test_adapters_beyond_the_server_limit_are_reported_unplaced():
    problem = dataclasses.replace(problem_of(Scenario(300, 90.0, "qwen")), limits=PoolLimits(max_servers=2))
    placement = place(problem, "tessera")
    assert placement.servers_used == 2 and placement.unplaced and not placement.predicted_ok


def test_lower_bound_is_at_most_the_servers_of_every_healthy_placement(pool):
    problem, model = pool
    bound = lower_bound(problem, model)
    assert bound.servers >= math.ceil(sum(a.rate_rps for a in problem.adapters) / bound.capacity_rps)
    for strategy in ("tessera", "dlora", "maxbase*"):
        placement = place(problem, strategy, model)
        if placement.predicted_ok:
            assert bound.servers <= placement.servers_used


def test_the_twin_finishes_no_more_requests_than_the_lower_bounds_server_capacity():
    """The bound's argument, checked on the twin itself: one adapter (the cheapest batch), one
    slot, offered twice the bound; the twin finishes at most 0.9 x the bound's capacity."""
    problem = PlacementProblem((AdapterDemand("a", 8, 1.0),), "qwen")
    capacity = lower_bound(problem, ServerModel(problem)).capacity_rps
    duration = 300.0
    result = simulate(Workload(ranks=np.array([8]), rates=np.array([2 * capacity]), duration_s=duration),
                      load_profile("qwen"), ServerConfig(max_loras=1, outstanding_cap=OUTSTANDING_REQUEST_CAP), seed=0)
    assert result.finished / duration <= 0.9 * capacity


def test_the_twin_on_many_slots_finishes_no_more_than_the_capacity_at_that_slot_count_and_close_to_it():
    """Every slot costs slot_ms a step (the LoRA kernels' grid): one adapter on 64 slots, offered twice the
    capacity the bound's argument gives at 64 slots; the twin finishes at most 0.9 x it, and at least 0.93 x
    that, which it would not if the bound left the slot cost out (65 x 0.23 ms, a tenth of a full step there:
    0.86) or mis-signed it."""
    problem = PlacementProblem((AdapterDemand("a", 8, 1.0),), "qwen")
    capacity = server_capacity_rps(ServerModel(problem), 8, slots=64)
    duration = 300.0
    result = simulate(Workload(ranks=np.array([8]), rates=np.array([2 * capacity]), duration_s=duration),
                      load_profile("qwen"), ServerConfig(max_loras=64, outstanding_cap=OUTSTANDING_REQUEST_CAP),
                      seed=0)
    assert 0.93 * 0.9 * capacity <= result.finished / duration <= 0.9 * capacity


def test_the_capacity_falls_with_each_distinct_adapter_a_step_holds():
    """The LoRA multiplier grows by lora_c1 for each distinct adapter in the batch (Qwen: 0.00995 on 1.777)."""
    problem = PlacementProblem((AdapterDemand("a", 8, 1.0),), "qwen")
    model = ServerModel(problem)
    one, many = (server_capacity_rps(model, 8, slots=64, adapters_in_batch=n) for n in (1, 64))
    assert many == pytest.approx(one * (1.777 + 0.00995) / (1.777 + 64 * 0.00995), rel=0.05)


@pytest.mark.parametrize("model", ["qwen", "llama"])
def test_a_lone_adapter_on_its_own_slot_is_healthy_at_every_rate_up_to_one_the_twin_keeps_up(model):
    """Below the sweep's fewest adapters (8) the trees extrapolate: they called one Llama adapter at 5.8
    req/s starved and at 10 req/s healthy. Such a server is judged as the sweep's fewest, a slot each."""
    assert FEWEST_SWEPT_ADAPTERS == N_LEVELS[0]
    for rate in (0.5, 2.0, 5.8, 10.0, 20.0):
        adapter = AdapterDemand("a", 16, rate)
        assert ServerModel(PlacementProblem((adapter,), model)).healthy(ServerLoad.of([adapter]), 1, 16) is not None
    twin = simulate(Workload(ranks=np.array([16]), rates=np.array([20.0]), duration_s=600.0), load_profile(model),
                    ServerConfig(max_loras=1, outstanding_cap=OUTSTANDING_REQUEST_CAP), seed=0)
    assert not twin.starved


def test_idle_adapters_are_placed_and_an_empty_pool_needs_no_server():
    idle = PlacementProblem(tuple(AdapterDemand(f"a{i}", 16, 0.0) for i in range(30)), "llama")
    placement = place(idle, "tessera")
    assert placement.servers_used == 1 and placement.predicted_ok
    empty = PlacementProblem((), "qwen")
    assert all(place(empty, s).servers_used == 0 for s in ("tessera", "maxbase", "maxbase*", "dlora", "random"))


@pytest.mark.parametrize("rank, flag", [(1, 8), (8, 8), (9, 16), (17, 32), (257, 320), (321, 512), (512, 512)])
def test_a_server_runs_the_smallest_max_lora_rank_vllm_accepts_at_or_above_its_adapters_rank(rank, flag):
    assert server_max_lora_rank(rank) == flag


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_gives_every_server_a_max_lora_rank_vllm_starts_with(strategy):
    ranks = [4, 17, 100, 300, 33, 8, 1, 200, 9]
    adapters = tuple(AdapterDemand(f"a{i}", rank, 0.2) for i, rank in enumerate(ranks))
    by_name = {a.name: a for a in adapters}
    placement = place(PlacementProblem(adapters, "qwen"), strategy)
    for server in placement.servers:
        assert server.max_lora_rank in VLLM_MAX_LORA_RANKS
        assert server.max_lora_rank == server_max_lora_rank(max(by_name[n].rank for n in server.adapters))
