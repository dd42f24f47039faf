"""Assemble the profile store a plan needs, from every source.

For every variant of every task of every system: the built-in estimate on
every MIG profile of the GPU, every MPS degree the GPU allows and every
batch, where the segment's memory holds the processes
(`mps x variant.memory_gb <= mig.memory_gb`); the profiles given in the
system's spec (source GIVEN); and measured ones (source MEASURED) on this GPU
for the same batches and MPS degrees. A variant measured on this GPU (at
least `correction.MIN_POINTS` points) gets its estimates from the estimator
corrected by those measurements (planner/correction.py), still ESTIMATED (ParvaGPU also measured 5 processes and
batches up to 256: those rows stay out unless `batches` asks for them). Where
several sources cover one (variant, segment type, batch), the store keeps the
most trusted: measured, then given, then estimated.
"""

from __future__ import annotations

from typing import Callable, Iterable

from tessera.planner.catalog import GpuProduct, gpu_product
from tessera.planner.correction import MIN_POINTS, MeasuredPoint, correct
from tessera.planner.estimator import Coefficients, calibrated, estimate
from tessera.planner.model import SystemSpec, Variant
from tessera.planner.profiles import DEFAULT_BATCHES, Profile, ProfileSource, ProfileStore, SegmentType


def build_profile_store(systems: list[SystemSpec], gpu: str, measured: ProfileStore | None = None,
                        batches: Iterable[int] = DEFAULT_BATCHES,
                        coefficients: Coefficients | None = None) -> ProfileStore:
    """Profiles of every variant of `systems` on `gpu`, the most trusted source per key.

    Raises ValueError naming system, task and variant when a variant has
    neither the figures the estimator needs (gflops, params_millions) nor any
    given or measured profile on this GPU.
    """
    product = gpu_product(gpu)
    batches = tuple(batches)
    coefficients = coefficients or calibrated()
    store = ProfileStore()
    for system in systems:
        given = [p for p in system.profiles if p.gpu == product.name]
        for task in system.tasks:
            for variant in task.variants:
                has_given = any(p.task == task.name and p.variant == variant.name for p in given)
                measured_here = [
                    (segment, batch, profile)
                    for segment, batch, profile in (measured.for_variant(variant.name) if measured else ())
                    if segment.gpu == product.name and segment.mps in product.mps_degrees and batch in batches
                ]
                can_estimate = variant.gflops is not None and variant.params_millions is not None
                if not (can_estimate or has_given or measured_here):
                    raise ValueError(
                        f"system {system.name!r}, task {task.name!r}, variant {variant.name!r}: no profiles on "
                        f"{product.name} and no figures to estimate them; give the variant gflops and "
                        f"params_millions, or profiles for it in the spec, or measure it"
                    )
                if can_estimate:
                    estimator = estimator_for(variant, product, measured, coefficients)
                    for mig in product.profiles:
                        for mps in product.mps_degrees:
                            if mps * variant.memory_gb > mig.memory_gb:
                                continue
                            segment = SegmentType(gpu=product.name, mig_profile=mig.name, mps=mps)
                            for batch in batches:
                                store.add(variant.name, segment, batch, estimator(mig.name, mps, batch))
                for segment, batch, profile in measured_here:
                    store.add(variant.name, segment, batch, profile)
        for point in given:
            if point.mig_profile not in {p.name for p in product.profiles}:
                raise ValueError(f"system {system.name!r}, given profile of task {point.task!r}, variant "
                                 f"{point.variant!r}: {product.name} has no MIG profile {point.mig_profile!r}")
            store.add(point.variant, SegmentType(gpu=point.gpu, mig_profile=point.mig_profile, mps=point.mps),
                      point.batch, Profile(latency_ms=point.latency_ms, throughput_rps=point.throughput_rps,
                                           source=ProfileSource.GIVEN))
    return store


def estimator_for(variant: Variant, product: GpuProduct, measured: ProfileStore | None,
                  coefficients: Coefficients) -> Callable[[str, int, int], Profile]:
    """(MIG profile, MPS, batch) -> estimated profile: corrected by the variant's measurements where it has them."""
    points = [MeasuredPoint(segment, batch, profile.latency_ms)
              for segment, batch, profile in (measured.for_variant(variant.name) if measured else ())
              if segment.gpu == product.name and profile.source is ProfileSource.MEASURED]
    if len(points) >= MIN_POINTS:
        return correct(variant, product, points).estimate
    return lambda mig, mps, batch: estimate(variant, product, product.profile(mig), mps, batch, coefficients)
