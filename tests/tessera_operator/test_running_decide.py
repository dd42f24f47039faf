"""running_decide: whom a re-plan protects, what already runs (issue 28 item 6; operator/reconcile/running_decide.py).

The plan in force (conftest's `plan`) runs shop/traffic on gpu-a and gpu-b, serving all its demand.
"""

from __future__ import annotations

import pytest

from tessera.operator.api import status as st
from tessera.operator.api.systems import read_system
from tessera.operator.reconcile.decide import spec_digest, system_status
from tessera.operator.reconcile.running_decide import Protection, protection

from .test_decide import SYSTEM, outcome_for, pool_with, system

TRAFFIC = read_system(SYSTEM)


def other(namespace: str = "tenant", name: str = "grab", **spec):
    return read_system({**SYSTEM, "metadata": {**SYSTEM["metadata"], "namespace": namespace, "name": name,
                                               "uid": f"uid-{namespace}-{name}"},
                        "spec": {**SYSTEM["spec"], **spec}})


def protect(plan, candidates, planned_for=None):
    """The plan in force made for shop/traffic's spec (or `planned_for`)."""
    planned_for = {TRAFFIC.ref.key: spec_digest(TRAFFIC)} if planned_for is None else planned_for
    return protection(plan, planned_for, candidates, {s.ref.key: spec_digest(s) for s in candidates})


def test_a_re_plan_another_namespace_caused_protects_what_runs_its_served_fraction_and_its_nodes(plan):
    found = protect(plan, [TRAFFIC, other()])
    assert found == Protection({"shop/traffic": 1.0}, {"gpu-a": ["shop/traffic"], "gpu-b": ["shop/traffic"]})


def traffic(**spec):
    return read_system({**SYSTEM, "spec": {**SYSTEM["spec"], **spec}})


def test_a_system_whose_spec_was_edited_beyond_its_demand_is_not_protected(plan):
    edited = traffic(slo={**SYSTEM["spec"]["slo"], "latencyMilliseconds": 400})
    assert protect(plan, [edited, other()]) == Protection()


def test_a_system_whose_demand_alone_moved_keeps_the_requests_it_serves_against_another_namespaces_change(plan):
    """A demandSource reading (or an edit of the demand alone) is its system's change: it is re-planned for
    the new demand, so none of its nodes is kept, but a tenant's change at the same time does not take what it
    serves: the 50 requests/s the plan in force serves it, as a share of the new demand."""
    assert plan.systems[0].served_rps == 50
    assert protect(plan, [traffic(demandRequestsPerSecond=500), other()]) == Protection({"shop/traffic": 0.1})
    assert protect(plan, [traffic(demandRequestsPerSecond=25), other()]) == Protection({"shop/traffic": 1.0})
    assert protect(plan, [traffic(demandRequestsPerSecond=0), other()]) == Protection()  # nothing to hold


def test_a_demand_move_alone_is_a_change_of_its_namespace_which_trades_within_itself(plan):
    """Without another namespace's change nobody of its namespace is held for it, nor it for them; with one, the
    running systems of its namespace keep what they serve (a floor, no nodes kept)."""
    moved = traffic(demandRequestsPerSecond=500)
    sibling = other(namespace="shop", name="second")
    planned_for = {TRAFFIC.ref.key: spec_digest(TRAFFIC), sibling.ref.key: spec_digest(sibling)}
    both = plan.model_copy(update={"systems": [*plan.systems, plan.systems[0].model_copy(
        update={"system": "shop/second"})]})
    assert protect(both, [moved, sibling], planned_for) == Protection()
    assert protect(both, [moved, sibling, other()], planned_for) == Protection(
        {"shop/second": 1.0, "shop/traffic": 0.1})


def test_a_re_plan_a_namespace_caused_protects_none_of_its_own_systems(plan):
    assert protect(plan, [TRAFFIC, other(namespace="shop", name="second")]) == Protection()


def test_a_re_plan_no_system_caused_protects_only_what_the_plan_in_force_protected(plan):
    """A node that joined or left: nobody, unless the plan in force was made protecting them (it stays so)."""
    assert protect(plan, [TRAFFIC]) == Protection()
    held = plan.model_copy(update={"running": {"shop/traffic": 1.0}})
    assert protect(held, [TRAFFIC]).floors == {"shop/traffic": 1.0}


def test_a_changed_system_of_higher_priority_takes_the_nodes_but_not_the_floor(plan):
    """The floor still goes to the planner, which serves the higher priority first: priority before what runs."""
    found = protect(plan, [TRAFFIC, other(poolPriority=5)])
    assert found.floors == {"shop/traffic": 1.0} and found.kept_for == {}


def test_the_floor_is_the_served_fraction_of_the_plan_in_force(plan):
    half = plan.model_copy(update={"systems": [plan.systems[0].model_copy(update={"served_rps": 25})]})
    assert protect(half, [TRAFFIC, other()]).floors == {"shop/traffic": pytest.approx(0.5)}


def test_a_system_that_serves_nothing_or_no_plan_in_force_protects_nothing(plan):
    starved = plan.model_copy(update={"systems": [plan.systems[0].model_copy(update={"served_rps": 0})]})
    assert protect(starved, [TRAFFIC, other()]) == Protection()
    assert protection(None, {}, [TRAFFIC, other()], {}) == Protection()


def test_a_system_served_less_while_what_runs_elsewhere_is_held_reads_held_for_running_systems_naming_it(plan):
    held = plan.model_copy(update={
        "systems": [plan.systems[0].model_copy(update={"served_rps": 25})],
        "running": {"ops/steady": 1.0}, "kept_for": {"gpu-c": ["ops/steady"]}})
    _, conditions, _ = system_status(system(), outcome_for(held, pool_with()))
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert (degraded.status, degraded.reason) == (True, st.HELD_FOR_RUNNING_SYSTEMS)
    assert "ops/steady (100%)" in degraded.message and "gpu-c" in degraded.message
    assert st.HELD_FOR_RUNNING_SYSTEMS in st.WARNING_REASONS
