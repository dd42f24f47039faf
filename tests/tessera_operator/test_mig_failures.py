"""mig-manager's `failed` and `rebooting`, decided without a cluster (operator/reconcile/mig_failures.py).

One rule each: the record of a `failed` (a node annotation, so the back-off
survives a restart), the back-off after which the pool plans without the
node, what the systems' status says, and `rebooting` as work in progress.
"""

from __future__ import annotations

import json

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.gpus.discovery import group_pools, node_facts
from tessera.operator.reconcile.actions import PostEvent
from tessera.operator.reconcile.decide import decide_relabels, decide_status, system_status
from tessera.operator.reconcile.mig_failures import (NodeFailure, backoff_requeue, decide_failure_records, in_backoff,
                                                     left_out)

from .conftest import gpu_node
from .test_decide import NOW, SETTINGS, outcome_for, pool_with, system

BACKOFF_S = 300.0


def facts(state: str | None, config: str | None = "tessera-v1-abc", record: dict | None = None, ready: bool = True):
    labels = {k: v for k, v in (("nvidia.com/mig.config", config), ("nvidia.com/mig.config.state", state)) if v}
    node = gpu_node("gpu-a", extra_labels=labels, ready=ready)
    if record is not None:
        node["metadata"]["annotations"] = {naming.MIG_FAILURE: json.dumps(record)}
    found = node_facts(node, naming.MIG_CONFIG_REQUESTED)
    assert found is not None
    return found


def test_a_first_failed_is_recorded_on_the_node_with_the_config_and_the_time_it_was_seen():
    (action,) = decide_failure_records([facts("failed")], NOW + 0.7)
    assert action.node == "gpu-a"
    assert json.loads(action.record or "") == {"config": "tessera-v1-abc", "since": NOW}


def test_a_recorded_failure_is_not_written_again_and_keeps_its_first_time():
    recorded = facts("failed", record={"config": "tessera-v1-abc", "since": NOW - 200})
    assert decide_failure_records([recorded], NOW) == []
    assert in_backoff([recorded], NOW, BACKOFF_S)["gpu-a"].since == NOW - 200


def test_the_record_goes_once_mig_manager_reports_success_or_no_state():
    record = {"config": "tessera-v1-abc", "since": NOW - 200}
    for state in ("success", None):
        (action,) = decide_failure_records([facts(state, record=record)], NOW)
        assert action.record is None, state


def test_the_record_stays_while_mig_manager_retries_its_config_so_the_node_rejoins_its_pool_at_success():
    record = {"config": "tessera-v1-abc", "since": NOW - 10 * BACKOFF_S}
    for state in ("pending", "rebooting"):
        retrying = facts(state, record=record)
        assert decide_failure_records([retrying], NOW) == [], state
        assert left_out(retrying, NOW, BACKOFF_S), state
    assert not left_out(facts("success", record=record), NOW, BACKOFF_S)


def test_a_failed_for_another_config_than_the_recorded_one_starts_a_new_record():
    relabelled = facts("failed", config="tessera-v1-new", record={"config": "tessera-v1-abc", "since": NOW - 900})
    (action,) = decide_failure_records([relabelled], NOW)
    assert json.loads(action.record or "") == {"config": "tessera-v1-new", "since": NOW}
    assert not left_out(relabelled, NOW, BACKOFF_S), "the new failure has a back-off of its own"


def test_an_unreadable_record_is_recorded_afresh():
    node = gpu_node("gpu-a", extra_labels={"nvidia.com/mig.config": "c", "nvidia.com/mig.config.state": "failed"})
    node["metadata"]["annotations"] = {naming.MIG_FAILURE: "{not json"}
    (action,) = decide_failure_records([node_facts(node, naming.MIG_CONFIG_REQUESTED)], NOW)
    assert json.loads(action.record or "") == {"config": "c", "since": NOW}


def test_a_failed_node_stays_in_its_pool_through_the_backoff_and_is_left_out_after_it():
    failed = facts("failed", record={"config": "tessera-v1-abc", "since": NOW})
    assert not left_out(failed, NOW + BACKOFF_S - 1, BACKOFF_S)
    assert left_out(failed, NOW + BACKOFF_S, BACKOFF_S)
    assert in_backoff([failed], NOW + BACKOFF_S, BACKOFF_S) == {}


