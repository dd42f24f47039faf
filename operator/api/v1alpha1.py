"""The v1alpha1 API's status: typed models for both kinds, and the names in it.

The operator writes these (through the status subresource); the CRDs'
status schemas are generated from them. Every list is bounded so a status
stays a few kilobytes at 50 tasks or 2,000 adapters: per-adapter placement
lives in a ConfigMap the status names, never in the status itself.

Children's names: `metadata.name` of both kinds is a DNS-1035 label of at
most 63 characters (it is the value of the `tessera.ai/system` or
`tessera.ai/pool` label, and a prefix of Service names). Children get hashed
names from `child_name`, so any system, task and node name fits.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, StringConstraints

from tessera.planner.model import DNS_1035_LABEL, MAX_TASKS, MIG_PROFILE_NAME, Name, Spec, list_map

MAX_NAME_LENGTH = 63
NodeName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
CHILD_HASH_LENGTH = 10


class ConditionType:
    """Condition types of both kinds. Ready=False carries the reason a user can act on."""

    READY = "Ready"
    PLANNED = "Planned"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    INVALID = "Invalid"
    MIG_LAYOUT_APPLIED = "MigLayoutApplied"
    PROFILES_ESTIMATED = "ProfilesEstimated"
    PROFILING_COMPLETE = "ProfilingComplete"
    METRICS_AVAILABLE = "MetricsAvailable"
    ADAPTERS_PLACED = "AdaptersPlaced"
    PREREQUISITES_MET = "PrerequisitesMet"
    LATENCY_SLO_MET = "LatencySLOMet"


class Phase:
    """One-word summary of where an object is; the conditions hold the detail."""

    PENDING = "Pending"        # seen, nothing decided yet
    PROFILING = "Profiling"    # waiting for profiler Jobs
    PLANNING = "Planning"      # a solve or placement is running
    DEPLOYING = "Deploying"    # plan chosen; MIG layouts and servers being applied
    READY = "Ready"            # the plan is applied and every server is ready
    DEGRADED = "Degraded"      # serving, but below the plan (last good plan kept)
    INFEASIBLE = "Infeasible"  # no plan meets the SLO on the pool; the reason is in Ready's message
    INVALID = "Invalid"        # the spec fails a check the schema cannot make (a cycle, ...)


def _values(constants: type) -> tuple[str, ...]:
    return tuple(v for k, v in vars(constants).items() if not k.startswith("_"))


CONDITION_TYPES = _values(ConditionType)
PHASES = _values(Phase)
if TYPE_CHECKING:
    PhaseName = str  # the phases are checked where the status is validated, at run time
else:
    PhaseName = Literal[PHASES]


def child_name(*parts: str) -> str:
    """A DNS-1035 name for a child object: readable parts, then a hash of all of them.

    The prefix is cut so the whole stays within 63 characters; the hash keeps
    names of different (system, task, configuration, node) tuples distinct.
    """
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:CHILD_HASH_LENGTH]
    prefix = "-".join(parts).lower()
    prefix = "".join(c if c.isalnum() else "-" for c in prefix)
    prefix = prefix[: MAX_NAME_LENGTH - CHILD_HASH_LENGTH - 1].strip("-")
    if not prefix or not prefix[0].isalpha():
        prefix = ("t-" + prefix)[: MAX_NAME_LENGTH - CHILD_HASH_LENGTH - 1].strip("-")
    return f"{prefix}-{digest}"


class Condition(Spec):
    """The latest observation of one aspect of the object (Kubernetes' metav1.Condition)."""

    type: str = Field(
        min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9]*$",
        description="Condition type: " + ", ".join(CONDITION_TYPES) + ".",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="CamelCase reason for the last transition, for programs to match.",
    )
    message: str = Field(default="", max_length=4096, description="What happened and what a user can do, in words.")
    last_transition_time: datetime = Field(
        alias="lastTransitionTime", description="When the status last changed (RFC 3339).",
    )
    observed_generation: int | None = Field(
        default=None, alias="observedGeneration", ge=0, le=2**53,
        description="metadata.generation this condition was computed from.",
    )


