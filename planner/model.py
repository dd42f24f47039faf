"""Domain model of a compound inference system: the spec users write.

These pydantic models are the single definition of the data shapes: the CLI
reads them from YAML, the operator's CRD schema is generated from them.
Validation errors name the field and the reason.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Name = str
# Work bounds of one system (the planner walks every path): far above any real inference graph.
MAX_TASKS = 256
MAX_EDGES = 1024
MAX_PATHS = 1024


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Variant(_Spec):
    """One model that can perform a task."""

    name: Name = Field(min_length=1, description="Variant name, unique within its task.")
    accuracy: float = Field(gt=0, description="Accuracy on the task's metric; normalised to the task's best variant.")
    memory_gb: float = Field(gt=0, description="GPU memory one server process of this variant needs at its largest batch.")
    gflops: float | None = Field(default=None, gt=0, description="Forward-pass GFLOPs per request (used by the estimator).")
    params_millions: float | None = Field(default=None, gt=0, description="Parameters in millions (used by the estimator).")
    layers: int | None = Field(
        default=None, ge=1,
        description="Weight layers (convolutions, linear layers) run per request; sets the estimator's per-batch launch overhead.",
    )
    source: str | None = Field(default=None, description="Where the accuracy, FLOPs and parameter figures come from.")
    image: str | None = Field(default=None, description="Container image of the model server.")
    args: list[str] = Field(default_factory=list, description="Arguments of the model server.")


class Task(_Spec):
    name: Name = Field(min_length=1)
    variants: list[Variant] = Field(description="At least one variant.")

    @field_validator("variants")
    @classmethod
    def _variants_present_and_unique(cls, variants: list[Variant]) -> list[Variant]:
        if not variants:
            raise ValueError("a task needs at least one variant")
        _reject_duplicates([v.name for v in variants], "variant")
        return variants

    def variant(self, name: Name) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise KeyError(f"task {self.name!r} has no variant {name!r}")

    @property
    def best_accuracy(self) -> float:
        return max(v.accuracy for v in self.variants)

    def normalised_accuracy(self, variant: Name) -> float:
        return self.variant(variant).accuracy / self.best_accuracy


class Edge(_Spec):
    """Requests flow from `source` to `target`, multiplied by a factor.

    The factor may depend on the upstream variant (a better detector finds
    more objects): `factor_by_variant` overrides `factor` for the variants it
    names.
    """

    source: Name
    target: Name
    factor: float = Field(default=1.0, gt=0, description="Requests on target per request on source.")
    factor_by_variant: dict[Name, float] = Field(default_factory=dict)

    @field_validator("factor_by_variant")
    @classmethod
    def _factors_positive(cls, factors: dict[Name, float]) -> dict[Name, float]:
        for variant, factor in factors.items():
            if not factor > 0:
                raise ValueError(f"factor for upstream variant {variant!r} must be > 0, got {factor}")
        return factors

    def factor_for(self, upstream_variant: Name) -> float:
        return self.factor_by_variant.get(upstream_variant, self.factor)


class Slo(_Spec):
    latency_ms: float = Field(gt=0, description="End-to-end latency bound on every source-to-sink path.")
    accuracy: float = Field(
        default=1.0, gt=0, le=1,
        description="Lower bound on every path's accuracy, as a fraction of the most accurate choice.",
    )
    percentile: Literal["p99", "p50"] = Field(
        default="p99", description="Which latency percentile the bound holds for (profiles' p99 batch latency where measured).",
    )


class ProfilePoint(_Spec):
    """A profile given in the spec, for one (task, variant, segment type, batch)."""

    task: Name
    variant: Name
    gpu: str
    mig_profile: str
    mps: int = Field(default=1, ge=1)
    batch: int = Field(ge=1)
    latency_ms: float = Field(gt=0, description="Latency of one batch of one process.")
    throughput_rps: float = Field(gt=0, description="Requests/s of the whole segment (all MPS processes).")


class SystemSpec(_Spec):
    """A compound inference system: a DAG of tasks with SLOs and a demand."""

    name: Name = Field(min_length=1)
    tasks: list[Task]
    edges: list[Edge] = Field(default_factory=list)
    slo: Slo
    demand_rps: float = Field(ge=0, description="Requests/s entering every source task.")
    priority: Literal["cost", "accuracy"] = Field(
        default="cost", description="cost: fewest GPUs first, then accuracy; accuracy: the reverse.",
    )
    profiles: list[ProfilePoint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _graph_is_bounded(self) -> "SystemSpec":
        """Bounded work before any graph walk: tasks, edges, and source-to-sink paths (counted, not listed)."""
        for what, items, limit in (("tasks", self.tasks, MAX_TASKS), ("edges", self.edges, MAX_EDGES)):
            if len(items) > limit:
                raise ValueError(f"{what}: {len(items)} {what}, over the limit of {limit}")
        paths = _count_paths({t.name for t in self.tasks}, [(e.source, e.target) for e in self.edges])
        if paths > MAX_PATHS:
            raise ValueError(f"edges: the task graph has more than {MAX_PATHS} source-to-sink paths "
                             f"(the planner constrains each); limit is {MAX_PATHS}")
        return self

    @model_validator(mode="after")
    def _graph_is_a_dag(self) -> "SystemSpec":
        if not self.tasks:
            raise ValueError("tasks: a system needs at least one task")
        _reject_duplicates([t.name for t in self.tasks], "task")
        names = {t.name for t in self.tasks}
        for i, edge in enumerate(self.edges):
            for end in ("source", "target"):
                if getattr(edge, end) not in names:
                    raise ValueError(f"edges[{i}].{end}: unknown task {getattr(edge, end)!r}")
            if edge.source == edge.target:
                raise ValueError(f"edges[{i}]: task {edge.source!r} feeds itself")
            upstream = self.task(edge.source)
            for variant in edge.factor_by_variant:
                if variant not in {v.name for v in upstream.variants}:
                    raise ValueError(f"edges[{i}].factor_by_variant: {edge.source!r} has no variant {variant!r}")
        _reject_duplicates([f"{e.source}->{e.target}" for e in self.edges], "edge")
        cycle = _find_cycle(names, [(e.source, e.target) for e in self.edges])
        if cycle:
            raise ValueError(f"edges: the task graph has a cycle: {' -> '.join(cycle)}")
        for i, point in enumerate(self.profiles):
            if point.task not in names:
                raise ValueError(f"profiles[{i}].task: unknown task {point.task!r}")
            if point.variant not in {v.name for v in self.task(point.task).variants}:
                raise ValueError(f"profiles[{i}].variant: task {point.task!r} has no variant {point.variant!r}")
        return self

    def task(self, name: Name) -> Task:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"system {self.name!r} has no task {name!r}")

    @cached_property
    def sources(self) -> list[Name]:
        targets = {e.target for e in self.edges}
        return [t.name for t in self.tasks if t.name not in targets]

    @cached_property
    def sinks(self) -> list[Name]:
        origins = {e.source for e in self.edges}
        return [t.name for t in self.tasks if t.name not in origins]

    def parents(self, task: Name) -> list[Edge]:
        return [e for e in self.edges if e.target == task]

    def children(self, task: Name) -> list[Edge]:
        return [e for e in self.edges if e.source == task]

    @cached_property
    def topological_order(self) -> list[Name]:
        order, seen = [], set()

        def visit(name: Name) -> None:
            if name in seen:
                return
            seen.add(name)
            for edge in self.parents(name):
                visit(edge.source)
            order.append(name)

        for task in self.tasks:
            visit(task.name)
        return order

    @cached_property
    def paths(self) -> list[tuple[Name, ...]]:
        """Every source-to-sink path, as task names."""

        def from_task(name: Name) -> list[tuple[Name, ...]]:
            children = self.children(name)
            if not children:
                return [(name,)]
            return [(name,) + rest for edge in children for rest in from_task(edge.target)]

        return [path for source in self.sources for path in from_task(source)]

    @property
    def longest_path_tasks(self) -> int:
        return max(len(path) for path in self.paths)

    def demand(self, variants: dict[Name, Name]) -> dict[Name, float]:
        """Requests/s on every task for a choice of one variant per task."""
        demand: dict[Name, float] = {}
        for name in self.topological_order:
            parents = self.parents(name)
            if not parents:
                demand[name] = self.demand_rps
            else:
                demand[name] = sum(demand[e.source] * e.factor_for(variants[e.source]) for e in parents)
        return demand

    def path_accuracy(self, path: tuple[Name, ...], variants: dict[Name, Name]) -> float:
        return math.prod(self.task(t).normalised_accuracy(variants[t]) for t in path)


class Pool(_Spec):
    """The GPUs a plan may use: one product, a count."""

    gpu: str = Field(default="H100-80GB", description="GPU product, a name from the catalog.")
    gpus: int = Field(default=8, ge=1, description="Number of GPUs in the pool.")

    @field_validator("gpu")
    @classmethod
    def _gpu_known(cls, gpu: str) -> str:
        from tessera.planner.catalog import gpu_product

        try:
            gpu_product(gpu)
        except KeyError as error:
            raise ValueError(error.args[0]) from None
        return gpu


def _count_paths(nodes: set[Name], edges: list[tuple[Name, Name]]) -> int:
    """Source-to-sink paths of the DAG part of a graph, by dynamic programming (Kahn's order, no recursion)."""
    successors: dict[Name, list[Name]] = {n: [] for n in nodes}
    indegree = dict.fromkeys(nodes, 0)
    for source, target in edges:
        if source in nodes and target in nodes:
            successors[source].append(target)
            indegree[target] += 1
    paths = {n: 1 for n in nodes if indegree[n] == 0}
    ready, total = list(paths), 0
    while ready:
        node = ready.pop()
        if not successors[node]:
            total += paths[node]
        for nxt in successors[node]:
            paths[nxt] = paths.get(nxt, 0) + paths[node]
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return total


def _reject_duplicates(names: list[str], what: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} name {name!r}")
        seen.add(name)


def _find_cycle(nodes: set[Name], edges: list[tuple[Name, Name]]) -> list[Name] | None:
    successors: dict[Name, list[Name]] = {n: [] for n in nodes}
    for source, target in edges:
        successors[source].append(target)
    state: dict[Name, int] = {}  # 1 = on the current path, 2 = finished

    def visit(node: Name, path: list[Name]) -> list[Name] | None:
        state[node] = 1
        for nxt in successors[node]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(nodes):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None
