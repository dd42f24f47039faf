"""The plan: what the planner decides, as plain data."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.change_cost import ChangeSummary
from tessera.planner.latency import DEFAULT_CONNECTIONS, Routing
from tessera.planner.profiles import ProfileSource, SegmentType


class ConfigPlan(BaseModel):
    """One (segment type, batch) configuration serving a task."""

    segment: SegmentType
    batch: int
    replicas: int = Field(description="MIG instances, each running `segment.mps` server processes.")
    batch_latency_ms: float
    segment_throughput_rps: float
    load_rps: float = Field(description="Requests/s routed to this configuration, all replicas together.")
    stage_latency_ms: float = Field(description="Predicted worst-case latency through this configuration.")
    source: ProfileSource
    latency_spread: float = Field(default=1.0, description="The p99/p50 its profile's batch latency was scaled by: "
                                  "1 for measured and given profiles, an estimate's measured spread or the "
                                  "plan's latency_spread.")


class TaskPlan(BaseModel):
    system: str
    task: str
    variant: str
    normalised_accuracy: float
    demand_rps: float
    budget_ms: float = Field(description="Latency budget of this task's stage.")
    stage_latency_ms: float = Field(description="Slowest configuration's predicted stage latency.")
    configs: list[ConfigPlan]
    arrival_dispersion: float = Field(
        default=0.0, description="Index of dispersion of the task's arrivals in its queueing wait: 1 + the largest "
                                 "bulk a parent hands it at once (1 at a source); 0 when the plan counts no wait.")
    share_base_rps: float = Field(
        default=0.0, description="The load its replicas' shares of a bulk are taken of (its least demand, while "
                                 "the plan serves all demand); 0: every replica may see a whole bulk.")

    @property
    def capacity_rps(self) -> float:
        return sum(c.replicas * c.segment_throughput_rps for c in self.configs)


class InstancePlan(BaseModel):
    mig_profile: str
    system: str | None = None
    task: str | None = None
    config: int | None = Field(default=None, description="Index into the task's configs; None when idle.")


class GpuPlan(BaseModel):
    index: int = Field(description="Position among the pool's plannable GPUs.")
    node: str | None = Field(default=None, description="The node it is on (pools of named nodes).")
    device: int | None = Field(default=None, description="Its GPU index on the node.")
    layout: list[tuple[str, int]] = Field(description="MIG profile name and instance count.")
    instances: list[InstancePlan]


class PathPlan(BaseModel):
    system: str
    tasks: list[str]
    latency_ms: float
    budget_ms: float
    accuracy: float


class SystemSummary(BaseModel):
    system: str
    demand_rps: float
    served_rps: float
    latency_slo_ms: float
    worst_path_latency_ms: float
    accuracy_slo: float
    worst_path_accuracy: float


class CostProof(BaseModel):
    """The cost in its own units, each count beside the lower bound the solver proved for it.

    The slices' bound holds among plans with this many GPUs (the order is
    lexicographic). Proven: GPUs equal their bound and slices lie within
    `slice_tolerance` of theirs; otherwise the time limit cut the proof
    short by the difference.
    """

    gpus: int
    gpus_lower_bound: int
    slices: int
    slices_lower_bound: int
    slice_tolerance: float

    @property
    def gpus_unproven(self) -> int:
        return self.gpus - self.gpus_lower_bound

    @property
    def slices_unproven(self) -> int:
        return self.slices - self.slices_lower_bound

    @property
    def proven(self) -> bool:
        return self.gpus_unproven == 0 and self.slices_unproven < self.slice_tolerance


class SolverReport(BaseModel):
    # An unproven solution's gap is infinite; JSON carries it as Infinity.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    status: str
    stages: list[str] = Field(description="Objective stages solved, in order.")
    objective: dict[str, float]
    mip_gap: float
    build_s: float
    solve_s: float
    variables: int
    constraints: int
    time_limited: list[str] = Field(default_factory=list, description="Stages the time limit stopped.")
    cost: CostProof | None = Field(default=None, description="GPUs and slices with their proven lower bounds.")
    method: str = Field(
        default="joint", description="How the plan was made (decompose.py): joint (one MILP for all systems), "
                                     "decomposed (each system alone, packed together, checked as a whole), "
                                     "incremental (a re-plan: the systems whose inputs are unchanged keep their "
                                     "parts of the plan in force, the others planned alone and packed onto what "
                                     "is left, checked as a whole) or joint-fallback (decomposed or incremental "
                                     "first, then joint: `fallback` says why).")
    fallback: str | None = Field(default=None, description="Why a decomposed plan gave way to the joint solve.")
    kept: list[str] = Field(default_factory=list, description="An incremental plan's systems whose parts of the "
                                                              "plan in force were kept as they were.")
    reused: list[str] = Field(default_factory=list, description="A decomposed or incremental plan's systems whose "
                                                                "part was not solved: another system's, planned "
                                                                "from the same spec but the name under the same "
                                                                "quotas, under their name.")


class Plan(BaseModel):
    gpu: str
    pool_gpus: int
    features: str
    headroom: float
    queueing: bool = Field(default=False, description="Whether stage latencies count the p99 queueing wait.")
    latency_spread: float = Field(default=1.0, description="p99/p50 of an estimated profile's batch latency where "
                                  "its variant's measurements do not say it.")
    routing: Routing = Field(
        default=Routing.ONE_REPLICA,
        description="How requests reach a task's replicas, as the queueing wait assumes: one-replica (any replica "
                    "may see a whole bulk), per-request (in proportion to planned load) or per-connection (a "
                    "Service's connections, pinned at random).")
    connections: int = Field(default=DEFAULT_CONNECTIONS, description="Client connections to a task's Service "
                                                                      "(per-connection routing).")
    tasks: list[TaskPlan]
    gpus: list[GpuPlan]
    paths: list[PathPlan]
    systems: list[SystemSummary]
    gpus_used: int
    slices_used: int
    profile_sources: dict[str, int]
    solver: SolverReport
    diagnosis: list[str] = Field(default_factory=list, description="Why demand is not fully served, when it is not.")
    changes: ChangeSummary | None = Field(
        default=None, description="On a pool of nodes with MIG instances: the nodes the plan re-partitions, what "
                                  "that saves and what declined changes would have (planner/change_cost.py).")
    running: dict[str, float] = Field(
        default_factory=dict, description="Running systems held at least at these served fractions before the "
                                          "others were served (plan()'s `running`), as given.")
    kept_for: dict[str, list[str]] = Field(
        default_factory=dict, description="Nodes whose layouts were kept for running systems -> those systems.")
    planned_from: dict[str, str] = Field(
        default_factory=dict, description="System -> a digest of what its part was planned from (its spec, its "
                                          "variants' profiles, the options): a re-plan keeps the parts of the "
                                          "systems whose digest is unchanged (decompose.py).")

    def task(self, system: str, task: str) -> TaskPlan:
        for plan in self.tasks:
            if (plan.system, plan.task) == (system, task):
                return plan
        raise KeyError(f"plan has no task {system}/{task}")

    @property
    def fully_served(self) -> bool:
        return all(s.served_rps >= s.demand_rps * (1 - 1e-5) for s in self.systems)