class ConfigurationSummary(Spec):
    """One (segment type, batch) configuration a task runs in, and its replicas."""

    mig_profile: str = Field(alias="migProfile", max_length=16, pattern=MIG_PROFILE_NAME, description="MIG profile of the segment.")
    mps: int = Field(alias="mpsDegree", ge=1, le=48, description="Server processes sharing the MIG instance.")
    batch: int = Field(alias="batchSize", ge=1, le=1024, description="Batch size.")
    replicas: int = Field(ge=0, le=100_000, description="Segments (MIG instances) running this configuration.")


class TaskPlanSummary(Spec):
    name: Name = Field(description="The task's name.")
    variant: Name = Field(description="The variant chosen for the task.")
    configurations: list[ConfigurationSummary] = Field(
        max_length=8, description="The configurations serving the task (most tasks have one).",
    )


class ProfileSourceCounts(Spec):
    """How many chosen configurations rest on which kind of profile."""

    measured: int = Field(default=0, ge=0, le=1_000_000, description="Measured by the profiler in this cluster.")
    given: int = Field(default=0, ge=0, le=1_000_000, description="Given in spec.profiles.")
    estimated: int = Field(
        default=0, ge=0, le=1_000_000,
        description="From the built-in analytical estimate (condition ProfilesEstimated says so).",
    )


class PlanChangesSummary(Spec):
    """What the pool's plan in force changed on nodes that already carried MIG instances, and why (the planner's
    change price, docs/planner.md "What a change costs"); the whole pool's, the same on each of its systems."""

    summary: str = Field(
        max_length=512, description="One line: the nodes changed and the slices (and GPUs) that saves, or the changes "
                                    "declined because they save less than their price, e.g. `changes 1 node: "
                                    "saves 9 slices; keeps 1 more: changing them would save 2 slices, less than their "
                                    "price`.")
    nodes_changed: int = Field(alias="nodesChanged", ge=0, le=100_000,
                               description="Nodes whose layouts the plan changed (each stops its pods meanwhile).")
    nodes_kept: int = Field(alias="nodesKept", ge=0, le=100_000,
                            description="Nodes carrying instances whose layouts the plan kept.")
    changed_examples: list[NodeName] = Field(
        default_factory=list, alias="nodesChangedExamples", max_length=8,
        description="Up to 8 of the nodes changed (all of them: the pool's stored plan, in its ConfigMap's `plan`).")


class SystemPlanSummary(Spec):
    """The plan in force for a CompoundInferenceSystem, in brief."""

    gpu: str = Field(alias="gpuProduct", max_length=64, description="GPU product of the pool planned on.")
    gpus: int = Field(ge=0, le=100_000, description="GPUs holding at least one of this system's servers now (a Deployment with an available pod); the plan's count is in the Planned condition.")
    slices: int = Field(ge=0, le=700_000, description="Compute slices (sevenths of a GPU) this system's servers use.")
    pool_slices: int | None = Field(
        default=None, alias="poolSlices", ge=0, le=700_000,
        description="Compute slices of the whole GPU pool (7 per GPU): the share's denominator.")
    pool_share_pct: float | None = Field(
        default=None, alias="poolSharePercent", ge=0, le=100,
        description="This system's share of its GPU pool: slices / poolSlices, in percent.")
    predicted_latency_ms: float = Field(
        alias="predictedLatencyMilliseconds", ge=0, le=3_600_000,
        description="Predicted latency of the worst source-to-sink path, in ms, at the SLO's percentile.",
    )
    predicted_accuracy: float = Field(
        alias="predictedAccuracy", ge=0, le=1, description="Predicted accuracy of the worst path, as a fraction of the best.",
    )
    demand_rps: float = Field(alias="demandRequestsPerSecond", ge=0, le=10_000_000, description="The demand planned for.")
    served_rps: float = Field(
        alias="servedRequestsPerSecond", ge=0, le=10_000_000,
        description="Requests/s the plan serves (below the demand when the pool is too small).",
    )
    served_before_quota_rps: float | None = Field(
        default=None, alias="servedBeforeQuotaRequestsPerSecond", ge=0, le=10_000_000,
        description="Requests/s the plan served before a lowered ResourceQuota took served demand away; kept "
                    "while a quota holds the system back, absent otherwise.",
    )
    profile_sources: ProfileSourceCounts = Field(alias="profileSources", description="Where the chosen configurations' profiles come from.")
    tasks: list[TaskPlanSummary] = Field(
        max_length=MAX_TASKS, json_schema_extra=list_map("name"), description="Per task: variant and configurations.",
    )
    changes: PlanChangesSummary | None = Field(
        default=None, description="What the pool's plan changed on nodes that already carried MIG instances, and "
                                  "why; absent for a plan made with no layout in place.")


