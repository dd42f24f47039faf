"""A make-before-break change inside a namespace's ResourceQuota: where the old pods and the new ones do not fit
together, one replica at a time, never a FailedCreate deadlock (operator/reconcile/quota_transitions.py)."""

from tessera.operator.api import status as st
from tessera.operator.reconcile.actions import ApplyChild, DeleteChild, PostEvent, ScaleDeployment
from tessera.operator.reconcile.decide import decide_children, is_model_server, live_children, planned_children
from tessera.operator.reconcile.quota_transitions import (capped, decide_quota_transitions, kept_while_stepped,
                                                            step_children, with_quota_transition)
from tessera.operator.reconcile.quotas import pod_gpu_requests

from .test_decide import SETTINGS, applied_pool, available, outcome_for, stale_deployment, system

MIG = "nvidia.com/mig-1g.10gb"
QUOTA = "ResourceQuota team-a/gpus: requests.nvidia.com/mig-1g.10gb 2"
ROOMS = {("team-a", f"requests.{MIG}"): (2, QUOTA)}


def deployment(name: str, replicas: int, available: int | None = None, pods: int | None = None,
               node: str = "node-a") -> dict:
    """A model-server Deployment of one MIG instance per pod, pinned to `node`; `available` and `pods` its status
    (settled if None)."""
    available = replicas if available is None else available
    pinned = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    return {"kind": "Deployment",
            "metadata": {"namespace": "team-a", "name": name, "generation": 1,
                         "annotations": {"tessera.ai/applied-hash": name}},
            "spec": {"replicas": replicas, "template": {"spec": {"affinity": pinned, "containers": [
                {"resources": {"requests": {MIG: "1", "cpu": "1"}}}]}}},
            "status": {"observedGeneration": 1, "replicas": replicas if pods is None else pods,
                       "availableReplicas": available}}


def planned_servers(planned: dict) -> list[dict]:
    return [body for body, _ in planned.values() if is_model_server(body)]


def live_of(*children: dict) -> dict:
    return {f"team-a/{c['metadata']['name']}": c for c in children}


def step(new: dict, old: dict, live_new: dict | None = None, rooms=None):
    live = live_of(old, *([live_new] if live_new else []))
    return decide_quota_transitions([new], [old], live, ROOMS if rooms is None else rooms)


def test_a_change_that_fits_the_quota_beside_the_old_pods_is_make_before_break_as_usual():
    rooms = {("team-a", f"requests.{MIG}"): (4, QUOTA)}
    assert step(deployment("new", 2), deployment("old", 2), rooms=rooms) == []


def test_a_namespace_without_a_quota_on_the_resource_is_make_before_break_as_usual():
    assert step(deployment("new", 2), deployment("old", 2), rooms={}) == []


def test_with_the_quota_full_the_new_deployment_starts_at_zero_and_the_old_one_goes_down_by_one():
    (only,) = step(deployment("new", 2), deployment("old", 2))
    assert only.replicas == {"team-a/new": 0}
    assert only.scale_down == {"team-a/old": 1}


def test_the_room_an_old_pod_left_takes_one_new_replica_and_no_old_one_goes_meanwhile():
    (only,) = step(deployment("new", 2), deployment("old", 1), live_new=deployment("new", 0))
    assert only.replicas == {"team-a/new": 1}
    assert only.scale_down == {}


def test_while_a_new_pod_starts_nothing_else_moves():
    (only,) = step(deployment("new", 2), deployment("old", 1), live_new=deployment("new", 1, available=0))
    assert only.replicas == {"team-a/new": 1}
    assert only.scale_down == {}


def test_while_an_old_pod_goes_the_next_old_one_is_not_scaled_down():
    (only,) = step(deployment("new", 2), deployment("old", 1, pods=2), live_new=deployment("new", 0))
    assert only.scale_down == {}
    assert only.replicas == {"team-a/new": 0}


def test_the_room_in_the_quota_goes_first_to_a_new_deployment_on_a_node_with_instances_free_beside_the_old_pods():
    """On node-a the old pod holds the instance its replacement there needs: grown first, its pod would stay
    Pending, and the step wait for it forever; the one on node-b starts, then the old one goes."""
    old = deployment("old", 1, node="node-a")
    mine, elsewhere = deployment("a-beside-the-old", 1, node="node-a"), deployment("b-elsewhere", 1, node="node-b")
    (only,) = decide_quota_transitions([mine, elsewhere], [old], live_of(old), ROOMS, behind={"node-a"})
    assert only.replicas == {"team-a/a-beside-the-old": 0, "team-a/b-elsewhere": 1}


def test_the_loss_names_the_quota_and_the_replicas_that_serve_meanwhile():
    (only,) = step(deployment("new", 2), deployment("old", 1), live_new=deployment("new", 1))
    assert (only.serving, only.planned) == (2, 2)
    assert QUOTA in only.message and "2 of the 2 planned replica(s) of new serve meanwhile" in only.message


def test_stepping_from_the_cluster_each_time_ends_with_the_plan_never_past_the_quota_nor_two_replicas_down():
    """Each step applied, its pods then settled: the quota is never exceeded, serving replicas never drop by more
    than one below the two planned, and the steps end once the old pods are gone (no FailedCreate loop, no
    deadlock): then the plan fits the quota and decide_children applies it in full."""
    old, new = deployment("old", 2), None
    for _ in range(10):
        live = live_of(old, *([new] if new else []))
        steps = decide_quota_transitions([deployment("new", 2)], [old], live, ROOMS)
        if not steps:
            break
        (only,) = steps
        new = deployment("new", only.replicas["team-a/new"])
        old = deployment("old", only.scale_down.get("team-a/old", old["spec"]["replicas"]))
        assert old["spec"]["replicas"] + new["spec"]["replicas"] <= 2
        assert old["spec"]["replicas"] + new["spec"]["replicas"] >= 1
    else:
        raise AssertionError("the change never ended")
    assert old["spec"]["replicas"] == 0 and new is not None and new["spec"]["replicas"] >= 1


