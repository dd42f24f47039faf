"""Which decided writes go out at once (operator/reconcile/actions.py write_batches; act.py writes each batch)."""

from tessera.operator.reconcile.actions import (ApplyChild, DeleteChild, LabelNode, PatchStatus, PostEvent, StorePlan,
                                                statuses_then_events, write_batches)


def child(kind: str, name: str, namespace: str = "team-a") -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace}}


def apply(kind: str, name: str) -> ApplyChild:
    return ApplyChild(child(kind, name), reason="not there yet")


def status(name: str) -> PatchStatus:
    return PatchStatus("team-a", name, {"phase": "Ready"}, reason="status changed")


def event(name: str) -> PostEvent:
    return PostEvent(child("Event", name), reason="Normal event Planned")


def test_applies_of_one_kind_in_a_row_are_one_batch():
    services = [apply("Service", f"s{i}") for i in range(3)]
    assert write_batches(services) == [services]


def test_each_kind_is_a_batch_of_its_own_in_the_order_given():
    service, config, deployment, budget = (apply("Service", "a"), apply("ConfigMap", "a"), apply("Deployment", "a"),
                                           apply("PodDisruptionBudget", "a"))
    assert write_batches([service, config, deployment, budget]) == [[service], [config], [deployment], [budget]]


def test_a_deletion_is_never_in_a_batch_with_an_apply_of_its_kind():
    applied, deleted = apply("Deployment", "new"), DeleteChild(child("Deployment", "old"), reason="no plan wants it")
    assert write_batches([applied, deleted]) == [[applied], [deleted]]


def test_a_second_write_to_one_object_starts_a_new_batch():
    first, again, other = status("s1"), status("s1"), status("s2")
    assert write_batches([first, again, other]) == [[first], [again, other]]


def test_a_write_that_is_not_batched_stands_alone_and_cuts_the_run():
    plan = StorePlan("pool", {}, reason="the pool's solve finished")
    label = LabelNode("node-1", "config", {}, reason="new layout")
    before, after = apply("Service", "a"), apply("Service", "b")
    assert write_batches([before, plan, label, after]) == [[before], [plan], [label], [after]]


def test_several_systems_statuses_go_before_their_events_each_in_its_order():
    actions = [status("s1"), event("e1"), status("s2"), event("e2a"), event("e2b")]
    ordered = statuses_then_events(actions)
    assert ordered == [actions[0], actions[2], actions[1], actions[3], actions[4]]
    assert write_batches(ordered) == [ordered[:2], ordered[2:]]
