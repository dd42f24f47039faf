import pytest

from tessera.planner.catalog import gpu_product
from tessera.planner.measured import add_rows, load_parvagpu_dir, read_parvagpu_dir
from tessera.planner.model import ProfilePoint, Slo, SystemSpec, Task, Variant
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.profiles import DEFAULT_BATCHES, ProfileSource, ProfileStore, SegmentType


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
