"""What one frontend process serves: a system's task graph and, per task, where to send its requests.

The file is written by whoever deploys the frontend (`frontend_config` from a
spec and a plan, or by hand) and re-read when it changes (a mounted ConfigMap
is swapped in place). Each task lists its configurations with their planned
capacity (the routing weight) and a batch of one's latency on them (early
dropping's least time), both from the plan the simulation runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from tessera.planner.input_files import InputError
from tessera.planner.model import MAX_LATENCY_MS, MAX_RATE_RPS, Edge, Frontend, Name, Spec, SystemSpec
from tessera.planner.plan import ConfigPlan, Plan, TaskPlan
from tessera.planner.profiles import ProfileStore
from tessera.planner.simulation.entities import build_deployment

MAX_CONFIGURATIONS = 64


class Configuration(Spec):
    """One configuration of a task: its Service and its planned share."""

    name: str = Field(min_length=1, max_length=253, description="A label (metrics, logs): the plan's segment.")
    url: str = Field(min_length=1, max_length=2048, pattern=r"^http://[^/?#]+/[^?#]*$",
                     description="Its Open Inference Protocol infer URL, http://host:port/v2/models/<model>/infer "
                                 "(a Service in the cluster).")
    weight: float = Field(gt=0, le=MAX_RATE_RPS, description="Planned capacity, requests/s: the routing weight.")
    single_ms: float = Field(alias="singleMilliseconds", ge=0, le=MAX_LATENCY_MS,
                             description="A batch of one on it, in ms (early dropping's least time).")


class TaskRoute(Spec):
    name: Name
    configurations: list[Configuration] = Field(min_length=1, max_length=MAX_CONFIGURATIONS)


class FrontendConfig(Spec):
    system: Name
    slo_ms: float = Field(alias="sloMilliseconds", gt=0, le=MAX_LATENCY_MS)
    hop_ms: float = Field(default=1.0, alias="hopMilliseconds", ge=0, le=MAX_LATENCY_MS,
                          description="Network and handling per hop, outside the profiles (early dropping).")
    upstream_timeout_s: float = Field(default=30.0, alias="upstreamTimeoutSeconds", gt=0, le=3600)
    settings: Frontend = Field(default_factory=Frontend)
    tasks: list[TaskRoute] = Field(min_length=1, max_length=64)
    edges: list[Edge] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _graph_is_the_systems(self) -> "FrontendConfig":
        # The spec's own checks (known tasks, a DAG, no join below a split) on the same graph.
        try:
            SystemSpec.model_validate({
                "name": self.system, "slo": {"latencyMilliseconds": self.slo_ms}, "demandRequestsPerSecond": 0,
                "tasks": [{"name": t.name, "variants": [{"name": "served", "accuracy": 1.0, "gpuMemoryGigabytes": 1.0}]} for t in self.tasks],
                "edges": [e.model_dump() for e in self.edges]})
        except ValidationError as error:
            raise ValueError(error.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self


def load_config(path: Path) -> FrontendConfig:
    """The config file (YAML or JSON); a bad one raises InputError naming the field."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{path}: {error}") from error
    try:
        return FrontendConfig.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise InputError(f"{path}: {where}: {first['msg']}") from error


def frontend_config(system: SystemSpec, plan: Plan, url_for: Callable[[TaskPlan, int, ConfigPlan], str],
                    store: ProfileStore | None = None, hop_ms: float = 1.0, name: str | None = None
                    ) -> FrontendConfig:
    """The frontend of `system` under `plan`: each configuration weighted by its planned capacity.

    `name` is the model name clients use, default the system's (the operator
    plans systems under their namespace/name key and serves them by name).

    `url_for(task plan, config index, config)` names the configuration's
    Service. A batch of one's latency comes from the same curves the
    simulation runs (`build_deployment`), so both drop by the same numbers.
    """
    deployment = build_deployment(plan, [system], store)
    routes = []
    for stage in deployment.stages:
        if stage.system != system.name:
            continue  # a pool's plan holds every system planned with it
        task_plan = next(t for t in plan.tasks if (t.system, t.task) == (stage.system, stage.task))
        row = int(stage.replicas[0])
        configurations = []
        for index, config in enumerate(task_plan.configs):
            if not config.replicas:
                continue
            configurations.append(Configuration(
                name=f"{config.segment.mig_profile}-mps{config.segment.mps}-b{config.batch}",
                url=url_for(task_plan, index, config), weight=config.replicas * config.segment_throughput_rps,
                single_ms=float(deployment.latency_s[row, 1]) * 1e3))
            row += config.replicas
        routes.append(TaskRoute(name=stage.task, configurations=configurations))
    return FrontendConfig(system=name or system.name, slo_ms=system.slo.latency_ms, hop_ms=hop_ms,
                          settings=system.frontend or Frontend(), tasks=routes, edges=system.edges)
