"""Candidate configurations per task: enumeration by features, exact pruning, budget levels."""

import pytest

from tessera.planner.candidates import Candidate, budget_levels, enumerate_candidates, prune_dominated
from tessera.planner.catalog import gpu_product
from tessera.planner.features import Features
from tessera.planner.model import SystemSpec
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

GPU = gpu_product("H100-80GB")


def system(variants=(("small", 0.8, 2.0), ("big", 1.0, 15.0)), **overrides) -> SystemSpec:
    fields = {
        "name": "s",
        "tasks": [{"name": "t", "variants": [{"name": n, "accuracy": a, "memory_gb": m} for n, a, m in variants]}],
        "slo": {"latency_ms": 100},
        "demand_rps": 10,
    }
    fields.update(overrides)
    return SystemSpec.model_validate(fields)


def full_store(variants=("small", "big"), batches=(1, 4)) -> ProfileStore:
    """A profile for every variant on every segment type, memory fit or not.

    More processes are slower per batch but serve more, so no MPS degree dominates another.
    """
    store = ProfileStore()
    for variant in variants:
        for profile in GPU.profiles:
            for mps in GPU.mps_degrees:
                for batch in batches:
                    store.add(variant, SegmentType(gpu=GPU.name, mig_profile=profile.name, mps=mps), batch,
                              Profile(latency_ms=5 * batch * mps / profile.compute_slices,
                                      throughput_rps=100 * profile.compute_slices * batch ** 0.5 * (1 + mps / 10),
                                      source=ProfileSource.GIVEN))
    return store


def kinds(candidates):
    return {(c.variant, c.segment.mig_profile, c.segment.mps) for c in candidates}


def test_a_segment_whose_memory_cannot_hold_the_processes_is_no_candidate():
    found = kinds(enumerate_candidates(system(), GPU, full_store(), Features()))
    # big needs 15 GB per process: 1g.10gb (9.75 GB) never, 1g.20gb (19.62 GB) only with one process.
    assert not any(v == "big" and p == "1g.10gb" for v, p, _ in found)
    assert ("big", "1g.20gb", 1) in found and ("big", "1g.20gb", 2) not in found
    assert ("big", "3g.40gb", 2) in found and ("big", "3g.40gb", 3) not in found
    assert ("small", "1g.10gb", 4) in found


def test_every_candidate_fits_in_memory():
    spec = system()
    for c in enumerate_candidates(spec, GPU, full_store(), Features()):
        assert c.segment.mps * spec.task("t").variant(c.variant).memory_gb <= GPU.profile(c.segment.mig_profile).memory_gb


def test_no_candidate_batch_exceeds_the_variants_largest_accepted_batch():
    spec = system(tasks=[{"name": "t", "variants": [
        {"name": "small", "accuracy": 0.8, "gpuMemoryGigabytes": 2.0, "maxBatchSize": 2},
        {"name": "big", "accuracy": 1.0, "gpuMemoryGigabytes": 15.0}]}])
    batches = {(c.variant, c.batch) for c in enumerate_candidates(spec, GPU, full_store(), Features())}
    assert {b for v, b in batches if v == "small"} == {1}
    assert {b for v, b in batches if v == "big"} == {1, 4}


def test_a_configuration_without_a_profile_is_no_candidate():
    store = ProfileStore()
    segment = SegmentType(gpu=GPU.name, mig_profile="2g.20gb", mps=1)
    store.add("small", segment, 4, Profile(latency_ms=3, throughput_rps=50, source=ProfileSource.GIVEN))
    [only] = enumerate_candidates(system(), GPU, store, Features())
    assert (only.variant, only.segment, only.batch) == ("small", segment, 4)
    assert only.compute_slices == 2 and only.source is ProfileSource.GIVEN


def test_without_accuracy_scaling_only_the_most_accurate_variants_run():
    spec = system(variants=(("small", 0.8, 2.0), ("big", 1.0, 2.0), ("twin", 1.0, 2.0)))
    store = full_store(variants=("small", "big", "twin"))
    assert {c.variant for c in enumerate_candidates(spec, GPU, store, Features.parse("S+T"))} == {"big", "twin"}
    assert {c.variant for c in enumerate_candidates(spec, GPU, store, Features())} == {"small", "big", "twin"}


