"""The operator deploys each system's frontend (operator/reconcile/frontend_children.py): decided like the other
children, configured from the plan, and never written again on an idle resync."""

from __future__ import annotations

import pytest
import yaml

from tessera.operator.demand.planning import DemandPlanner
from tessera.operator.demand.settings import DemandSettings
from tessera.operator.reconcile import builders, frontend_children
from tessera.operator.reconcile.actions import ApplyChild
from tessera.operator.reconcile.decide import (PoolOutcome, decide_children, frontend_status, live_children,
                                               planned_children)
from tessera.planner.plan import GpuPlan, InstancePlan

from .test_decide import SETTINGS, applied_pool, live, outcome_for, system

FRONTEND = {"frontend": {"maxInFlight": 64}}


@pytest.fixture
def split_plan(plan):
    """Detection on two configurations at once, a 3g.40gb (200 req/s planned) and a 1g.10gb under MPS 2 (100)."""
    detection, classification = plan.tasks
    big = detection.configs[0].model_copy(update={"replicas": 1, "segment_throughput_rps": 200.0})
    small = detection.configs[0].model_copy(update={
        "replicas": 1, "segment": detection.configs[0].segment.model_copy(update={"mig_profile": "1g.10gb", "mps": 2}),
        "batch": 4})
    gpus = [GpuPlan(index=0, node="gpu-a", device=3, layout=[("3g.40gb", 2)], instances=[
                InstancePlan(mig_profile="3g.40gb", system="shop/traffic", task="object-detection", config=0),
                InstancePlan(mig_profile="3g.40gb")]),
            GpuPlan(index=1, node="gpu-b", device=0, layout=[("1g.10gb", 7)], instances=[
                InstancePlan(mig_profile="1g.10gb", system="shop/traffic", task="car-classification", config=0),
                InstancePlan(mig_profile="1g.10gb", system="shop/traffic", task="object-detection", config=1),
                *[InstancePlan(mig_profile="1g.10gb") for _ in range(5)]])]
    return plan.model_copy(update={"tasks": [detection.model_copy(update={"configs": [big, small]}), classification],
                                   "gpus": gpus})


def decision(plan, systems, children=()):
    pool = applied_pool(plan)
    outcome = outcome_for(plan, pool, applied={"gpu-a", "gpu-b"})
    planned, _ = planned_children(pool, systems, outcome, SETTINGS)
    return planned, decide_children(planned, systems, live_children(list(children), systems), outcome)


def applied(actions, kind: str) -> list[dict]:
    return [a.body for a in actions if isinstance(a, ApplyChild) and a.kind == kind]


def frontend_file(actions) -> dict:
    (body,) = applied(actions, "ConfigMap")
    return yaml.safe_load(body["data"][frontend_children.CONFIG_KEY])


def test_a_system_without_spec_frontend_gets_no_frontend(split_plan):
    _, actions = decision(split_plan, [system()])
    assert applied(actions, "ConfigMap") == []
    assert all(b["metadata"]["labels"][builders.naming.CHILD_KIND_LABEL] != "frontend"
               for b in applied(actions, "Deployment") + applied(actions, "Service"))
    assert frontend_status(system(), SETTINGS, outcome_for(split_plan, applied_pool(split_plan))) is None


