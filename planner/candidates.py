"""Candidate configurations (variant, segment type, batch) per task, pruned.

A candidate is one way to run a task: a variant on a segment type with a
batch size, with its profile. Pruning here is exact: a candidate is dropped
only when another one of the same task, variant and MIG profile (so the same
resources and accuracy) is at least as good in every constraint of the MILP:
no slower batch, no lower throughput, and batches that fill no slower.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.planner.catalog import GpuProduct
from tessera.planner.features import Features
from tessera.planner.latency import batch_spread, fits_budget, min_segment_load_rps, p99_batch_latency_ms
from tessera.planner.model import SystemSpec, Task
from tessera.planner.profiles import DEFAULT_BATCHES, Profile, ProfileSource, ProfileStore, SegmentType


@dataclass(frozen=True)
class Candidate:
    system: str
    task: str
    variant: str
    segment: SegmentType
    batch: int
    latency_ms: float
    throughput_rps: float
    source: ProfileSource
    compute_slices: int
    latency_spread: float = 1.0  # the p99/p50 its profile's batch latency was scaled by (latency.batch_spread)

    @property
    def fill_demand(self) -> float:
        """Requests that must arrive per segment before every process has a full batch."""
        return self.segment.mps * (self.batch - 1)

    def dominates(self, other: "Candidate") -> bool:
        return (
            self.latency_ms <= other.latency_ms
            and self.throughput_rps >= other.throughput_rps
            and self.fill_demand <= other.fill_demand
        )

    def usable_at(self, budget_ms: float, most_load_rps: float) -> bool:
        """Whether some load up to `most_load_rps` per segment fills its batches within the budget."""
        if not fits_budget(self.latency_ms, budget_ms):
            return False
        needed = min_segment_load_rps(self.latency_ms, self.batch, self.segment.mps, budget_ms)
        return needed <= most_load_rps


def mps_degrees(gpu: GpuProduct, max_mps: int | None = None) -> range:
    """Processes sharing one MIG instance: 1 to `max_mps` (the product's largest by default)."""
    return range(1, (max_mps or max(gpu.mps_degrees)) + 1)


def segment_types(gpu: GpuProduct, features: Features, max_mps: int | None = None) -> list[SegmentType]:
    if not features.spatial_partitioning:
        return [SegmentType(gpu=gpu.name, mig_profile=gpu.whole_gpu_profile.name, mps=1)]
    return [
        SegmentType(gpu=gpu.name, mig_profile=profile.name, mps=mps)
        for profile in gpu.profiles
        for mps in mps_degrees(gpu, max_mps)
    ]


def allowed_variants(task: Task, features: Features) -> list[str]:
    if features.accuracy_scaling:
        return [v.name for v in task.variants]
    return [v.name for v in task.variants if v.accuracy == task.best_accuracy]


def enumerate_candidates(
    system: SystemSpec,
    gpu: GpuProduct,
    store: ProfileStore,
    features: Features,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    max_mps: int | None = None,
    max_batch: int | None = None,
    latency_spread: float = 1.0,
) -> list[Candidate]:
    """Every profiled (variant, segment, batch) of the system's tasks whose processes fit in memory.

    `max_mps` bounds the processes per instance (each still bounded by
    memory), `max_batch` the batch a variant's server accepts, `latency_spread`
    the p99/p50 of an estimated batch latency whose variant's measurements do not set one (latency.py).
    """
    candidates = []
    batches = tuple(b for b in batches if max_batch is None or b <= max_batch)
    for task in system.tasks:
        for variant_name in allowed_variants(task, features):
            variant = task.variant(variant_name)
            for segment in segment_types(gpu, features, max_mps):
                mig = gpu.profile(segment.mig_profile)
                if segment.mps * variant.memory_gb > mig.memory_gb:
                    continue
                for batch in batches:
                    if variant.max_batch is not None and batch > variant.max_batch:
                        continue
                    profile: Profile | None = store.get(variant_name, segment, batch)
                    if profile is None:
                        continue
                    candidates.append(Candidate(
                        system=system.name, task=task.name, variant=variant_name, segment=segment,
                        batch=batch, throughput_rps=profile.throughput_rps,
                        latency_ms=p99_batch_latency_ms(profile, latency_spread),
                        source=profile.source, compute_slices=mig.compute_slices,
                        latency_spread=batch_spread(profile, latency_spread),
                    ))
    return prune_dominated(candidates)


def prune_dominated(candidates: list[Candidate]) -> list[Candidate]:
    groups: dict[tuple[str, str, str, str], list[Candidate]] = {}
    for candidate in candidates:
        key = (candidate.system, candidate.task, candidate.variant, candidate.segment.mig_profile)
        groups.setdefault(key, []).append(candidate)
    kept = []
    for group in groups.values():
        # Sorting puts a candidate after every candidate that could dominate it
        # strictly, so ties keep the first (smallest MPS degree and batch).
        group.sort(key=lambda c: (c.latency_ms, -c.throughput_rps, c.fill_demand, c.segment.mps, c.batch))
        survivors: list[Candidate] = []
        for candidate in group:
            if not any(s.dominates(candidate) for s in survivors):
                survivors.append(candidate)
        kept += survivors
    return kept


def budget_levels(system: SystemSpec, features: Features, levels: int) -> list[float]:
    """Latency budgets a task may get: a grid of the SLO, or the equal split without T."""
    slo = system.slo.latency_ms
    if not features.task_budgeting:
        return [slo / system.longest_path_tasks]
    return [slo * i / levels for i in range(1, levels + 1)]
