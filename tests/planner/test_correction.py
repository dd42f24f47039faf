"""The per-variant correction: a variant's own measurements on some MIG profiles correct the estimator on others."""

import numpy as np
import pytest

from tessera.planner.calibration import reference_models
from tessera.planner.catalog import gpu_product
from tessera.planner.correction import (
    MIN_POINTS, InstanceScaling, MeasuredPoint, correct, instance_scaling, shipped_scalings,
)
from tessera.planner.estimator import calibrated, estimate
from tessera.planner.measured import read_parvagpu_dir
from tessera.planner.model import Variant
from tessera.planner.profiles import ProfileSource, SegmentType

A100 = gpu_product("A100-80GB")
FIGURES = reference_models()["vgg16"]
VGG16 = Variant(name="vgg16", accuracy=1.0, memory_gb=1.0, gflops=FIGURES.gflops,
                params_millions=FIGURES.params_millions, layers=FIGURES.layers)


@pytest.fixture(scope="module")
def vgg16_rows(measurements):
    return [r for r in read_parvagpu_dir(measurements) if r.variant == "vgg16"]


def points_on(rows, *profiles):
    return [MeasuredPoint(r.segment, r.batch, r.latency_ms) for r in rows if r.segment.mig_profile in profiles]


def median_error(estimator, rows, *profiles) -> float:
    return float(np.median([abs(estimator.latency_ms(r.segment.mig_profile, r.segment.mps, r.batch) / r.latency_ms - 1)
                            for r in rows if r.segment.mig_profile in profiles]))


def test_measurements_on_1g_and_3g_bring_2g_4g_and_7g_within_5_percent(vgg16_rows):
    corrected = correct(VGG16, A100, points_on(vgg16_rows, "1g.10gb", "3g.40gb"))
    assert median_error(corrected, vgg16_rows, "2g.20gb", "4g.40gb", "7g.80gb") <= 0.05


def test_the_correction_is_closer_than_the_estimator_on_unmeasured_profiles(vgg16_rows):
    corrected = correct(VGG16, A100, points_on(vgg16_rows, "1g.10gb", "3g.40gb"))
    plain = InstanceScaling.nominal(A100)
    errors_plain = [abs(estimate(VGG16, A100, A100.profile(r.segment.mig_profile), r.segment.mps, r.batch,
                                 plain.coefficients).latency_ms / r.latency_ms - 1)
                    for r in vgg16_rows if r.segment.mig_profile in ("2g.20gb", "4g.40gb", "7g.80gb")]
    assert median_error(corrected, vgg16_rows, "2g.20gb", "4g.40gb", "7g.80gb") < float(np.median(errors_plain))


def test_corrected_profiles_are_still_estimates_with_consistent_throughput(vgg16_rows):
    corrected = correct(VGG16, A100, points_on(vgg16_rows, "1g.10gb"))
    profile = corrected.estimate("7g.80gb", 2, 8)
    assert profile.source is ProfileSource.ESTIMATED
    assert profile.throughput_rps == pytest.approx(2 * 8 * 1000 / profile.latency_ms)


def test_too_few_points_or_missing_figures_are_refused_with_the_variant_named(vgg16_rows):
    with pytest.raises(ValueError, match=f"'vgg16': 2 measured points .* at least {MIN_POINTS}"):
        correct(VGG16, A100, points_on(vgg16_rows, "1g.10gb")[:2])
    with pytest.raises(ValueError, match="'bare': the correction needs gflops"):
        correct(Variant(name="bare", accuracy=1, memory_gb=1), A100, points_on(vgg16_rows, "1g.10gb"))


def test_points_measured_on_another_gpu_do_not_count(vgg16_rows):
    elsewhere = [MeasuredPoint(SegmentType(gpu="H100-80GB", mig_profile=p.segment.mig_profile, mps=p.segment.mps),
                               p.batch, p.latency_ms) for p in points_on(vgg16_rows, "1g.10gb")]
    with pytest.raises(ValueError, match="0 measured points on A100-80GB"):
        correct(VGG16, A100, elsewhere)


def test_a_gpu_without_calibration_data_scales_instances_by_their_nominal_shares():
    h200 = gpu_product("H200-141GB")
    scaling = instance_scaling(h200)
    assert scaling.compute_multipliers == {} and scaling.coefficients == calibrated()
    assert "A100-80GB" in shipped_scalings()
