"""The plan: what the planner decides, as plain data."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

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


class TaskPlan(BaseModel):
    system: str
    task: str
    variant: str
    normalised_accuracy: float
    demand_rps: float
    budget_ms: float = Field(description="Latency budget of this task's stage.")
    stage_latency_ms: float = Field(description="Slowest configuration's predicted stage latency.")
    configs: list[ConfigPlan]

    @property
    def capacity_rps(self) -> float:
        return sum(c.replicas * c.segment_throughput_rps for c in self.configs)


class InstancePlan(BaseModel):
    mig_profile: str
    system: str | None = None
    task: str | None = None
    config: int | None = Field(default=None, description="Index into the task's configs; None when idle.")


class GpuPlan(BaseModel):
    index: int
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


class Plan(BaseModel):
    gpu: str
    pool_gpus: int
    features: str
    headroom: float
    tasks: list[TaskPlan]
    gpus: list[GpuPlan]
    paths: list[PathPlan]
    systems: list[SystemSummary]
    gpus_used: int
    slices_used: int
    profile_sources: dict[str, int]
    solver: SolverReport
    diagnosis: list[str] = Field(default_factory=list, description="Why demand is not fully served, when it is not.")

    def task(self, system: str, task: str) -> TaskPlan:
        for plan in self.tasks:
            if (plan.system, plan.task) == (system, task):
                return plan
        raise KeyError(f"plan has no task {system}/{task}")

    @property
    def fully_served(self) -> bool:
        return all(s.served_rps >= s.demand_rps * (1 - 1e-5) for s in self.systems)
