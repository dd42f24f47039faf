import pytest

from tessera.planner.catalog import gpu_product
from tessera.planner.measured import MeasuredRow, add_rows, load_parvagpu_dir, read_parvagpu_dir
from tessera.planner.model import Pool, ProfilePoint, Slo, SystemSpec, Task, Variant
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.profiles import DEFAULT_BATCHES, ProfileSource, ProfileStore, SegmentType
from tessera.planner.solve import PlannerOptions, plan


def system(*variants: Variant, profiles=(), name="shop") -> SystemSpec:
    return SystemSpec(name=name, tasks=[Task(name="classify", variants=list(variants))],
                      slo=Slo(latency_ms=250), demand_rps=10, profiles=list(profiles))


RESNET50 = Variant(name="resnet50", accuracy=0.97, memory_gb=4.8, gflops=8.18, params_millions=25.557, layers=54)


def test_every_mig_profile_mps_degree_and_batch_that_fits_is_estimated():
    store = build_profile_store([system(RESNET50)], "A100-80GB")
    gpu = gpu_product("A100-80GB")
    for mig in gpu.profiles:
        for mps in gpu.mps_degrees:
            fits = mps * RESNET50.memory_gb <= mig.memory_gb
            for batch in DEFAULT_BATCHES:
                profile = store.get("resnet50", SegmentType(gpu="A100-80GB", mig_profile=mig.name, mps=mps), batch)
                assert (profile is not None) == fits, (mig.name, mps, batch)
                assert profile is None or profile.source is ProfileSource.ESTIMATED


def test_measured_profile_wins_over_the_estimate(measurements):
    store = build_profile_store([system(RESNET50)], "A100-80GB", measured=load_parvagpu_dir(measurements))
    profile = store.get("resnet50", SegmentType(gpu="A100-80GB", mig_profile="7g.80gb", mps=2), 8)
    assert profile.source is ProfileSource.MEASURED
    assert profile.throughput_rps == pytest.approx(2 * 1155.0, rel=1e-3)


def test_measured_profiles_of_another_gpu_are_not_used(measurements):
    store = build_profile_store([system(RESNET50)], "H100-80GB", measured=load_parvagpu_dir(measurements))
    assert all(p.source is ProfileSource.ESTIMATED for _, _, p in store.for_variant("resnet50"))


def test_given_profile_wins_over_the_estimate():
    point = ProfilePoint(task="classify", variant="resnet50", gpu="A100-80GB", mig_profile="3g.40gb", mps=1,
                         batch=4, latency_ms=7.0, throughput_rps=570.0)
    store = build_profile_store([system(RESNET50, profiles=[point])], "A100-80GB")
    profile = store.get("resnet50", SegmentType(gpu="A100-80GB", mig_profile="3g.40gb"), 4)
    assert profile.source is ProfileSource.GIVEN and profile.latency_ms == 7.0


def test_a_variant_with_no_figures_and_no_profiles_raises_naming_system_task_and_variant():
    bare = Variant(name="mystery-net", accuracy=1.0, memory_gb=2.0)
    with pytest.raises(ValueError, match=r"system 'shop', task 'classify', variant 'mystery-net'"):
        build_profile_store([system(RESNET50, bare)], "A100-80GB")


def test_a_variant_with_no_figures_is_served_by_its_given_profiles():
    bare = Variant(name="mystery-net", accuracy=1.0, memory_gb=2.0)
    point = ProfilePoint(task="classify", variant="mystery-net", gpu="A100-80GB", mig_profile="1g.10gb",
                         batch=1, latency_ms=5.0, throughput_rps=200.0)
    store = build_profile_store([system(bare, profiles=[point])], "A100-80GB")
    assert [(s.mig_profile, b) for s, b, _ in store.for_variant("mystery-net")] == [("1g.10gb", 1)]


def test_a_variant_with_no_figures_is_served_by_measured_profiles(measurements):
    bare = Variant(name="vgg16", accuracy=1.0, memory_gb=2.0)
    store = build_profile_store([system(bare)], "A100-80GB", measured=load_parvagpu_dir(measurements))
    assert len(list(store.for_variant("vgg16"))) > 100


def test_a_given_profile_on_an_unknown_mig_profile_is_named():
    point = ProfilePoint(task="classify", variant="resnet50", gpu="A100-80GB", mig_profile="5g.50gb",
                         batch=1, latency_ms=5.0, throughput_rps=200.0)
    with pytest.raises(ValueError, match=r"system 'shop'.*'resnet50'.*5g.50gb"):
        build_profile_store([system(RESNET50, profiles=[point])], "A100-80GB")