class ServerSummary(Spec):
    name: str = Field(max_length=63, pattern=DNS_1035_LABEL, description="The server's Deployment name.")
    adapters: int = Field(ge=0, le=2000, description="Adapters assigned to the server.")
    lora_slots: int = Field(alias="loraSlots", ge=1, le=256, description="Adapter slots (vLLM --max-loras, A_max) of the server.")
    max_lora_rank: int = Field(alias="maxLoraRank", ge=1, le=512, description="vLLM --max-lora-rank of the server.")
    node: str = Field(max_length=253, description="The node holding the server's GPU.")
    gpu: int = Field(ge=0, le=1024, description="Index of the server's whole GPU on its node (MIG off).")
    ready: bool = Field(description="The server's Deployment is available with its planned spec.")
    adapters_loaded: int | None = Field(
        default=None, alias="adaptersLoaded", ge=0, le=2000,
        description="Placed adapters its server lists (the least over its pods); absent while no pod answers.")
    adapters_failed: int | None = Field(
        default=None, alias="adaptersFailed", ge=0, le=2000,
        description="Placed adapters that failed to load repeatedly on a pod of it (retried with back-off).")


class RouteException(Spec):
    adapter: Name = Field(description="The adapter.")
    service: str = Field(max_length=63, pattern=DNS_1035_LABEL, description="Its route's Service name.")


class RouteNames(Spec):
    """Where each adapter's route is: `<pool>-<adapter>` but for the exceptions (a name too long or taken, so
    hashed, or kept from before), and the adapters that got no route (both names taken)."""

    pattern: str = Field(
        alias="servicePattern", max_length=80,
        description="The Service name of adapter A's route, `<pool>-{adapter}` with A for {adapter}, in the pool's "
                    "namespace, unless serviceExceptions or unroutedAdapterExamples names A.")
    exceptions: list[RouteException] = Field(
        default_factory=list, alias="serviceExceptions", max_length=32, json_schema_extra=list_map("adapter"),
        description="Up to 32 adapters whose Service has another name (all of them: kubectl get svc -l "
                    "tessera.ai/pool=<pool>,tessera.ai/adapter=<adapter>).")
    exceptions_count: int = Field(default=0, alias="serviceExceptionsCount", ge=0, le=2000,
                                  description="Adapters whose Service has another name than servicePattern's.")
    unrouted: int = Field(default=0, alias="adaptersUnrouted", ge=0, le=2000,
                          description="Adapters with no route: both their names are taken in the namespace.")
    unrouted_examples: list[Name] = Field(
        default_factory=list, alias="unroutedAdapterExamples", max_length=16,
        description="Up to 16 adapters with no route (Degraded RouteNameTaken names them too).")


class ReplacementSummary(Spec):
    """What the last re-placement (a changed spec placed against the servers' recorded adapters) moved."""

    moved: int = Field(alias="adaptersMoved", ge=0, le=2000,
                       description="Adapters now on another server, or on a server restarted with other flags.")
    kept: int = Field(alias="adaptersKept", ge=0, le=2000, description="Adapters that stayed on their server.")
    restarted: int = Field(alias="serversRestarted", ge=0, le=256,
                           description="Servers kept with another --max-loras or --max-lora-rank (vLLM restarts).")
    added: int = Field(alias="adaptersAdded", ge=0, le=2000, description="Adapters placed that no server held before.")
    dropped: int = Field(alias="adaptersDropped", ge=0, le=2000,
                         description="Adapters held before that no server holds now (removed, or now unplaced).")
    afresh: bool = Field(alias="placedAfresh", description=(
        "The fresh placement was applied instead: the re-placement needed more servers than a fresh placement "
        "plus 10% (at least one), or left more adapters unplaced."))
    moved_examples: list[Name] = Field(default_factory=list, alias="movedAdapterExamples", max_length=16,
                                       description="Up to 16 of the adapters moved.")