def test_without_spatial_partitioning_only_the_whole_gpu_with_one_process_runs():
    found = kinds(enumerate_candidates(system(), GPU, full_store(), Features.parse("A+T")))
    assert found == {("small", "7g.80gb", 1), ("big", "7g.80gb", 1)}


def test_with_spatial_partitioning_every_mig_profile_and_mps_degree_is_considered():
    found = kinds(enumerate_candidates(system(), GPU, full_store(), Features()))
    assert {p for _, p, _ in found} == {p.name for p in GPU.profiles}
    assert {m for _, _, m in found} == set(GPU.mps_degrees)


def candidate(latency, throughput, mps=1, batch=4, mig="2g.20gb", variant="v", task="t"):
    return Candidate(system="s", task=task, variant=variant,
                     segment=SegmentType(gpu=GPU.name, mig_profile=mig, mps=mps), batch=batch,
                     latency_ms=latency, throughput_rps=throughput, source=ProfileSource.ESTIMATED,
                     compute_slices=GPU.profile(mig).compute_slices)


def test_a_candidate_slower_with_less_throughput_and_no_easier_batches_is_pruned():
    good, worse = candidate(10, 100, batch=4), candidate(12, 90, batch=4)
    assert prune_dominated([worse, good]) == [good]


def test_a_faster_candidate_and_a_higher_throughput_one_both_survive():
    fast, wide = candidate(5, 50, batch=4), candidate(20, 200, batch=4)
    assert set(prune_dominated([fast, wide])) == {fast, wide}


def test_a_candidate_whose_batches_fill_sooner_survives_a_faster_higher_throughput_one():
    # fill demand: 1 x (2 - 1) = 1 request versus 1 x (8 - 1) = 7.
    small_batch, big_batch = candidate(12, 90, batch=2), candidate(10, 100, batch=8)
    assert set(prune_dominated([small_batch, big_batch])) == {small_batch, big_batch}


def test_candidates_on_different_mig_profiles_variants_or_tasks_are_never_compared():
    good = candidate(1, 1000)
    others = [candidate(50, 10, mig="1g.10gb"), candidate(50, 10, variant="w"), candidate(50, 10, task="u")]
    assert set(prune_dominated([good, *others])) == {good, *others}


def test_of_equal_candidates_the_smallest_mps_degree_is_kept():
    twin_a, twin_b = candidate(10, 100, mps=2, batch=2), candidate(10, 100, mps=1, batch=3)
    assert twin_a.fill_demand == twin_b.fill_demand == 2
    assert prune_dominated([twin_a, twin_b]) == [twin_b]


def test_enumeration_returns_no_dominated_candidate():
    found = enumerate_candidates(system(), GPU, full_store(batches=(1, 2, 4, 8)), Features())
    for a in found:
        for b in found:
            same_group = (a.task, a.variant, a.segment.mig_profile) == (b.task, b.variant, b.segment.mig_profile)
            if a is not b and same_group:
                assert not a.dominates(b), (a, b)


def test_budget_levels_with_task_budgeting_are_an_even_grid_up_to_the_slo():
    assert budget_levels(system(), Features(), 4) == pytest.approx([25, 50, 75, 100])


def test_budget_levels_without_task_budgeting_are_the_slo_over_the_longest_path():
    spec = system(
        tasks=[{"name": n, "variants": [{"name": f"{n}v", "accuracy": 1, "memory_gb": 1}]} for n in "abcd"],
        edges=[{"source": "a", "target": "b"}, {"source": "b", "target": "c"}, {"source": "a", "target": "d"}],
    )
    assert budget_levels(spec, Features.parse("A+S"), 10) == pytest.approx([100 / 3])


def test_a_candidate_is_usable_only_when_it_fits_the_budget_and_can_fill_its_batches():
    c = candidate(10, 100, mps=1, batch=4)
    assert not c.usable_at(budget_ms=19, most_load_rps=100)  # 2 x 10 ms does not fit
    # 3 requests within 40 - 10 ms needs 100 req/s: just reachable at full utilisation.
    assert c.usable_at(budget_ms=40, most_load_rps=100)
    assert not c.usable_at(budget_ms=40, most_load_rps=90)