def test_a_system_with_spec_frontend_gets_its_config_deployment_and_service(split_plan):
    _, actions = decision(split_plan, [system(**FRONTEND)])
    name = frontend_children.frontend_name(system().ref)
    (frontend,) = [b for b in applied(actions, "Deployment") if b["metadata"]["name"] == name]
    container = frontend["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == SETTINGS.frontend_image
    assert container["args"][:2] == ["frontend", "/etc/tessera-frontend/frontend.yaml"]
    assert frontend["spec"]["template"]["spec"]["volumes"] == [{"name": "config", "configMap": {"name": name}}]
    assert name in {b["metadata"]["name"] for b in applied(actions, "Service")}
    config = frontend_file(actions)
    assert config["system"] == "traffic"  # the model name clients use, not the operator's namespace/name key
    assert config["settings"]["maxInFlight"] == 64
    outcome = outcome_for(split_plan, applied_pool(split_plan))
    assert frontend_status(system(**FRONTEND), SETTINGS, outcome) == {"address": f"{name}.shop.svc:{SETTINGS.frontend_port}"}


def test_a_system_never_planned_shows_no_frontend_address():
    invalid = PoolOutcome(invalid={"shop/traffic": ("SloUnreachable", "no variant meets 1 ms")})
    assert frontend_status(system(**FRONTEND), SETTINGS, invalid) is None


def test_an_invalid_system_shows_the_address_of_the_frontend_its_last_good_plan_runs(split_plan):
    planned, _ = decision(split_plan, [system(**FRONTEND)])
    running = live_children([live(body) for body, _ in planned.values()], [system(**FRONTEND)])
    invalid = PoolOutcome(invalid={"shop/traffic": ("SloUnreachable", "no variant meets 1 ms")}, live=running)
    assert frontend_status(system(**FRONTEND), SETTINGS, invalid) is not None


def test_the_config_routes_each_configuration_by_its_planned_capacity_through_its_own_service(split_plan):
    _, actions = decision(split_plan, [system(**FRONTEND)])
    detection = next(t for t in frontend_file(actions)["tasks"] if t["name"] == "object-detection")
    assert [c["weight"] for c in detection["configurations"]] == [200.0, 100.0]
    services = {b["metadata"]["name"]: b for b in applied(actions, "Service")}
    servers = {b["spec"]["template"]["metadata"]["labels"][builders.CONFIGURATION_LABEL]
               for b in applied(actions, "Deployment") if builders.CONFIGURATION_LABEL in
               b["spec"]["template"]["metadata"]["labels"]}
    for configuration in detection["configurations"]:
        host = configuration["url"].removeprefix("http://").split(".")[0]
        assert services[host]["spec"]["selector"][builders.CONFIGURATION_LABEL] == host
        assert host in servers  # the Service selects the configuration's servers


def test_servers_without_a_frontend_keep_their_pod_template(split_plan):
    _, actions = decision(split_plan, [system()])
    assert all(builders.CONFIGURATION_LABEL not in b["spec"]["template"]["metadata"]["labels"]
               for b in applied(actions, "Deployment"))


def test_the_config_changes_with_the_plan_and_nothing_else_does(split_plan):
    planned, _ = decision(split_plan, [system(**FRONTEND)])
    detection = split_plan.tasks[0]
    bigger = detection.configs[0].model_copy(update={"replicas": 2})
    replanned = split_plan.model_copy(update={"tasks": [detection.model_copy(update={
        "configs": [bigger, detection.configs[1]]}), split_plan.tasks[1]]})
    frontend_kinds = {("ConfigMap", "frontend"), ("Deployment", "frontend"), ("Service", "frontend")}
    _, actions = decision(replanned, [system(**FRONTEND)], [live(body) for body, _ in planned.values()])
    written = {(a.kind, a.body["metadata"]["labels"][builders.naming.CHILD_KIND_LABEL])
               for a in actions if isinstance(a, ApplyChild)}
    assert ("ConfigMap", "frontend") in written
    assert written & frontend_kinds == {("ConfigMap", "frontend")}  # a hot reload: the frontend does not roll
    detection_route = next(t for t in frontend_file(actions)["tasks"] if t["name"] == "object-detection")
    assert [c["weight"] for c in detection_route["configurations"]] == [400.0, 100.0]


def test_an_idle_resync_writes_no_frontend_child(split_plan):
    planned, _ = decision(split_plan, [system(**FRONTEND)])
    _, actions = decision(split_plan, [system(**FRONTEND)], [live(body) for body, _ in planned.values()])
    assert actions == []


def test_unsetting_spec_frontend_deletes_its_children(split_plan):
    planned, _ = decision(split_plan, [system(**FRONTEND)])
    _, actions = decision(split_plan, [system()], [live(body) for body, _ in planned.values()])
    deleted = {(a.child["kind"], a.child["metadata"]["name"]) for a in actions if type(a).__name__ == "DeleteChild"}
    name = frontend_children.frontend_name(system().ref)
    assert {("ConfigMap", name), ("Deployment", name), ("Service", name)} <= deleted


def test_a_frontend_system_without_a_demand_source_reads_the_frontends_offered_rate():
    planner = DemandPlanner(DemandSettings(prometheus_url="http://127.0.0.1:1"))
    source = planner.with_default_source(system(**FRONTEND)).spec.demand_source
    assert source is not None and source.template == "tessera-frontend"
    assert planner.with_default_source(system()).spec.demand_source is None  # no frontend: no default


def test_without_prometheus_a_frontend_system_plans_for_its_spec_demand():
    assert DemandPlanner(DemandSettings()).with_default_source(system(**FRONTEND)).spec.demand_source is None


def test_a_demand_source_given_in_the_spec_stays_the_one_read():
    given = {"demandSource": {"query": "sum(rate(my_requests_total[1m]))"}}
    planner = DemandPlanner(DemandSettings(prometheus_url="http://127.0.0.1:1"))
    assert planner.with_default_source(system(**FRONTEND, **given)).spec.demand_source.query.startswith("sum(")


def test_the_frontend_runs_one_replica_per_share_of_the_planned_demand(split_plan):
    settings = SETTINGS.model_copy(update={"frontend_rps_per_replica": 20.0})
    busy = split_plan.model_copy(update={"systems": [split_plan.systems[0].model_copy(update={"demand_rps": 50})]})
    spec = system(**FRONTEND).spec
    assert frontend_children.replicas(spec, busy, settings) == 3  # 50 req/s at 20 per process
    assert frontend_children.replicas(spec, busy, SETTINGS) == 1  # never fewer than one


def test_a_pool_plan_of_several_systems_gives_each_frontend_only_its_own_tasks(split_plan):
    other = [t.model_copy(update={"system": "shop/other"}) for t in split_plan.tasks]
    pooled = split_plan.model_copy(update={"tasks": [*split_plan.tasks, *other]})
    _, actions = decision(pooled, [system(**FRONTEND)])
    assert sorted(t["name"] for t in frontend_file(actions)["tasks"]) == ["car-classification", "object-detection"]