def test_a_capped_deployment_is_stamped_afresh_so_the_full_plan_is_applied_once_the_change_ends():
    body = deployment("new", 2)
    assert capped(body, 2) is body
    smaller = capped(body, 1)
    assert smaller["spec"]["replicas"] == 1 and body["spec"]["replicas"] == 2
    assert smaller["metadata"]["annotations"]["tessera.ai/applied-hash"] != "new"


def test_a_reconcile_with_the_quota_full_scales_the_old_server_down_keeps_it_and_warns(plan):
    """The reconcile's own decision (decide_children after step_children) on a plan of the operator: the new
    Deployment is not applied in full (its pods would be refused), the old one goes down by one and is not
    deleted, and the system gets a Warning Event naming the quota."""
    pool, systems = applied_pool(plan), [system()]
    old = stale_deployment(plan, pool, systems)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    resource = next(iter(pod_gpu_requests(old)))
    live = live_children([available(old)], systems)
    full = {("shop", f"requests.{resource}"): (old["spec"]["replicas"], "ResourceQuota shop/gpus")}
    stepped, steps, transitions, _ = step_children(planned, live, full, systems, set(), set(),
                                                 "2026-01-01T00:00:00Z")
    actions = decide_children(stepped, systems, live, outcome) + steps
    assert [a.replicas for a in actions if isinstance(a, ScaleDeployment)] == [old["spec"]["replicas"] - 1]
    assert old["metadata"]["name"] not in [a.child["metadata"]["name"] for a in actions if isinstance(a, DeleteChild)]
    new = [a.body for a in actions if isinstance(a, ApplyChild) and a.kind == "Deployment" and a.body["metadata"]["name"] in
           {b["metadata"]["name"] for b in planned_servers(planned) if resource in pod_gpu_requests(b)}]
    assert new and all(b["spec"]["replicas"] == 0 for b in new)
    (event,) = [a.body for a in actions if isinstance(a, PostEvent)]
    assert event["type"] == "Warning" and event["reason"] == "QuotaTransition"
    assert "ResourceQuota shop/gpus" in event["message"]
    assert transitions == {"shop/traffic": event["message"]}


def test_an_old_server_a_step_moves_is_not_deleted_while_it_holds_pods_though_its_replacements_are_available(plan):
    """decide_children deletes an old Deployment once the replacements make before break waits for are available
    (others may wait behind it on its node); a deleted Deployment's pods still count in the quota while they go, so
    the step scales it down to none and it goes once its pods are gone."""
    pool, systems = applied_pool(plan), [system()]
    old = stale_deployment(plan, pool, systems)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    live = live_children([available(old), *(available(b) for b in planned_servers(planned))], systems)
    resource = next(iter(pod_gpu_requests(old)))
    planned_pods = sum(b["spec"]["replicas"] for b in planned_servers(planned) if resource in pod_gpu_requests(b))
    full = {("shop", f"requests.{resource}"): (planned_pods, "ResourceQuota shop/gpus")}
    stepped, _, _, holding = step_children(planned, live, full, systems, set(), set(), "2026-01-01T00:00:00Z")
    decided = decide_children(stepped, systems, live, outcome)
    name = old["metadata"]["name"]
    assert name in [a.child["metadata"]["name"] for a in decided if isinstance(a, DeleteChild)]
    assert name not in [a.child["metadata"]["name"] for a in kept_while_stepped(decided, holding)
                        if isinstance(a, DeleteChild)]


def test_a_stepped_system_reads_progressing_quota_transition_naming_the_quota_instead_of_replacement_pending():
    pending = [st.Condition(st.READY, False, st.SERVERS_STARTING, "1 of 2 available"),
               st.Condition(st.PROGRESSING, True, st.REPLACEMENT_PENDING, "old waits for new")]
    stated = with_quota_transition(pending, f"{QUOTA} leaves tessera 2 ...")
    assert [(c.type, c.reason) for c in stated] == [(st.READY, st.SERVERS_STARTING),
                                                    (st.PROGRESSING, "QuotaTransition")]
    assert QUOTA in stated[-1].message
    assert with_quota_transition(pending, None) == pending


def test_an_old_deployment_whose_replacements_need_its_instances_takes_no_step(plan):
    """A replacement in place is a break that --without-replacement decides (decide.replacements_in_place): with
    `wait` its replacement is held, and a step must not apply it."""
    pool, systems = applied_pool(plan), [system()]
    old = stale_deployment(plan, pool, systems)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    live = live_children([available(old)], systems)
    resource = next(iter(pod_gpu_requests(old)))
    full = {("shop", f"requests.{resource}"): (old["spec"]["replicas"], "ResourceQuota shop/gpus")}
    breaks = {key for key in live} | {key for key, (body, _) in planned.items() if is_model_server(body)}
    stepped, steps, transitions, _ = step_children(planned, live, full, systems, set(), breaks, "2026-01-01T00:00:00Z")
    assert (stepped, steps, transitions) == (planned, [], {})
