"""Domain model of a compound inference system: the spec users write.

These pydantic models are the single definition of the data shapes: the CLI
reads them from YAML, the operator's CRD schema is generated from them.
Validation errors name the field and the reason.

Python code uses the attribute names (snake_case: ``slo.latency_ms``); files
and the Kubernetes API use the camelCase wire names with units
(``latencyMilliseconds``), set as aliases for validation and serialization.
Every number is finite and inside a stated range; every string and list is
bounded, so the API server can reject what the planner could not use.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator
from pydantic.json_schema import JsonDict

from tessera.planner.catalog import CATALOG

DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_1035_LABEL)]
"""A DNS-1035 label: lower-case letters, digits and '-', starting with a letter, at most 63 characters."""
if TYPE_CHECKING:
    GpuProductName = str  # a static checker cannot read the catalog's names
else:
    GpuProductName = Literal[tuple(CATALOG)]
MIG_PROFILE_NAME = r"^[1-7]g\.[0-9]+gb$"
C_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"

MAX_TASKS = 64
MAX_VARIANTS = 32
MAX_EDGES = 256
MAX_PROFILES = 2048
MAX_ARGS = 64
MAX_ENV = 64
MAX_LATENCY_MS = 3_600_000.0  # an hour: beyond any interactive SLO
MAX_RATE_RPS = 10_000_000.0
MAX_BATCH = 1024
MAX_MPS_DEGREE = 48  # MPS clients per GPU (Volta and later)
MAX_PATHS = 1024  # source-to-sink paths: the planner constrains each; layered diamonds make them exponential
MIN_POOL_PRIORITY, MAX_POOL_PRIORITY = -1000, 1000  # a system's (and an AdapterPool's) rank in its GPU pool


def list_map(*keys: str) -> JsonDict:
    """Schema extras making a list a Kubernetes list-map: items unique on `keys`, merged by them."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    """One CEL validation rule for the API server (x-kubernetes-validations)."""
    return {"rule": rule, "message": message, **({"fieldPath": field_path} if field_path else {})}


class Spec(BaseModel):
    """Base of every API model: unknown fields rejected, numbers finite, camelCase on the wire."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True, allow_inf_nan=False)



class EnvVar(Spec):
    name: str = Field(min_length=1, max_length=256, pattern=C_IDENTIFIER, description="Environment variable name.")
    value: str = Field(default="", max_length=4096, description="Its value.")


class PrometheusQuery(Spec):
    """Where the operator reads a demand: an instant PromQL query, the user's or an admin template."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel("has(self.query) != has(self.template)", "give exactly one of query and template"),
    ]})

    query: str | None = Field(
        default=None, min_length=1, max_length=4096,
        description="PromQL expression giving requests/s; the operator adds the object's namespace matcher to "
                    "every selector. An error, an empty result or NaN reads as Unknown, never as 0.",
    )
    template: Name | None = Field(
        default=None,
        description="Name of a query template the operator's administrator defined (tessera operator "
                    "--demand-template), instead of query.",
    )

    @model_validator(mode="after")
    def _one_query(self) -> "PrometheusQuery":
        if (self.query is None) == (self.template is None):
            raise ValueError("give exactly one of query and template")
        return self


MAX_WINDOW_S = 86_400


class SystemDemandSource(PrometheusQuery):
    """A system's demand read from Prometheus, re-planned with hysteresis."""

    minimum_rps: float = Field(
        default=0.0, alias="minimumRequestsPerSecond", ge=0, le=MAX_RATE_RPS,
        description="Demand never planned below this, in requests/s, whatever Prometheus reads (idle included).",
    )
    stabilization_s: int | None = Field(
        default=None, alias="scaleDownStabilizationSeconds", ge=0, le=MAX_WINDOW_S,
        description="Demand must stay below the plan this long before a scale-down, in s "
                    "(default: the operator's, 300).",
    )
    dry_run: bool = Field(
        default=False, alias="dryRun",
        description="Compute and report (status.demand, metrics) the demand tessera would plan for, without "
                    "re-planning on it.",
    )