class AdapterDemandStatus(Spec):
    """The per-adapter rates an AdapterPool with a demandSource is placed for, in brief (counts and totals: the
    rates themselves are in the placement ConfigMap), and the hysteresis windows it keeps."""

    adapters_measured: int = Field(alias="adaptersMeasured", ge=0, le=2000,
                                   description="Adapters whose series the last reading had (a finite number >= 0).")
    adapters_unknown: int = Field(
        alias="adaptersUnknown", ge=0, le=2000,
        description="Adapters the last reading had no number for: each keeps the rate it was placed for (its "
                    "expectedRequestsPerSecond before a first measurement); Unknown is not zero.")
    series_ignored: int = Field(
        default=0, alias="seriesIgnored", ge=0, le=1_000_000,
        description="Series of the last reading naming no adapter of the pool, or NaN, infinite or negative.")
    observed_rps: float | None = Field(
        default=None, alias="observedRequestsPerSecond", ge=0, le=1e10,
        description="Sum of the measured adapters' last readings; absent while the query fails.")
    observed_time: datetime | None = Field(default=None, alias="observedTime", description="When it was measured.")
    placed_rps: float = Field(alias="placedForRequestsPerSecond", ge=0, le=1e10,
                              description="Sum of the rates the placement in force is made for.")
    decision: str | None = Field(default=None, max_length=256, description="The last decision and why, in words.")
    below_since: datetime | None = Field(
        default=None, alias="belowPlanSince",
        description="Since when some adapter read below its placed rate (the pool's one stabilization window).")
    window_peak_ratio: float | None = Field(
        default=None, alias="windowPeakRatio", ge=0, le=1e7,
        description="Highest reading/placed rate of the adapters below their rate since belowPlanSince: no adapter "
                    "is placed lower than this share of its rate at the window's end.")
    last_scale_up_time: datetime | None = Field(default=None, alias="lastScaleUpTime",
                                                description="Last re-placement for a rate that rose.")
    last_scale_down_time: datetime | None = Field(default=None, alias="lastScaleDownTime",
                                                  description="Last re-placement for rates that fell.")


class AdapterPlacementSummary(Spec):
    """The placement in force for an AdapterPool, in brief; per-adapter detail is in the ConfigMap."""

    gpu: str = Field(alias="gpuProduct", max_length=64, description="GPU product of the servers.")
    gpus: int = Field(ge=0, le=256, description="Servers (one GPU each) in use.")
    adapters_placed: int = Field(alias="adaptersPlaced", ge=0, le=2000, description="Adapters assigned to a server.")
    adapters_unplaced: int = Field(
        alias="adaptersUnplaced", ge=0, le=2000, description="Adapters that fit no server within the limits.",
    )
    unplaced_examples: list[Name] = Field(
        default_factory=list, alias="unplacedAdapterExamples", max_length=16,
        description="Up to 16 names of unplaced adapters (all of them are in the ConfigMap).",
    )
    predicted_min_served_fraction: float | None = Field(
        default=None, alias="predictedMinServedFraction", ge=0, le=1,
        description="Served fraction of the least served adapter by the twin check; absent where the placement "
                    "was made by the predictors alone (the operator's, so far).",
    )
    rate_placed_rps: float = Field(
        alias="placedRequestsPerSecond", ge=0, le=1e10,
        description="Expected requests/s of the adapters placed on a server.",
    )
    rate_rps: float = Field(
        alias="requestsPerSecond", ge=0, le=1e10, description="Expected requests/s of all the pool's adapters.",
    )
    servers_ready: int = Field(alias="serversReady", ge=0, le=256, description="Servers available.")
    adapters_failed: int = Field(
        default=0, alias="adaptersFailed", ge=0, le=2000,
        description="Placed adapters failed on a server (Degraded AdapterLoadFailed names them with the error).")
    servers: list[ServerSummary] = Field(
        max_length=256, json_schema_extra=list_map("name"), description="Per server: adapters and slots.",
    )
    routes: RouteNames | None = Field(default=None, description="Each adapter's route: its Service's name.")
    last_replacement: ReplacementSummary | None = Field(
        default=None, alias="lastReplacement",
        description="What the last re-placement moved; absent until a changed spec re-places the servers.")
    config_map: str | None = Field(
        default=None, alias="placementConfigMapName", max_length=253,
        description="ConfigMap holding every adapter's server, in the pool's namespace.",
    )


