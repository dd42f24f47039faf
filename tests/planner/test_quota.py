"""Quotas on MIG instances (planner/quota.py): a plan keeps within them, the checker refuses one that does not."""

from pathlib import Path

from tessera.planner.catalog import gpu_product
from tessera.planner.contract import Infeasible, Planned, PlanRequest, SystemInput, plan_outcome, solve_request
from tessera.planner.model import Pool
from tessera.planner.quota import InstanceQuota, holding_back, instances_under, quota_violations
from tessera.planner.spec_file import load_systems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POOL = Pool(gpu="H100-80GB", gpus=4)


def single_model():
    (system,) = load_systems(EXAMPLES / "single-model.yaml")
    return system


def quota(system, profile: str, limit: int) -> InstanceQuota:
    return InstanceQuota(systems=frozenset({system.name}), mig_profile=profile, limit=limit, source="test")


def most_used_profile(plan) -> tuple[str, int]:
    counts: dict[str, int] = {}
    for task in plan.tasks:
        for config in task.configs:
            counts[config.segment.mig_profile] = counts.get(config.segment.mig_profile, 0) + config.replicas
    return max(counts.items(), key=lambda item: item[1])


def test_a_plan_keeps_within_a_quota_below_what_it_would_use_and_still_serves_on_other_profiles():
    system = single_model()
    free = plan_outcome([system], POOL)
    assert isinstance(free, Planned)
    profile, used = most_used_profile(free.plan)
    capped = quota(system, profile, used - 1)
    held = plan_outcome([system], POOL, quotas=[capped])
    assert isinstance(held, Planned), held
    assert instances_under(capped, held.plan) <= used - 1
    assert held.plan.fully_served


def test_a_system_no_quota_leaves_an_instance_serves_nothing():
    system = single_model()
    none_left = [quota(system, p.name, 0) for p in gpu_product("H100-80GB").profiles]
    outcome = plan_outcome([system], POOL, quotas=none_left)
    assert isinstance(outcome, Infeasible) and outcome.plan is None


def test_a_quota_of_another_namespace_changes_nothing():
    system = single_model()
    free = plan_outcome([system], POOL)
    profile, _ = most_used_profile(free.plan)
    other = InstanceQuota(systems=frozenset({"elsewhere/single-model"}), mig_profile=profile, limit=0)
    assert plan_outcome([system], POOL, quotas=[other]).plan.tasks == free.plan.tasks


def test_the_request_carries_quotas_on_the_systems_keys():
    system = single_model()
    request = PlanRequest(systems=[SystemInput(namespace="team-a", name="single-model", spec=system)], pool=POOL)
    profile, used = most_used_profile(solve_request(request).plan)
    capped = InstanceQuota(systems=frozenset({"team-a/single-model"}), mig_profile=profile, limit=used - 1)
    held = solve_request(request.model_copy(update={"quotas": [capped]}))
    assert instances_under(capped, held.plan) <= used - 1


def test_the_checker_names_a_plan_over_its_quota():
    system = single_model()
    free = plan_outcome([system], POOL)
    profile, used = most_used_profile(free.plan)
    (violation,) = quota_violations(free.plan, [quota(system, profile, used - 1)])
    assert f"{used} {profile} instances for {system.name}, over the quota of {used - 1} (test)" == violation


def test_a_quota_used_to_the_full_holds_a_system_back_and_one_with_room_does_not():
    system = single_model()
    free = plan_outcome([system], POOL).plan
    profile, used = most_used_profile(free)
    full, roomy = quota(system, profile, used), quota(system, profile, used + 1)
    assert holding_back(free, [full], system.name) == [full]
    assert holding_back(free, [roomy], system.name) == []


def test_a_quota_of_zero_on_a_profile_is_a_choice_of_profiles_not_what_holds_a_system_back():
    system = single_model()
    free = plan_outcome([system], POOL).plan
    profile, used = most_used_profile(free)
    others = [quota(system, p.name, 0) for p in gpu_product(POOL.gpu).profiles if p.name != profile]
    assert holding_back(free, [*others, quota(system, profile, used + 1)], system.name) == []


def test_quotas_that_leave_a_system_no_profile_all_hold_it_back():
    system = single_model()
    closed = [quota(system, p.name, 0) for p in gpu_product(POOL.gpu).profiles]
    assert holding_back(plan_outcome([system], POOL).plan, closed, system.name) == closed