def test_measured_rows_outside_the_batches_and_mps_degrees_stay_out(measurements):
    measured = load_parvagpu_dir(measurements)
    store = build_profile_store([system(RESNET50)], "A100-80GB", measured=measured)
    keys = {(s.mps, b) for s, b, _ in store.for_variant("resnet50")}
    assert max(b for _, b in keys) == max(DEFAULT_BATCHES) and max(m for m, _ in keys) == 4
    wider = build_profile_store([system(RESNET50)], "A100-80GB", measured=measured, batches=(1, 64))
    profile = wider.get("resnet50", SegmentType(gpu="A100-80GB", mig_profile="7g.80gb"), 64)
    assert profile.source is ProfileSource.MEASURED


def test_a_measured_variant_gets_corrected_estimates_on_the_segments_it_was_not_measured_on(measurements):
    rows = [r for r in read_parvagpu_dir(measurements) if r.variant == "resnet50"]
    measured_1g_3g = add_rows(ProfileStore(), [r for r in rows if r.segment.mig_profile in ("1g.10gb", "3g.40gb")])
    corrected = build_profile_store([system(RESNET50)], "A100-80GB", measured=measured_1g_3g)
    plain = build_profile_store([system(RESNET50)], "A100-80GB")
    held_out = [r for r in rows if r.segment.mig_profile == "7g.80gb" and r.batch in DEFAULT_BATCHES
                and r.segment.mps in (1, 2, 3, 4)]

    def median_error(store) -> float:
        errors = sorted(abs(store.get("resnet50", r.segment, r.batch).latency_ms / r.latency_ms - 1) for r in held_out)
        return errors[len(errors) // 2]

    profile = corrected.get("resnet50", held_out[0].segment, held_out[0].batch)
    assert profile.source is ProfileSource.ESTIMATED  # closer, still an estimate
    assert median_error(corrected) < 0.75 * median_error(plain)


def profiler_rows(p99_over_p50: float, mig_profiles=("1g.10gb",)) -> list[MeasuredRow]:
    """What the profiler Job records of resnet50: both percentiles of each batch."""
    return [MeasuredRow("resnet50", SegmentType(gpu="A100-80GB", mig_profile=mig, mps=1), batch,
                        latency_ms=p99_over_p50 * (5 + batch), throughput_rps=1000 * batch / (5 + batch),
                        p50_ms=5 + batch) for mig in mig_profiles for batch in (1, 2)]


def test_estimates_of_a_variant_take_the_p99_over_p50_its_measurements_recorded():
    store = build_profile_store([system(RESNET50)], "A100-80GB", measured=add_rows(ProfileStore(), profiler_rows(1.15)))
    estimate = store.get("resnet50", SegmentType(gpu="A100-80GB", mig_profile="7g.80gb", mps=1), 4)
    assert estimate.source is ProfileSource.ESTIMATED
    assert estimate.spread == pytest.approx(1.15)


def test_estimates_of_an_unmeasured_variant_leave_the_spread_to_the_planners_default():
    store = build_profile_store([system(RESNET50)], "A100-80GB")
    assert all(p.spread is None for _, _, p in store.for_variant("resnet50"))


def test_estimates_corrected_by_measured_p99s_are_p99s_already(measurements):
    rows = [r for r in read_parvagpu_dir(measurements) if r.variant == "resnet50"]
    corrected = build_profile_store([system(RESNET50)], "A100-80GB", measured=add_rows(ProfileStore(), rows[:40]))
    estimates = [p for _, _, p in corrected.for_variant("resnet50") if p.source is ProfileSource.ESTIMATED]
    assert estimates and all(p.spread == 1.0 for p in estimates)


def test_parvagpus_measurements_record_no_median_so_they_set_no_spread(measurements):
    assert all(r.p50_ms is None for r in read_parvagpu_dir(measurements))


def test_a_plan_scales_each_estimate_by_its_variants_measured_spread_and_says_so():
    measured = add_rows(ProfileStore(), profiler_rows(1.15))
    systems = [system(RESNET50)]
    store = build_profile_store(systems, "A100-80GB", measured=measured)
    result = plan(systems, Pool(gpu="A100-80GB", gpus=1), store, options=PlannerOptions(time_limit_s=20))
    configs = [c for t in result.tasks for c in t.configs]
    assert any(c.source is ProfileSource.ESTIMATED for c in configs)
    for config in configs:
        profile = store.get("resnet50", config.segment, config.batch)
        expected = 1.15 if profile.source is ProfileSource.ESTIMATED else 1.0
        assert config.latency_spread == pytest.approx(expected)
        assert config.batch_latency_ms == pytest.approx(profile.latency_ms * expected)
