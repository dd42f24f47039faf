"""The store's estimates, made in one vectorised call per variant, are the per-point estimator's, value for value."""

from pathlib import Path

import pytest

import tessera.planner.profile_sources as profile_sources
from tessera.planner.catalog import GpuProduct, gpu_product
from tessera.planner.correction import MIN_POINTS, MeasuredPoint, correct
from tessera.planner.estimator import Coefficients, calibrated, estimate, instance_peak_tflops, latency_ms
from tessera.planner.measured import MeasuredRow, add_rows, load_parvagpu_dir, read_parvagpu_dir
from tessera.planner.model import Slo, SystemSpec, Task, Variant
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType, measured_spread
from tessera.planner.spec_file import load_systems

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
RESNET50 = Variant(name="resnet50", accuracy=0.97, memory_gb=4.8, gflops=8.18, params_millions=25.557, layers=54)


def per_point_profiles(variant: Variant, product: GpuProduct, degrees: range, batches: tuple[int, ...],
                       measured: ProfileStore | None,
                       coefficients: Coefficients) -> list[tuple[SegmentType, int, Profile]]:
    """The estimates as the store made them before: one estimator call and one copy for the spread per point."""
    rows = [(segment, batch, profile) for segment, batch, profile in
            (measured.for_variant(variant.name) if measured else ())
            if segment.gpu == product.name and profile.source is ProfileSource.MEASURED]
    points = [MeasuredPoint(segment, batch, profile.latency_ms) for segment, batch, profile in rows]
    if len(points) >= MIN_POINTS:
        corrected = correct(variant, product, points)

        def one(mig, mps, batch):
            return corrected.estimate(mig.name, mps, batch).model_copy(update={"spread": 1.0})
    else:
        spread = measured_spread(profile for _, _, profile in rows)

        def one(mig, mps, batch):
            return estimate(variant, product, mig, mps, batch, coefficients).model_copy(update={"spread": spread})
    return [(SegmentType(gpu=product.name, mig_profile=mig.name, mps=mps), batch, one(mig, mps, batch))
            for mig in product.profiles for mps in degrees if mps * variant.memory_gb <= mig.memory_gb
            for batch in batches]


def values(store: ProfileStore) -> list:
    return [(key, p.latency_ms, p.throughput_rps, p.spread, p.source, p.p50_ms) for key, p in store.items()]


def assert_same_as_per_point(monkeypatch, systems, gpu, measured=None):
    vectorised = build_profile_store(systems, gpu, measured)
    with monkeypatch.context() as patched:
        patched.setattr(profile_sources, "estimated_profiles", per_point_profiles)
        per_point = build_profile_store(systems, gpu, measured)
    assert any(p.source is ProfileSource.ESTIMATED for _, p in vectorised.items())
    assert values(vectorised) == values(per_point)


def system(*variants: Variant, name="shop") -> SystemSpec:
    return SystemSpec(name=name, tasks=[Task(name="classify", variants=list(variants))],
                      slo=Slo(latency_ms=250), demand_rps=10)


@pytest.mark.parametrize("gpu", ["A100-80GB", "H100-80GB"])
def test_the_examples_stores_equal_the_per_point_estimates(monkeypatch, gpu):
    assert_same_as_per_point(monkeypatch, [s for path in EXAMPLES for s in load_systems(path)], gpu)


def test_examples_with_measured_variants_equal_the_per_point_corrected_estimates(monkeypatch, measurements):
    systems = [s for path in EXAMPLES for s in load_systems(path)]
    measured = load_parvagpu_dir(measurements)
    corrected = {v.name for s in systems for t in s.tasks for v in t.variants} & {
        name for (name, _, _), _ in measured.items()}
    assert corrected, "no example variant is among the measured ones: the corrected path would go unchecked"
    assert_same_as_per_point(monkeypatch, systems, "A100-80GB", measured)


def test_a_variant_measured_on_some_segments_gets_the_per_point_corrected_estimates(monkeypatch, measurements):
    rows = [r for r in read_parvagpu_dir(measurements) if r.variant == "resnet50"
            and r.segment.mig_profile in ("1g.10gb", "3g.40gb")]
    assert_same_as_per_point(monkeypatch, [system(RESNET50)], "A100-80GB", add_rows(ProfileStore(), rows))


def test_a_variant_with_a_measured_spread_gets_it_on_every_estimate_as_per_point(monkeypatch):
    rows = [MeasuredRow("resnet50", SegmentType(gpu="A100-80GB", mig_profile="1g.10gb"), batch,
                        latency_ms=1.15 * (5 + batch), throughput_rps=1000 * batch / (5 + batch), p50_ms=5 + batch)
            for batch in (1, 2)]  # what the profiler Job records: both percentiles, too few for the correction
    measured = add_rows(ProfileStore(), rows)
    assert_same_as_per_point(monkeypatch, [system(RESNET50)], "A100-80GB", measured)


def test_a_variant_shared_by_many_systems_is_estimated_once(monkeypatch):
    calls = []

    def counted(variant, *args):
        calls.append(variant.name)
        return profile_sources_estimated_profiles(variant, *args)

    profile_sources_estimated_profiles = profile_sources.estimated_profiles
    monkeypatch.setattr(profile_sources, "estimated_profiles", counted)
    store = build_profile_store([system(RESNET50, name=f"shop-{i}") for i in range(3)], "A100-80GB")
    assert calls == ["resnet50"]
    assert values(store) == values(build_profile_store([system(RESNET50)], "A100-80GB"))


def test_a_variant_redefined_by_a_later_system_is_estimated_again_and_the_last_definition_wins():
    larger = RESNET50.model_copy(update={"gflops": 2 * RESNET50.gflops})
    redefined = build_profile_store([system(RESNET50, name="a"), system(larger, name="b")], "A100-80GB")
    assert values(redefined) == values(build_profile_store([system(larger)], "A100-80GB"))
    back = build_profile_store([system(RESNET50, name="a"), system(larger, name="b"), system(RESNET50, name="c")],
                              "A100-80GB")
    assert values(back) == values(build_profile_store([system(RESNET50)], "A100-80GB"))


@pytest.mark.parametrize("gpu", ["A100-80GB", "H100-80GB"])
def test_each_estimate_is_the_formula_on_its_own_figures(gpu):
    """Against a mix-up of the arrays (a batch read as an MPS degree, one segment's share for another's): the
    formula evaluated on plain numbers, point by point, agrees to 1e-12 (numpy's scalar power may differ from
    its array power in the last bit)."""
    product = gpu_product(gpu)
    coefficients = calibrated()
    variants = {v.name: v for path in EXAMPLES for s in load_systems(path) for t in s.tasks for v in t.variants}
    for variant in variants.values():
        for mig in product.profiles:
            for mps in (1, 3):
                for batch in (1, 8, 32):
                    formula = float(latency_ms(coefficients.vector(), variant.gflops, variant.params_millions,
                                               variant.layers, batch, mps, instance_peak_tflops(product, mig),
                                               product.bandwidth_share(mig)))
                    profile = estimate(variant, product, mig, mps, batch)
                    assert profile.latency_ms == pytest.approx(formula, rel=1e-12), (variant.name, mig.name, mps)
                    assert profile.throughput_rps == pytest.approx(mps * batch * 1000 / formula, rel=1e-12)