def test_the_backoff_counts_from_the_recorded_time_so_a_restart_does_not_start_it_again():
    # A restarted operator reads the record: 250 s of the 300 are over, its pool plans again in 50 s.
    failed = facts("failed", record={"config": "tessera-v1-abc", "since": NOW - 250})
    found = in_backoff([failed], NOW, BACKOFF_S)
    assert backoff_requeue(found, NOW) == [50.0]
    assert left_out(failed, NOW + 50, BACKOFF_S)


def test_a_node_left_out_comes_back_once_its_state_changes():
    record = {"config": "tessera-v1-abc", "since": NOW - 10 * BACKOFF_S}
    assert left_out(facts("failed", record=record), NOW, BACKOFF_S)
    assert not left_out(facts("success", record=record), NOW, BACKOFF_S)


def test_rebooting_is_neither_a_failure_nor_a_node_that_left_its_pool():
    rebooting = facts("rebooting", ready=False)  # the host reboot makes the node NotReady
    assert decide_failure_records([rebooting], NOW) == []
    assert not left_out(rebooting, NOW + 10 * BACKOFF_S, BACKOFF_S)
    pools, _ = group_pools([rebooting])
    assert [n.name for pool in pools for n in pool.nodes] == ["gpu-a"]
    pools, _ = group_pools([facts("pending", ready=False)])
    assert pools == [], "a NotReady node that is not rebooting for mig-manager leaves its pool"


def _failed_outcome(plan, failed_node: str):
    """gpu-a applied, `failed_node` reporting failed for its planned config, inside its back-off."""
    bare = pool_with()
    mig = outcome_for(plan, bare).mig
    states = {name: (m.config, "success", m.expected) for name, m in mig.items()}
    states[failed_node] = (mig[failed_node].config, "failed", {})
    pool = pool_with(states)
    outcome = outcome_for(plan, pool)
    outcome.mig, _, _ = decide_relabels(pool, outcome.mig, {}, {}, NOW, propagation_s=0, poll_s=SETTINGS.mig_poll_s)
    outcome.failed_nodes = in_backoff(pool.nodes, NOW, BACKOFF_S)
    return outcome


def test_a_system_with_servers_planned_on_a_failed_node_is_degraded_naming_the_node(plan):
    phase, conditions, _ = system_status(system(), _failed_outcome(plan, "gpu-b"))
    by_type = {c.type: c for c in conditions}
    degraded = by_type[st.DEGRADED]
    assert (phase, degraded.status, degraded.reason) == (st.PHASE_DEGRADED, True, st.MIG_FAILED)
    assert "node gpu-b" in degraded.message and "gpu-a" not in degraded.message
    assert not by_type[st.READY].status


def test_the_degraded_condition_posts_a_warning_event(plan):
    _, conditions, summary = system_status(system(), _failed_outcome(plan, "gpu-b"))
    new = st.build_status(3, st.PHASE_DEGRADED, conditions, summary, {}, "2026-12-03T10:00:00Z")
    events = [a.body for a in decide_status(system(), new, "2026-12-03T10:00:00Z") if isinstance(a, PostEvent)]
    assert any(e["type"] == "Warning" and e["reason"] == st.MIG_FAILED and "Degraded" in e["message"]
               and "gpu-b" in e["message"] for e in events)


def test_the_failure_message_is_the_same_on_every_reconcile_of_the_backoff(plan):
    # The first reconcile records `since`; the next reads it back: the status must not change (no write, no Event).
    first = facts("failed", ready=True)
    (record,) = decide_failure_records([first], NOW + 0.4)
    second = facts("failed", record=json.loads(record.record or ""))
    assert in_backoff([first], NOW + 0.4, BACKOFF_S) == in_backoff([second], NOW + 7.9, BACKOFF_S)


def test_a_system_with_no_server_on_the_failed_node_is_not_degraded_by_it(plan):
    outcome = _failed_outcome(plan, "gpu-b")
    outcome.failed_nodes = {"gpu-c": NodeFailure("gpu-c", "tessera-v1-abc", NOW, NOW + BACKOFF_S)}
    _, conditions, _ = system_status(system(), outcome)
    assert next(c for c in conditions if c.type == st.DEGRADED).reason != st.MIG_FAILED