class Variant(Spec):
    """One model that can perform a task, and how to run its server."""

    name: Name = Field(description="Variant name, a DNS-1035 label unique within its task.")
    accuracy: float = Field(
        gt=0, le=1, description="Accuracy on the task's metric as a fraction in (0, 1]; the planner normalises it to the task's best variant.",
    )
    memory_gb: float = Field(
        alias="gpuMemoryGigabytes", gt=0, le=1024,
        description="GPU memory one server process of this variant needs at its largest batch, in GB, in (0, 1024].",
    )
    gflops: float | None = Field(
        default=None, alias="gigaflopsPerRequest", gt=0, le=1_000_000,
        description="Forward-pass GFLOPs per request, in (0, 1e6] (used by the estimator).",
    )
    params_millions: float | None = Field(
        default=None, alias="parametersMillions", gt=0, le=10_000_000,
        description="Parameters in millions, in (0, 1e7] (used by the estimator).",
    )
    layers: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Weight layers (convolutions, linear layers) run per request, 1-100000; sets the estimator's per-batch launch overhead.",
    )
    source: str | None = Field(
        default=None, max_length=1024, description="Where the accuracy, FLOPs and parameter figures come from.",
    )
    image: str | None = Field(default=None, min_length=1, max_length=512, description="Container image of the model server.")
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=MAX_ARGS, description="Arguments of the model server.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=MAX_ENV, json_schema_extra=list_map("name"),
        description="Environment variables of the model server, besides those tessera sets (batch size, downstream URLs).",
    )
    port: int = Field(default=8000, ge=1, le=65535, description="Port the model server listens on (Open Inference Protocol over HTTP).")
    cpu_millicores: int = Field(
        default=1000, alias="cpuRequestMillicores", ge=1, le=512_000,
        description="CPU request of one server process, in millicores (1000 = one core).",
    )
    memory_mib: int = Field(
        default=4096, alias="memoryRequestMebibytes", ge=1, le=4_194_304,
        description="Host memory request of one server process, in MiB.",
    )
    max_batch: int | None = Field(
        default=None, alias="maxBatchSize", ge=1, le=MAX_BATCH,
        description="Largest batch the model server accepts, 1-1024; the planner chooses no larger batch.",
    )


class Task(Spec):
    """One step of the graph, served by exactly one of its variants."""

    name: Name = Field(description="Task name, a DNS-1035 label unique within the system.")
    variants: list[Variant] = Field(
        min_length=1, max_length=MAX_VARIANTS, json_schema_extra=list_map("name"),
        description="The models that can perform this task; the planner picks one.",
    )

    @field_validator("variants")
    @classmethod
    def _variants_unique(cls, variants: list[Variant]) -> list[Variant]:
        _reject_duplicates([v.name for v in variants], "variant")
        return variants

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise KeyError(f"task {self.name!r} has no variant {name!r}")

    @property
    def best_accuracy(self) -> float:
        return max(v.accuracy for v in self.variants)

    def normalised_accuracy(self, variant: str) -> float:
        return self.variant(variant).accuracy / self.best_accuracy


Factor = Annotated[float, Field(gt=0, le=10_000)]


OUTPUT_NAME = r"^[A-Za-z0-9_.\-]+$"


