"""What a system's status says of the pool's priorities, its quota and its share (issue 29 items 1 and 2; decide.py).

The `plan` fixture serves shop/traffic on 7 of the 14 slices of a 2-GPU pool (two 3g.40gb instances and
a 1g.10gb); a second system, other/high, holds a third GPU whole (7 slices).
"""

from __future__ import annotations

from tessera.operator.api import status as st
from tessera.operator.gpus.node_plans import placed_gpus
from tessera.operator.reconcile.decide import planned_children, system_status
from tessera.planner.plan import GpuPlan, InstancePlan
from tessera.planner.quota import InstanceQuota

from .test_decide import SETTINGS, applied_pool, outcome_for, system

HIGH = "other/high"
HIGH_GPU = GpuPlan(index=2, node="gpu-b", device=1, layout=[("7g.80gb", 1)], instances=[
    InstancePlan(mig_profile="7g.80gb", system=HIGH, task="t", config=0)])


def half_served(plan):
    return plan.model_copy(update={"systems": [plan.systems[0].model_copy(update={"served_rps": 25})]})


def degraded_of(plan, **fields) -> st.Condition:
    outcome = outcome_for(plan, applied_pool(plan), applied={"gpu-a", "gpu-b"}, pool_gpus=2,
                          gpus_of={"shop/traffic": placed_gpus(plan), HIGH: [HIGH_GPU]}, **fields)
    _, conditions, _ = system_status(system(), outcome)
    return next(c for c in conditions if c.type == st.DEGRADED)


def test_a_system_held_below_its_demand_by_a_higher_priority_reads_preempted_by_priority_naming_it(plan):
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0, HIGH: 10})
    assert degraded.status and degraded.reason == st.PREEMPTED_BY_PRIORITY
    assert f"{HIGH} (poolPriority 10, 7 slices)" in degraded.message and "50%" in degraded.message


def test_preempted_by_priority_posts_a_warning_event(plan):
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0, HIGH: 10})
    status = st.build_status(3, st.PHASE_DEGRADED, [degraded], None, {}, "2026-01-01T00:00:00Z")
    assert [(e.type, e.reason) for e in st.events_for({}, status)] == [("Warning", st.PREEMPTED_BY_PRIORITY)]


def test_a_system_of_the_highest_priority_held_below_its_demand_reads_insufficient_capacity(plan):
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 10, HIGH: 10})
    assert degraded.reason == st.INSUFFICIENT_CAPACITY


def test_a_higher_priority_system_the_plan_gives_no_capacity_is_not_named(plan):
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0, HIGH: 10, "idle/higher": 20})
    assert degraded.reason == st.PREEMPTED_BY_PRIORITY and "idle/higher" not in degraded.message


def test_the_quota_comes_before_priority_in_why_a_system_is_held_back(plan):
    quota = InstanceQuota(systems=frozenset({"shop/traffic"}), mig_profile="3g.40gb", limit=2,
                          source="ResourceQuota shop/gpus")
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0, HIGH: 10}, quotas=[quota])
    assert degraded.reason == st.QUOTA_REACHED


def test_quotas_of_zero_on_the_profiles_a_namespace_may_not_use_do_not_hide_the_priority(plan):
    closed = [InstanceQuota(systems=frozenset({"shop/traffic"}), mig_profile=profile, limit=0, source="shop/gpus")
              for profile in ("4g.40gb", "7g.80gb")]
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0, HIGH: 10}, quotas=closed)
    assert degraded.reason == st.PREEMPTED_BY_PRIORITY


def test_a_system_served_in_full_is_not_degraded_whatever_the_priorities(plan):
    degraded = degraded_of(plan, priorities={"shop/traffic": 0, HIGH: 10})
    assert not degraded.status and degraded.reason == st.DEMAND_SERVED


def test_status_shows_the_systems_share_of_the_pools_slices(plan):
    outcome = outcome_for(plan, applied_pool(plan), applied={"gpu-a", "gpu-b"}, pool_gpus=2,
                          gpus_of={"shop/traffic": placed_gpus(plan)})
    _, _, summary = system_status(system(), outcome)
    assert (summary["slices"], summary["poolSlices"], summary["poolSharePercent"]) == (7, 14, 50.0)


def test_no_pod_tessera_builds_for_a_system_names_a_priority_class(plan):
    """Priorities act in the plan only: kube-scheduler's preemption would evict pinned pods behind tessera's back."""
    pool = applied_pool(plan)
    planned, _ = planned_children(pool, [system(poolPriority=10)], outcome_for(plan, pool, applied={"gpu-a", "gpu-b"}),
                                  SETTINGS)
    pods = [body["spec"]["template"]["spec"] for (kind, _, _), (body, _) in planned.items() if kind == "Deployment"]
    assert pods and all("priorityClassName" not in pod and "priority" not in pod for pod in pods)


