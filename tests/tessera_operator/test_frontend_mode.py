"""A system served through its frontend: its servers are told so and call no downstream task (no fan-out twice)."""

from tessera.operator.reconcile import builders
from tessera.operator.settings import OperatorSettings
from tessera.operator.gpus.node_plans import place, placed_gpus
from tessera.planner.model import Frontend

SETTINGS = OperatorSettings(default_image="example.org/default:1")


def _detection_env(plan, spec, system_ref) -> dict[str, str]:
    placement = place(placed_gpus(plan), plan.tasks, {"gpu-a": 8, "gpu-b": 8})
    detection = next(k for k in placement.servers if k.task == "object-detection")
    body = builders.deployment(system_ref, spec, detection, placement.tasks[("shop/traffic", "object-detection")],
                               2, "gpu-a", "3g.40gb", SETTINGS)
    return {e["name"]: e["value"] for e in body["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_without_a_frontend_servers_call_their_downstream_tasks(plan, spec, system_ref):
    env = _detection_env(plan, spec, system_ref)
    assert env["TESSERA_GRAPH"] == "servers"
    assert env["TESSERA_DOWNSTREAM_URLS"].startswith("car-classification=")


def test_with_a_frontend_servers_get_no_downstream_urls(plan, spec, system_ref):
    env = _detection_env(plan, spec.model_copy(update={"frontend": Frontend()}), system_ref)
    assert env["TESSERA_GRAPH"] == "frontend"
    assert env["TESSERA_DOWNSTREAM_URLS"] == ""
    assert not any(name.startswith("TESSERA_DOWNSTREAM_") and name != "TESSERA_DOWNSTREAM_URLS" for name in env)
