"""Priorities among the systems of one pool (issue 29 item 1): spec.poolPriority in the plan's objective.

One H100 (7 compute slices) and the hand-profiled systems of test_solve: a segment of c slices serves
`per_slice x c` requests/s at 1/(1 + headroom) of it, so 500 requests/s at 100 per slice take 6 slices
and two such systems cannot both be served.
"""

import pytest

from tessera.planner.catalog import gpu_product
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.quota import InstanceQuota, instances_under
from tessera.planner.solve import plan

from .test_solve import CHEAP_OR_GOOD, GPU, ONE_TASK, OPTIONS, make_system, solve


def served(plan, name: str) -> float:
    return next(s.served_rps for s in plan.systems if s.system == name)


def test_the_higher_priority_system_is_served_first_and_the_lower_one_gets_what_is_left():
    high = make_system(ONE_TASK, demand=500, name="high", pool_priority=10)
    low = make_system(ONE_TASK, demand=500, name="low")
    for systems in ([high, low], [low, high]):
        result = solve(systems, gpus=1)
        assert served(result, "high") == pytest.approx(500)
        assert served(result, "low") < 500 * 0.5


def test_raising_the_lower_systems_priority_above_the_other_turns_the_order_round():
    first = make_system(ONE_TASK, demand=500, name="first", pool_priority=1)
    second = make_system(ONE_TASK, demand=500, name="second")
    assert served(solve([first, second], gpus=1), "first") == pytest.approx(500)
    raised = second.model_copy(update={"pool_priority": 2})
    result = solve([first, raised], gpus=1)
    assert served(result, "second") == pytest.approx(500)
    assert served(result, "first") < 500 * 0.5


def test_a_higher_priority_system_keeps_its_accuracy_while_a_lower_one_loses_served_demand():
    # "good" serves 100 requests/s on 6 slices, "cheap" on 2: at equal priority the pool serves the most
    # with "cheap" and gives the rest to the other system; ranked above it, "good" stays.
    chooser = make_system(CHEAP_OR_GOOD, demand=100, accuracy_slo=0.4, name="chooser")
    other = make_system(ONE_TASK, demand=500, name="other")
    equal = solve([chooser, other], gpus=1)
    assert equal.task("chooser", "t").variant == "cheap"
    ranked = solve([chooser.model_copy(update={"pool_priority": 5}), other], gpus=1)
    assert ranked.task("chooser", "t").variant == "good"
    assert served(ranked, "chooser") == pytest.approx(100)
    assert served(ranked, "other") < served(equal, "other")


def test_a_lower_priority_system_loses_accuracy_before_served_demand():
    # 4 slices for the first system's 300 requests/s leave 3: enough for all 100 on "cheap", not on "good"
    first = make_system(ONE_TASK, demand=300, name="first", pool_priority=10)
    chooser = make_system(CHEAP_OR_GOOD, demand=100, accuracy_slo=0.4, name="chooser")
    result = solve([first, chooser], gpus=1)
    assert served(result, "first") == pytest.approx(300)
    assert result.task("chooser", "t").variant == "cheap"
    assert served(result, "chooser") == pytest.approx(100)


def test_a_quota_comes_before_priority_and_what_it_keeps_from_a_higher_priority_goes_to_the_others():
    high = make_system(ONE_TASK, demand=500, name="high", pool_priority=10)
    low = make_system(ONE_TASK, demand=500, name="low")
    # high may run two 1g.10gb instances and nothing else: 2 of the GPU's 7 slices
    quotas = [InstanceQuota(systems=frozenset({"high"}), mig_profile=p.name, limit=2 if p.name == "1g.10gb" else 0)
              for p in gpu_product(GPU).profiles]
    capped = plan([high, low], Pool(gpu=GPU, gpus=1), build_profile_store([high, low], GPU), options=OPTIONS,
                  quotas=quotas)
    assert all(instances_under(q, capped) <= q.limit for q in quotas)
    assert served(capped, "high") < 500 * 0.5
    assert served(capped, "low") > served(solve([high, low], gpus=1), "low")


def test_with_one_priority_the_pool_is_served_in_one_stage_and_with_two_one_stage_per_priority():
    plain = solve([make_system(ONE_TASK, demand=500, name="a"), make_system(ONE_TASK, demand=500, name="b")],
                  gpus=1)
    assert "serve" in plain.solver.stages and not any(s.startswith("serve-") for s in plain.solver.stages)
    ranked = solve([make_system(ONE_TASK, demand=500, name="a", pool_priority=3),
                    make_system(ONE_TASK, demand=500, name="b", pool_priority=-3)], gpus=1)
    assert [s for s in ranked.solver.stages if s.startswith("serve")] == ["serve-priority-3", "serve-priority--3"]


def test_priorities_do_not_matter_while_the_pool_serves_every_system():
    ranked = solve([make_system(ONE_TASK, demand=100, name="a", pool_priority=7),
                    make_system(ONE_TASK, demand=100, name="b")], gpus=1)
    assert ranked.fully_served
    assert not any(s.startswith("serve") for s in ranked.solver.stages)


def test_the_priority_defaults_to_zero_and_is_bounded():
    assert make_system(ONE_TASK).pool_priority == 0
    with pytest.raises(ValueError, match="poolPriority|pool_priority"):
        SystemSpec.model_validate({**make_system(ONE_TASK).model_dump(), "poolPriority": 1001})