QUOTA = InstanceQuota(systems=frozenset({"shop/traffic"}), mig_profile="3g.40gb", limit=2,
                      source="ResourceQuota shop/gpus: requests.nvidia.com/mig-3g.40gb 2")


def quota_status(plan, previous: dict) -> tuple[st.Condition, dict]:
    """Degraded and status.plan of shop/traffic held back by QUOTA, its last status.plan `previous`."""
    outcome = outcome_for(plan, applied_pool(plan), applied={"gpu-a", "gpu-b"}, pool_gpus=2,
                          gpus_of={"shop/traffic": placed_gpus(plan)}, quotas=[QUOTA])
    _, conditions, summary = system_status(system(status={"plan": previous}), outcome)
    return next(c for c in conditions if c.type == st.DEGRADED), summary


def test_a_lowered_quota_states_the_quota_and_the_served_demand_it_took_from_the_running_system(plan):
    degraded, summary = quota_status(half_served(plan), {"servedRequestsPerSecond": 50, "demandRequestsPerSecond": 50})
    assert degraded.reason == st.QUOTA_REACHED and "ResourceQuota shop/gpus" in degraded.message
    assert "took 25 requests/s of served demand away from the running system (it served 50 before)" in degraded.message
    assert summary["servedBeforeQuotaRequestsPerSecond"] == 50


def test_the_served_demand_a_lowered_quota_took_stays_stated_on_later_reconciles(plan):
    degraded, summary = quota_status(half_served(plan), {"servedRequestsPerSecond": 25,
                                                         "servedBeforeQuotaRequestsPerSecond": 50})
    assert "took 25 requests/s" in degraded.message and summary["servedBeforeQuotaRequestsPerSecond"] == 50


def test_a_quota_that_held_a_system_back_from_its_first_plan_took_nothing_away(plan):
    degraded, summary = quota_status(half_served(plan), {})
    assert degraded.reason == st.QUOTA_REACHED and "took" not in degraded.message
    assert "servedBeforeQuotaRequestsPerSecond" not in summary


def test_a_quota_holding_back_a_rising_demand_took_nothing_away(plan):
    degraded, summary = quota_status(half_served(plan), {"servedRequestsPerSecond": 25, "demandRequestsPerSecond": 25})
    assert "took" not in degraded.message and "servedBeforeQuotaRequestsPerSecond" not in summary


def test_the_loss_is_no_longer_stated_once_the_quota_serves_all_demand_again(plan):
    degraded, summary = quota_status(plan, {"servedRequestsPerSecond": 25, "servedBeforeQuotaRequestsPerSecond": 50})
    assert not degraded.status and "servedBeforeQuotaRequestsPerSecond" not in summary


def test_served_demand_lost_to_a_higher_priority_is_not_put_on_a_quota(plan):
    outcome = outcome_for(half_served(plan), applied_pool(plan), applied={"gpu-a", "gpu-b"}, pool_gpus=2,
                          gpus_of={"shop/traffic": placed_gpus(plan), HIGH: [HIGH_GPU]},
                          priorities={"shop/traffic": 0, HIGH: 10})
    _, conditions, summary = system_status(system(status={"plan": {"servedRequestsPerSecond": 50}}), outcome)
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert degraded.reason == st.PREEMPTED_BY_PRIORITY and "lowered quota" not in degraded.message
    assert "servedBeforeQuotaRequestsPerSecond" not in summary


def test_a_system_held_below_its_demand_by_a_higher_priority_adapter_pool_reads_preempted_by_priority_naming_it(plan):
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0},
                           adapter_pools={"team/bots": (5, 2), "team/lower": (-1, 1)})
    assert degraded.reason == st.PREEMPTED_BY_PRIORITY
    assert "AdapterPool team/bots (poolPriority 5, 2 whole GPU(s))" in degraded.message
    assert "team/lower" not in degraded.message


def test_compound_systems_and_adapter_pools_above_are_named_highest_priority_first(plan):
    degraded = degraded_of(half_served(plan), priorities={"shop/traffic": 0, HIGH: 10},
                           adapter_pools={"team/bots": (20, 1)})
    assert degraded.message.index("AdapterPool team/bots") < degraded.message.index(f"{HIGH} (poolPriority 10")
