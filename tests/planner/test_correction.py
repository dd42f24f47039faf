"""The per-variant correction: a variant's own measurements on some MIG profiles correct the estimator on others."""

import numpy as np
import pytest

from tessera.planner.calibration import Dataset, default_layers, fit, reference_models
from tessera.planner.catalog import gpu_product
from tessera.planner.correction import (
    MIN_POINTS, InstanceScaling, MeasuredPoint, calibrate_instance_scaling, correct, host_ms_per_request,
    instance_scaling, shipped_scalings,
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


def variant_of(name: str) -> Variant:
    figures = reference_models()[name]
    return Variant(name=name, accuracy=1.0, memory_gb=1.0, gflops=figures.gflops,
                   params_millions=figures.params_millions, layers=figures.layers)


def test_host_time_per_request_is_what_the_mps_degree_does_not_multiply():
    # 2 ms of launch per batch, 1.5 ms of host work per request, 4 ms of GPU work per request and process
    points = [MeasuredPoint(SegmentType(gpu="A100-80GB", mig_profile="1g.10gb", mps=k), b, 2.0 + 1.5 * b + 4.0 * k * b)
              for k in (1, 2, 3) for b in (4, 16, 64)]
    assert host_ms_per_request(points) == pytest.approx(1.5)
    assert host_ms_per_request([p for p in points if p.batch == 4]) == 0.0  # one batch: no slope
    assert host_ms_per_request([p for p in points if p.segment.mps < 3]) == 0.0  # two degrees: no intercept


def test_bert_spends_host_time_per_request_and_the_cnns_do_not(measurements):
    rows = read_parvagpu_dir(measurements)
    host = {name: host_ms_per_request(points_on([r for r in rows if r.variant == name], "1g.10gb", "3g.40gb"))
            for name in ("bert", "vgg16", "resnet50", "inceptionv3")}
    assert 2.0 < host["bert"] < 3.0
    assert all(host[name] < 0.05 for name in ("vgg16", "resnet50", "inceptionv3"))


@pytest.fixture(scope="module")
def held_out_errors(measurements):
    """bench/variant_correction.py's protocol: per model, 2g/4g/7g predicted from its own 1g/3g rows
    with every calibration done on the other models; latency error per predicted row."""
    rows = read_parvagpu_dir(measurements)
    models = reference_models()
    data = Dataset.from_rows(rows, models)
    layers = default_layers(models)
    start = fit(data, layers).vector()
    errors: dict[tuple[str, str], list[float]] = {}
    for name in sorted(models):
        others = data.subset(data.variant != name)
        scaling = calibrate_instance_scaling(others, A100, fit(others, layers, start))
        own = [r for r in rows if r.variant == name]
        corrected = correct(variant_of(name), A100, points_on(own, "1g.10gb", "3g.40gb"), scaling)
        for r in own:
            if r.segment.mig_profile in ("2g.20gb", "4g.40gb", "7g.80gb"):
                error = abs(corrected.latency_ms(r.segment.mig_profile, r.segment.mps, r.batch) / r.latency_ms - 1)
                errors.setdefault((name, r.segment.mig_profile), []).append(error)
    return errors


def test_held_out_every_model_and_every_predicted_profile_within_5_percent(held_out_errors):
    by_model: dict[str, list[float]] = {}
    by_profile: dict[str, list[float]] = {}
    for (name, profile), values in held_out_errors.items():
        by_model.setdefault(name, []).extend(values)
        by_profile.setdefault(profile, []).extend(values)
    medians = {key: float(np.median(values)) for key, values in {**by_model, **by_profile}.items()}
    assert len(by_model) == 11 and set(by_profile) == {"2g.20gb", "4g.40gb", "7g.80gb"}
    assert {key: m for key, m in medians.items() if m > 0.05} == {}
    assert float(np.median([e for values in by_model.values() for e in values])) <= 0.04

