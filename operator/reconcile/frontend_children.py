"""Pure builders of a system's frontend (docs/frontend.md): its config, its Deployment and its Services.

When `spec.frontend` is set, the operator runs `tessera frontend` (from its
own image, `--frontend-image`) per system, in front of the model servers:

- a ConfigMap with the frontend's file, computed from the current plan by
  `tessera.frontend.config.frontend_config` (the function behind
  `tessera frontend-config`): every configuration of a task with its planned
  capacity (the routing weight) and a batch of one's latency;
- one Service per task configuration (variant, MIG profile, MPS degree,
  batch), selecting the servers of that configuration on every node by the
  pod label `tessera.ai/configuration`, so the frontend can route by the
  plan's shares (a task Service spreads evenly, which overloads a small
  configuration beside a large one);
- the frontend's Deployment and its Service: the system's one endpoint.

A plan change is a hot reload, not a rollout: the ConfigMap is mounted as a
directory (never with subPath, which the kubelet does not refresh), the
kubelet swaps the file in place, and the frontend re-reads it within a second
of seeing it (tessera.frontend.server); a request keeps the graph it started
with, so a reload drops nothing in flight. A rollout would restart every
frontend pod on each demand-driven re-plan, closing its client and upstream
connections; the price of the reload is the kubelet's propagation delay (up
to about a minute) before new shares apply. So the pod template carries no
hash of the config; it changes only with the image, port or system.
"""

from __future__ import annotations

import math

import yaml

from tessera.frontend.config import frontend_config
from tessera.operator import naming
from tessera.operator.api.systems import SystemRef
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.reconcile.actions import Json
from tessera.operator.reconcile.builders import CONFIGURATION_LABEL, configuration_name, with_applied_hash
from tessera.operator.settings import OperatorSettings
from tessera.planner.model import SystemSpec
from tessera.planner.plan import ConfigPlan, Plan, TaskPlan
from tessera.planner.profiles import ProfileStore

COMPONENT = "frontend"
CONFIG_KEY = "frontend.yaml"
CONFIG_DIRECTORY = "/etc/tessera-frontend"
CONTAINER = "frontend"


def frontend_name(system: SystemRef) -> str:
    """The frontend's Deployment, Service and ConfigMap: three parts, so no task's Service (two) takes the name."""
    return child_name(system.name, "frontend", "entry")


def address(system: SystemRef, settings: OperatorSettings) -> str:
    """Where clients reach the system: its frontend Service, in-cluster."""
    return f"{frontend_name(system)}.{system.namespace}.svc:{settings.frontend_port}"


def serves_every_task(spec: SystemSpec, plan: Plan) -> bool:
    """The plan runs each of the system's tasks (spec.name is the system's key there): a frontend can route it."""
    served = {t.task for t in plan.tasks if t.system == spec.name and any(c.replicas for c in t.configs)}
    return all(task.name in served for task in spec.tasks)


def runs_under(spec: SystemSpec, plan: Plan) -> bool:
    """The system has a frontend under `plan`: spec.frontend asks for one and the plan leaves no task unserved
    (no route would exist for it)."""
    return spec.frontend is not None and serves_every_task(spec, plan)


def configuration_url(system: SystemRef, task: TaskPlan, config: ConfigPlan, port: int) -> str:
    return (f"http://{configuration_name(system, task, config)}.{system.namespace}.svc:{port}"
            f"/v2/models/{task.variant}/infer")


def config_text(system: SystemRef, spec: SystemSpec, plan: Plan, store: ProfileStore | None,
                settings: OperatorSettings) -> str:
    """The frontend's file under `plan`. `spec` is the operator's (named by the system's key, as in the plan);
    the file names the system by its own name, the model name clients use."""
    config = frontend_config(spec, plan, lambda task, _index, c: configuration_url(system, task, c, settings.server_port),
                             store, name=system.name)
    return yaml.safe_dump(config.model_dump(mode="json", exclude_none=True), sort_keys=False)