class Edge(Spec):
    """Requests flow from `source` to `target`, multiplied by a factor.

    The factor may depend on the upstream variant (a better detector finds
    more objects): `factor_by_variant` overrides `factor` for the variants it
    names. `mode` says how the frontend (spec.frontend) makes the target's
    requests from the source's: the source's response as the target's inputs,
    the system's original request, or one request per item of the source's
    output `splitOutput` (what the factor counts, in reality).
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel("self.source != self.target", "an edge must join two different tasks", ".target"),
        cel("(has(self.mode) && self.mode == 'split') == has(self.splitOutput)", "splitOutput is given exactly when mode is split",
            ".splitOutput"),
    ]})

    source: Name = Field(description="The upstream task's name.")
    target: Name = Field(description="The downstream task's name.")
    factor: Factor = Field(default=1.0, description="Requests on target per request on source, in (0, 10000].")
    factor_by_variant: dict[Name, Factor] = Field(
        default_factory=dict, alias="factorByVariant", max_length=MAX_VARIANTS,
        description="Per upstream variant name, a factor that overrides `factor`, in (0, 10000].",
    )

    mode: Literal["response", "request", "split"] = Field(
        default="response",
        description="How the frontend makes the target's requests: response (the source's outputs become the "
                    "target's inputs), request (the system's original request), split (one request per item, "
                    "along the first dimension, of the source's output splitOutput).",
    )
    split_output: str | None = Field(
        default=None, alias="splitOutput", min_length=1, max_length=256, pattern=OUTPUT_NAME,
        description="With mode split: the name of the source's output to split into one request per item.",
    )

    @model_validator(mode="after")
    def _split_names_its_output(self) -> "Edge":
        if (self.mode == "split") != (self.split_output is not None):
            raise ValueError("splitOutput: give it exactly when mode is split")
        return self

    def factor_for(self, upstream_variant: str) -> float:
        return self.factor_by_variant.get(upstream_variant, self.factor)


class Slo(Spec):
    """The service-level objective every source-to-sink path must meet."""

    latency_ms: float = Field(
        alias="latencyMilliseconds", gt=0, le=MAX_LATENCY_MS,
        description="End-to-end latency bound on every source-to-sink path, in ms, in (0, 3600000].",
    )
    accuracy: float = Field(
        default=1.0, gt=0, le=1,
        description="Lower bound on every path's accuracy, as a fraction in (0, 1] of the most accurate choice.",
    )
    percentile: Literal["p99", "p50"] = Field(
        default="p99", description="Which latency percentile the bound holds for (profiles' p99 batch latency where measured).",
    )


class ProfilePoint(Spec):
    """A profile given in the spec, for one (task, variant, segment type, batch)."""

    task: Name = Field(description="The task's name.")
    variant: Name = Field(description="The variant's name, within the task.")
    gpu: GpuProductName = Field(alias="gpuProduct", description="GPU product the profile was measured on.")
    mig_profile: str = Field(
        alias="migProfile", max_length=16, pattern=MIG_PROFILE_NAME,
        description="MIG profile of the segment, such as 1g.10gb (7g.80gb: the whole GPU).",
    )
    mps: int = Field(default=1, alias="mpsDegree", ge=1, le=MAX_MPS_DEGREE, description="Server processes sharing the MIG instance through MPS, 1-48.")
    batch: int = Field(alias="batchSize", ge=1, le=MAX_BATCH, description="Batch size, 1-1024.")
    latency_ms: float = Field(
        alias="latencyMilliseconds", gt=0, le=MAX_LATENCY_MS,
        description="Latency of one batch of one process, in ms, in (0, 3600000].",
    )
    throughput_rps: float = Field(
        alias="throughputRequestsPerSecond", gt=0, le=MAX_RATE_RPS,
        description="Requests/s of the whole segment (all MPS processes), in (0, 1e7].",
    )


class Frontend(Spec):
    """The system's frontend: one Open Inference Protocol endpoint that runs the task graph per request."""

    early_dropping: bool = Field(
        default=True, alias="earlyDropping",
        description="Drop a request at a hop when its remaining budget is below the least time the rest of its "
                    "path needs by the plan.",
    )
    drop_margin_ms: float = Field(
        default=0.0, alias="dropMarginMilliseconds", ge=0, le=MAX_LATENCY_MS,
        description="Budget kept in hand beyond that least time before a request is dropped, in ms.",
    )
    max_in_flight: int = Field(
        default=1024, alias="maxInFlight", ge=1, le=1_000_000,
        description="Requests a frontend process carries at once; beyond it answers 429.",
    )
    max_body_bytes: int = Field(
        default=8 * 2**20, alias="maxBodyBytes", ge=1024, le=2**30,
        description="Largest request body accepted, in bytes; larger answers 413.",
    )


