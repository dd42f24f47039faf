"""Assemble the profile store a plan needs, from every source.

For every variant of every task of every system: the built-in estimate on
every MIG profile of the GPU, every MPS degree the GPU allows and every
batch, where the segment's memory holds the processes
(`mps x variant.memory_gb <= mig.memory_gb`); the profiles given in the
system's spec (source GIVEN); and measured ones (source MEASURED) on this GPU
for the same batches and MPS degrees. A variant measured on this GPU (at
least `correction.MIN_POINTS` points) gets its estimates from the estimator
corrected by those measurements (planner/correction.py), still ESTIMATED but
already a p99 (the measurements it is fitted to are); one with fewer
measurements that recorded a median has its estimates scaled to a p99 by
their median p99/p50 (`Profile.spread`), the others by the planner's
`latency_spread` (ParvaGPU also measured 5 processes and
batches up to 256: those rows stay out unless `batches` asks for them). Where
several sources cover one (variant, segment type, batch), the store keeps the
most trusted: measured, then given, then estimated.
"""

from __future__ import annotations

from typing import Callable, Iterable

from tessera.planner.candidates import mps_degrees
from tessera.planner.catalog import GpuProduct, MigProfile, gpu_product
from tessera.planner.correction import MIN_POINTS, MeasuredPoint, correct
from tessera.planner.estimator import Coefficients, calibrated, estimates
from tessera.planner.input_files import InputError, quote
from tessera.planner.model import SystemSpec, Variant
from tessera.planner.profiles import (DEFAULT_BATCHES, Profile, ProfileSource, ProfileStore, SegmentType,
                                      measured_spread)


def build_profile_store(systems: list[SystemSpec], gpu: str, measured: ProfileStore | None = None,
                        batches: Iterable[int] = DEFAULT_BATCHES,
                        coefficients: Coefficients | None = None, max_mps: int | None = None) -> ProfileStore:
    """Profiles of every variant of `systems` on `gpu`, the most trusted source per key.

    Raises InputError naming system, task and variant when a variant has
    neither the figures the estimator needs (gflops, params_millions) nor any
    given or measured profile on this GPU.
    """
    product = gpu_product(gpu)
    batches = tuple(batches)
    degrees = mps_degrees(product, max_mps)
    coefficients = coefficients or calibrated()
    store = ProfileStore()
    estimated: dict[str, Variant] = {}  # variant name -> the definition whose estimates the store holds last
    for system in systems:
        given = [p for p in system.profiles if p.gpu == product.name]
        for task in system.tasks:
            for variant in task.variants:
                has_given = any(p.task == task.name and p.variant == variant.name for p in given)
                measured_here = [
                    (segment, batch, profile)
                    for segment, batch, profile in (measured.for_variant(variant.name) if measured else ())
                    if segment.gpu == product.name and segment.mps in degrees and batch in batches
                ]
                can_estimate = variant.gflops is not None and variant.params_millions is not None
                if not (can_estimate or has_given or measured_here):
                    raise InputError(
                        f"system {quote(system.name)}, task {quote(task.name)}, variant {quote(variant.name)}: "
                        f"no profiles on "
                        f"{product.name} and no figures to estimate them; give the variant gflops and "
                        f"params_millions, or profiles for it in the spec, or measure it", system=system.name)
                # systems share variants (copies of one example, a model in many systems); estimating the
                # definition the store holds last again would change nothing: each key still holds that estimate
                # or a more trusted profile, and an add keeps both
                if can_estimate and estimated.get(variant.name) != variant:
                    for segment, batch, profile in estimated_profiles(variant, product, degrees, batches, measured,
                                                                      coefficients):
                        store.add(variant.name, segment, batch, profile)
                    estimated[variant.name] = variant
                for segment, batch, profile in measured_here:
                    store.add(variant.name, segment, batch, profile)
        for point in given:
            if point.mig_profile not in {p.name for p in product.profiles}:
                raise InputError(f"system {quote(system.name)}, profiles: given profile of task "
                                 f"{quote(point.task)}, variant {quote(point.variant)}: {product.name} has no "
                                 f"MIG profile {quote(point.mig_profile)}", system=system.name)
            store.add(point.variant, SegmentType(gpu=point.gpu, mig_profile=point.mig_profile, mps=point.mps),
                      point.batch, Profile(latency_ms=point.latency_ms, throughput_rps=point.throughput_rps,
                                           source=ProfileSource.GIVEN))
    return store


def estimated_profiles(variant: Variant, product: GpuProduct, degrees: range, batches: tuple[int, ...],
                       measured: ProfileStore | None,
                       coefficients: Coefficients) -> list[tuple[SegmentType, int, Profile]]:
    """The variant's estimates on every MIG profile, MPS degree and batch where the segment's memory holds the
    processes, in one vectorised call of the estimator."""
    segments = [(mig, SegmentType(gpu=product.name, mig_profile=mig.name, mps=mps))
                for mig in product.profiles for mps in degrees if mps * variant.memory_gb <= mig.memory_gb]
    grid = [(mig, segment, batch) for mig, segment in segments for batch in batches]
    profiles = estimator_for(variant, product, measured, coefficients)([(mig, s.mps, b) for mig, s, b in grid])
    return [(segment, batch, profile) for (_, segment, batch), profile in zip(grid, profiles)]


def estimator_for(variant: Variant, product: GpuProduct, measured: ProfileStore | None,
                  coefficients: Coefficients) -> Callable[[list[tuple[MigProfile, int, int]]], list[Profile]]:
    """[(MIG profile, MPS, batch)] -> estimated profiles: corrected by the variant's measurements where it has them.

    The spread that makes an estimate a p99 (latency.batch_spread): 1 for a
    corrected estimate, which is fitted to measured p99s; else the median
    p99/p50 of the variant's measurements on this GPU where they recorded
    both; else none (the planner's default)."""
    profiles = [(segment, batch, profile)
                for segment, batch, profile in (measured.for_variant(variant.name) if measured else ())
                if segment.gpu == product.name and profile.source is ProfileSource.MEASURED]
    points = [MeasuredPoint(segment, batch, profile.latency_ms) for segment, batch, profile in profiles]
    if len(points) >= MIN_POINTS:
        corrected = correct(variant, product, points)
        return lambda grid: corrected.estimates([(mig.name, mps, batch) for mig, mps, batch in grid], spread=1.0)
    spread = measured_spread(profile for _, _, profile in profiles)
    return lambda grid: estimates(variant, product, grid, coefficients, spread)