def _metadata(system: SystemRef, name: str, task: str | None, component: str) -> Json:
    return {"name": name, "namespace": system.namespace, "labels": naming.child_labels(system.name, task, component),
            "ownerReferences": [system.owner_reference()]}


def config_map(system: SystemRef, spec: SystemSpec, plan: Plan, store: ProfileStore | None,
               settings: OperatorSettings) -> Json:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(system, frontend_name(system), None,
                                                                           COMPONENT),
            "data": {CONFIG_KEY: config_text(system, spec, plan, store, settings)}}
    return with_applied_hash(body)


def configuration_services(system: SystemRef, plan: Plan, settings: OperatorSettings) -> list[Json]:
    """One Service per planned configuration of the system's tasks, selecting its servers on every node."""
    services = []
    for task in plan.tasks:
        if task.system != system.key:
            continue
        for config in task.configs:
            if not config.replicas:
                continue
            name = configuration_name(system, task, config)
            body = {"apiVersion": "v1", "kind": "Service",
                    "metadata": _metadata(system, name, task.task, "configuration-service"),
                    "spec": {"selector": {naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
                                          naming.SYSTEM_LABEL: naming.label_value(system.name),
                                          CONFIGURATION_LABEL: name},
                             "ports": [{"name": "http", "port": settings.server_port, "targetPort": "http",
                                        "protocol": "TCP"}]}}
            services.append(with_applied_hash(body))
    return services


def replicas(spec: SystemSpec, plan: Plan, settings: OperatorSettings) -> int:
    """Frontend processes for the demand the plan serves, each carrying up to --frontend-requests-per-replica."""
    summary = next((s for s in plan.systems if s.system == spec.name), None)
    demand = summary.demand_rps if summary is not None else spec.demand_rps
    return max(1, math.ceil(demand / settings.frontend_rps_per_replica))


def deployment(system: SystemRef, settings: OperatorSettings, replica_count: int = 1) -> Json:
    name = frontend_name(system)
    selector = {naming.MANAGED_BY: naming.MANAGED_BY_VALUE, "tessera.ai/deployment": name}
    pod_labels = {**selector, naming.SYSTEM_LABEL: naming.label_value(system.name), naming.CHILD_KIND_LABEL: COMPONENT,
                  naming.SCHEMA_LABEL: naming.SCHEMA_VERSION}
    probe = {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5}
    container = {
        "name": CONTAINER,
        "image": settings.frontend_image,
        "args": [COMPONENT, f"{CONFIG_DIRECTORY}/{CONFIG_KEY}", "--port", str(settings.frontend_port)],
        "ports": [{"name": "http", "containerPort": settings.frontend_port}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "httpGet": {"path": "/v2/health/live", "port": "http"}},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIRECTORY, "readOnly": True}],
        # One asyncio process: a core is what it uses (bench/README.md, "Frontend").
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
    }
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(system, name, None, COMPONENT),
        "spec": {
            "replicas": replica_count,
            "selector": {"matchLabels": selector},
            # A new image or port rolls one pod at a time with none missing: the endpoint stays up.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {"metadata": {"labels": pod_labels}, "spec": {
                "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": name}}]}},
        },
    }
    return with_applied_hash(body)


def service(system: SystemRef, settings: OperatorSettings) -> Json:
    name = frontend_name(system)
    body = {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(system, name, None, COMPONENT),
            "spec": {"selector": {naming.MANAGED_BY: naming.MANAGED_BY_VALUE, "tessera.ai/deployment": name},
                     "ports": [{"name": "http", "port": settings.frontend_port, "targetPort": "http",
                                "protocol": "TCP"}]}}
    return with_applied_hash(body)


def children(system: SystemRef, spec: SystemSpec, plan: Plan, store: ProfileStore | None,
             settings: OperatorSettings) -> list[Json]:
    """Everything the system's frontend needs under `plan`; none while it has no frontend there."""
    if not runs_under(spec, plan):
        return []
    return [config_map(system, spec, plan, store, settings), *configuration_services(system, plan, settings),
            service(system, settings), deployment(system, settings, replicas(spec, plan, settings))]