class SystemSpec(Spec):
    """A compound inference system: a DAG of tasks with SLOs and a demand."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel("self.edges.all(e, self.tasks.exists(t, t.name == e.source))",
            "every edge's source must name a task in spec.tasks", ".edges"),
        cel("self.edges.all(e, self.tasks.exists(t, t.name == e.target))",
            "every edge's target must name a task in spec.tasks", ".edges"),
    ]})

    name: Name = Field(description="The system's name (metadata.name in Kubernetes).")
    tasks: list[Task] = Field(
        min_length=1, max_length=MAX_TASKS, json_schema_extra=list_map("name"),
        description="The tasks of the graph, at most 64.",
    )
    edges: list[Edge] = Field(
        default_factory=list, max_length=MAX_EDGES, json_schema_extra=list_map("source", "target"),
        description="Directed edges between tasks; they must form a DAG (a cycle is reported in status).",
    )
    slo: Slo = Field(description="Latency and accuracy bounds on every path.")
    demand_rps: float = Field(
        alias="demandRequestsPerSecond", ge=0, le=MAX_RATE_RPS,
        description="Requests/s entering every source task, in [0, 1e7]; with demandSource, the rate planned for until a measurement arrives.",
    )
    demand_source: SystemDemandSource | None = Field(
        default=None, alias="demandSource",
        description="Optional Prometheus query for the requests/s entering every source task; re-planned with hysteresis.",
    )
    frontend: Frontend | None = Field(
        default=None,
        description="Serve the system through a tessera frontend that carries each request through the task "
                    "graph (its servers then call no downstream task themselves); absent: the servers call "
                    "their downstream tasks (TESSERA_DOWNSTREAM_URLS).",
    )
    priority: Literal["cost", "accuracy"] = Field(
        default="cost", description="cost: fewest GPUs first, then accuracy; accuracy: the reverse.",
    )
    pool_priority: int = Field(
        default=0, alias="poolPriority", ge=MIN_POOL_PRIORITY, le=MAX_POOL_PRIORITY,
        description="Rank among the systems of its GPU pool, in [-1000, 1000]: where the pool cannot serve "
                    "them all, a lower-priority system loses accuracy, then served demand, before a "
                    "higher-priority one loses either (within each namespace's quotas; equal priorities "
                    "share by served fractions). One order with the pool's AdapterPools' poolPriority: a "
                    "higher-priority AdapterPool may claim GPUs of lower-priority systems, and the GPUs of an "
                    "AdapterPool that every compound system of the pool outranks are planned on.",
    )
    profiles: list[ProfilePoint] = Field(
        default_factory=list, max_length=MAX_PROFILES,
        description="Profiles measured elsewhere, trusted above the built-in estimate and below the profiler's own.",
    )

    @model_validator(mode="after")
    def _graph_is_bounded(self) -> "SystemSpec":
        """Bounded work before any graph walk: source-to-sink paths, counted, not listed."""
        paths = _count_paths({t.name for t in self.tasks}, [(e.source, e.target) for e in self.edges])
        if paths > MAX_PATHS:
            raise ValueError(f"edges: the task graph has more than {MAX_PATHS} source-to-sink paths "
                             f"(the planner constrains each); limit is {MAX_PATHS}")
        return self

    @model_validator(mode="after")
    def _graph_is_a_dag(self) -> "SystemSpec":
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
                    raise ValueError(f"edges[{i}].factorByVariant: {edge.source!r} has no variant {variant!r}")
        _reject_duplicates([f"{e.source}->{e.target}" for e in self.edges], "edge")
        cycle = _find_cycle(names, [(e.source, e.target) for e in self.edges])
        if cycle:
            raise ValueError(f"edges: the task graph has a cycle: {' -> '.join(cycle)}")
        _reject_joins_below_splits(self.edges)
        for i, point in enumerate(self.profiles):
            if point.task not in names:
                raise ValueError(f"profiles[{i}].task: unknown task {point.task!r}")
            if point.variant not in {v.name for v in self.task(point.task).variants}:
                raise ValueError(f"profiles[{i}].variant: task {point.task!r} has no variant {point.variant!r}")
        return self

    def task(self, name: str) -> Task:
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


class Pool(Spec):
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


def _reject_joins_below_splits(edges: list[Edge]) -> None:
    """A task with several parents waits for one request from each; below a split a parent runs once per item."""
    below = {e.target for e in edges if e.mode == "split"}
    frontier = list(below)
    while frontier:
        task = frontier.pop()
        for edge in edges:
            if edge.source == task and edge.target not in below:
                below.add(edge.target)
                frontier.append(edge.target)
    parents: dict[str, int] = {}
    for edge in edges:
        parents[edge.target] = parents.get(edge.target, 0) + 1
    for i, edge in enumerate(edges):
        if parents[edge.target] > 1 and edge.target in below:
            raise ValueError(f"edges[{i}].target: {edge.target!r} joins several parents below a split edge "
                             "(it would wait for one request per parent where a parent runs once per item)")


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
