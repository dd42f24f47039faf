"""Re-placement moves few adapters and counts a restart as moving all of a server's."""

import dataclasses

import numpy as np
import pytest

from tessera.planner.placement import (AdapterDemand, Placement, PlacementProblem, ServerModel, place,
                                       replace_adapters)
from tessera.planner.placement.packing import describe
from tessera.planner.placement.scenarios import Scenario, problem_of

MOST_MOVED_SHARE = 0.05  # stated in docs/adapter-placement.md


def _scaled(problem, factors):
    return dataclasses.replace(problem, adapters=tuple(dataclasses.replace(a, rate_rps=a.rate_rps * f)
                                                       for a, f in zip(problem.adapters, factors)))


@pytest.mark.parametrize("scenario", [Scenario(1000, 150.0, "qwen"), Scenario(500, 80.0, "llama")],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("change", ["each within 10%", "all up 10%"])
def test_a_10_percent_rate_change_moves_at_most_5_percent_of_the_adapters(scenario, change):
    problem = problem_of(scenario)
    model = ServerModel(problem)
    before = place(problem, "tessera", model)
    n = len(problem.adapters)
    factors = np.random.default_rng(1).uniform(0.9, 1.1, n) if change == "each within 10%" else np.full(n, 1.1)
    after = replace_adapters(_scaled(problem, factors), before, model)
    assert after.moves <= MOST_MOVED_SHARE * n
    assert after.placement.predicted_ok
    assert sorted(x for s in after.placement.servers for x in s.adapters) == sorted(a.name for a in problem.adapters)
    kept = {s.index: set(s.adapters) for s in before.servers}
    for server in after.placement.servers:  # a server that keeps running keeps its index and flags
        if server.index in kept and server.index not in after.restarted:
            old = before.servers[server.index]
            assert (server.max_loras, server.max_lora_rank) == (old.max_loras, old.max_lora_rank)


def test_unchanged_rates_move_nothing():
    problem = problem_of(Scenario(300, 50.0, "qwen"))
    before = place(problem, "tessera")
    after = replace_adapters(problem, before)
    assert after.moves == 0 and after.placement.servers_used == before.servers_used


def test_new_adapters_are_added_not_counted_as_moves_and_removed_ones_leave():
    problem = problem_of(Scenario(200, 30.0, "qwen"))
    before = place(problem, "tessera")
    fresh = tuple(AdapterDemand(f"new-{i}", 16, 0.05) for i in range(5))
    changed = dataclasses.replace(problem, adapters=problem.adapters[3:] + fresh)
    after = replace_adapters(changed, before)
    assert after.moves == 0
    assert set(after.added) == {a.name for a in fresh}
    assert set(after.removed) == {a.name for a in problem.adapters[:3]}


def test_a_server_whose_flags_no_longer_start_restarts_and_all_its_adapters_count_as_moved():
    adapters = tuple(AdapterDemand(f"a{i}", 32, 0.02) for i in range(40))
    problem = PlacementProblem(adapters, "qwen")
    model = ServerModel(problem)
    running = Placement("tessera", model.profile.model, (describe(model, 0, adapters, 200, 32),))
    assert running.servers[0].starts
    longer = dataclasses.replace(problem, max_model_len=200_000)  # 200 rank-32 slots leave too little KV
    after = replace_adapters(longer, running)
    assert after.restarted == (0,) and after.moves == 40
    assert after.placement.servers[0].max_loras < 200 and after.placement.predicted_ok