class DemandStatus(Spec):
    """The demand the operator last read, what it plans for, and the hysteresis windows it keeps.

    The times are the windows' state: they live here so a restarted operator
    resumes a window instead of starting a new one.
    """

    source: Literal["Spec", "Prometheus"] = Field(description="Where the demand planned for comes from.")
    observed_rps: float | None = Field(
        default=None, alias="observedRequestsPerSecond", ge=0, le=10_000_000,
        description="Last measured total requests/s; absent while Unknown (never read as 0).",
    )
    observed_time: datetime | None = Field(default=None, alias="observedTime", description="When it was measured.")
    planned_rps: float | None = Field(
        default=None, alias="plannedRequestsPerSecond", ge=0, le=10_000_000,
        description="The demand the plan in force is made for, in requests/s.",
    )
    recommended_rps: float | None = Field(
        default=None, alias="recommendedRequestsPerSecond", ge=0, le=10_000_000,
        description="What hysteresis would plan for now; with dryRun it is reported and not applied.",
    )
    decision: str | None = Field(
        default=None, max_length=256, description="The last hysteresis decision and why, in words.",
    )
    dry_run: bool = Field(default=False, alias="dryRun", description="Recommendations are reported, not applied.")
    below_since: datetime | None = Field(
        default=None, alias="belowPlanSince",
        description="Since when every reading stayed below the plan (the stabilization window's start).",
    )
    window_peak_rps: float | None = Field(
        default=None, alias="windowPeakRequestsPerSecond", ge=0, le=10_000_000,
        description="Highest reading since belowPlanSince: a scale-down goes no lower.",
    )
    last_scale_up_time: datetime | None = Field(default=None, alias="lastScaleUpTime", description="Last scale-up.")
    last_scale_down_time: datetime | None = Field(
        default=None, alias="lastScaleDownTime", description="Last scale-down; the next waits for the window.",
    )
    last_repartition_time: datetime | None = Field(
        default=None, alias="lastRepartitionTime", description="Last MIG re-partition; at most one per window.",
    )
    violation_pct: float | None = Field(
        default=None, alias="violationPercent", ge=0, le=100,
        description="Share of requests (percent) late, dropped or failed over the last 5 minutes, as the "
                    "system's frontend counted them; only with spec.frontend. Follows the readings once they "
                    "move by a quarter of the target or cross it (LatencySLOMet).",
    )


class _Status(Spec):
    observed_generation: int | None = Field(
        default=None, alias="observedGeneration", ge=0, le=2**53,
        description="metadata.generation the status describes.",
    )
    phase: PhaseName | None = Field(default=None, description="One of " + ", ".join(PHASES) + ".")
    conditions: list[Condition] = Field(
        default_factory=list, max_length=16, json_schema_extra=list_map("type"),
        description="Ready, Planned, Progressing, Degraded and the other condition types, one entry each.",
    )


class FrontendStatus(Spec):
    address: str = Field(max_length=512, description="host:port of the system's frontend Service (in-cluster); "
                                                     "clients POST to /v2/models/<system>/infer there.")


class SystemStatus(_Status):
    """Status of a CompoundInferenceSystem."""

    demand: DemandStatus | None = Field(default=None, description="The demand last read and the re-plan windows.")
    plan: SystemPlanSummary | None = Field(default=None, description="The plan in force (the last good one).")
    frontend: FrontendStatus | None = Field(default=None, description="The system's one endpoint (spec.frontend).")


class AdapterPoolStatus(_Status):
    """Status of an AdapterPool."""

    demand: AdapterDemandStatus | None = Field(
        default=None, description="The measured per-adapter rates (spec.demandSource) the placement is made for.")
    plan: AdapterPlacementSummary | None = Field(default=None, description="The placement in force (the last good one).")
