"""From the plan's node GPUs to the Deployments and MIG layouts per node.

The planner plans on a NodePool and names each GPU it uses by node and
device index; this module groups that into what the operator writes: one
layout per node GPU, and replicas per (task configuration, node).

A system that turned invalid keeps its last good share of the pool (its
tasks and the whole GPUs that host them, by node and GPU index) until it is
fixed or deleted; `Share` is that record, stored with the pool's plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from tessera.planner.catalog import Layout
from tessera.planner.plan import InstancePlan, Plan, TaskPlan

@dataclass(frozen=True, order=True)
class ServerKey:
    """One Deployment: a task configuration's replicas on one node."""

    system: str
    task: str
    config: int
    node: str


@dataclass
class NodePlan:
    node: str
    gpu_count: int
    layouts: dict[int, Layout] = field(default_factory=dict)
    """GPU index on the node -> its planned MIG layout; GPUs the plan leaves idle are absent."""

    def profile_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layout in self.layouts.values():
            for profile, count in layout:
                counts[profile] = counts.get(profile, 0) + count
        return counts


class PlacedGpu(BaseModel):
    node: str
    gpu: int
    layout: list[tuple[str, int]]
    instances: list[InstancePlan]


class Share(BaseModel):
    """One system's part of a plan, pinned to node GPUs: what keeps running while it is invalid."""

    tasks: list[TaskPlan]
    gpus: list[PlacedGpu]


@dataclass
class Placement:
    nodes: dict[str, NodePlan]
    servers: dict[ServerKey, int]
    """Replicas per Deployment."""
    tasks: dict[tuple[str, str], TaskPlan]
    """(system, task) -> its plan, for every system placed."""

    def servers_of(self, system: str) -> dict[ServerKey, int]:
        return {key: replicas for key, replicas in self.servers.items() if key.system == system}


def placed_gpus(plan: Plan) -> list[PlacedGpu]:
    """The plan's GPUs by (node, device), as the planner placed them on the NodePool."""
    missing = [g.index for g in plan.gpus if g.node is None or g.device is None]
    if missing:
        raise ValueError(f"plan GPUs {missing} name no node: the plan was not made on a pool of nodes")
    return [PlacedGpu(node=g.node, gpu=g.device, layout=g.layout, instances=g.instances)
            for g in plan.gpus if g.node is not None and g.device is not None]


def share_of(system: str, tasks: list[TaskPlan], gpus: list[PlacedGpu]) -> Share:
    """A system's tasks and the whole GPUs hosting any of its instances."""
    own = [g for g in gpus if any(i.system == system for i in g.instances)]
    return Share(tasks=[t for t in tasks if t.system == system], gpus=[
        g.model_copy(update={"instances": [i if i.system == system else InstancePlan(mig_profile=i.mig_profile)
                                           for i in g.instances]}) for g in own])


def place(gpus: list[PlacedGpu], tasks: list[TaskPlan], gpu_counts: dict[str, int]) -> Placement:
    nodes: dict[str, NodePlan] = {}
    servers: dict[ServerKey, int] = {}
    for gpu in gpus:
        node_plan = nodes.setdefault(gpu.node, NodePlan(gpu.node, gpu_counts.get(gpu.node, gpu.gpu + 1)))
        node_plan.layouts[gpu.gpu] = tuple(sorted((name, count) for name, count in gpu.layout))
        for instance in gpu.instances:
            if instance.config is None or instance.system is None or instance.task is None:
                continue  # an idle instance
            key = ServerKey(instance.system, instance.task, instance.config, gpu.node)
            servers[key] = servers.get(key, 0) + 1
    return Placement(nodes, servers, {(t.system, t.task): t for t in tasks})
