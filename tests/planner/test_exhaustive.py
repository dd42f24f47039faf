"""The exhaustive search itself, on instances whose optimum is worked out by hand."""

from __future__ import annotations

import math

import pytest

from tessera.planner.catalog import CATALOG, valid_layouts
from tessera.planner.checker import layout_is_valid
from tessera.planner.features import Features
from tessera.planner.latency import Routing
from tessera.planner.model import Edge, Pool, Slo, SystemSpec, Task, Variant
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

from .exhaustive import Objective, exhaustive_optimum, min_gpus, single_gpu_vectors

GPU = "H100-80GB"


def store(*points) -> ProfileStore:
    s = ProfileStore()
    for variant, profile, mps, batch, latency, throughput in points:
        s.add(variant, SegmentType(gpu=GPU, mig_profile=profile, mps=mps), batch,
              Profile(latency_ms=latency, throughput_rps=throughput, source=ProfileSource.MEASURED))
    return s


def one_task(demand: float, latency_slo: float = 100.0, memory: float = 4.0) -> SystemSpec:
    return SystemSpec(name="s", tasks=[Task(name="t", variants=[Variant(name="v", accuracy=0.9, memory_gb=memory)])],
                      slo=Slo(latency_ms=latency_slo), demand_rps=demand)


def same(result: Objective | None, served: float, gpus: int, slices: int, accuracy: float = 0.0) -> bool:
    return (result is not None and math.isclose(result.served, served, abs_tol=1e-9)
            and (result.gpus, result.slices) == (gpus, slices) and math.isclose(result.accuracy, accuracy, abs_tol=1e-9))


def solve(systems, points, gpus=1, features=Features(), levels=10, headroom=0.1, batches=(1, 2, 4, 8),
          queueing=False, routing=Routing.ONE_REPLICA):
    """The hand-worked optima count throughput and headroom; the queueing tests turn the wait on."""
    return exhaustive_optimum(systems, Pool(gpu=GPU, gpus=gpus), store(*points), features, headroom, levels,
                              batches, queueing, routing=routing)


@pytest.mark.parametrize("gpu_name", sorted(CATALOG))
def test_layouts_agree_with_catalog_and_checker(gpu_name):
    gpu = CATALOG[gpu_name]
    ours = {v for v in single_gpu_vectors(gpu_name) if any(v)}
    catalog = {tuple(dict(layout).get(p.name, 0) for p in gpu.profiles) for layout in valid_layouts(gpu_name)}
    assert ours == catalog
    for vector in ours:
        assert layout_is_valid(gpu, {p.name: n for p, n in zip(gpu.profiles, vector) if n})


def test_min_gpus():
    fits = min_gpus(GPU, 2)
    names = [p.name for p in CATALOG[GPU].profiles]

    def vec(**counts):
        return tuple(counts.get(n.replace(".", "_"), 0) for n in names)

    assert fits[vec()] == 0
    assert fits[vec(**{"1g_10gb": 7})] == 1
    assert fits[vec(**{"1g_10gb": 8})] == 2
    assert fits[vec(**{"4g_40gb": 2})] == 2
    assert vec(**{"4g_40gb": 3}) not in fits
    assert vec(**{"7g_80gb": 1, "1g_10gb": 1}) in fits and fits[vec(**{"7g_80gb": 1, "1g_10gb": 1})] == 2


def test_replicas_cover_demand_with_headroom():
    # 110 rps per 1g.10gb at headroom 0.1 carries 100 rps: 250 rps need three
    assert same(solve([one_task(250)], [("v", "1g.10gb", 1, 1, 5.0, 110.0)]), 1.0, 1, 3, 0.0)


def test_pool_too_small_serves_part():
    # at most seven 1g.10gb on one GPU: 700 of 1000 rps
    result = solve([one_task(1000)], [("v", "1g.10gb", 1, 1, 5.0, 110.0)])
    assert math.isclose(result.served, 0.7) and (result.gpus, result.slices) == (1, 7)


def test_cheapest_mix_of_profiles():
    # 300 rps: a 3g.40gb (330 -> 300 rps) takes 3 slices; three 1g.10gb (3 x 100) also 3 slices, and so
    # does one 2g.20gb + one 1g.10gb (200 + 100); the 7g.80gb would take 7
    points = [("v", "1g.10gb", 1, 1, 5.0, 110.0), ("v", "2g.20gb", 1, 1, 5.0, 220.0),
              ("v", "3g.40gb", 1, 1, 5.0, 330.0), ("v", "7g.80gb", 1, 1, 5.0, 1000.0)]
    assert same(solve([one_task(300)], points), 1.0, 1, 3, 0.0)
    assert same(solve([one_task(301)], points), 1.0, 1, 4, 0.0)


def test_memory_rules_out_segments():
    # 9.8 GB does not fit 1g.10gb (9.75 GB); two MPS processes of 9.8 GB fit 2g.20gb (19.62 GB) and
    # three fit 3g.40gb (29.4 <= 39.38 GB), which takes more slices
    points = [("v", "1g.10gb", 1, 1, 5.0, 500.0), ("v", "2g.20gb", 2, 1, 5.0, 500.0),
              ("v", "3g.40gb", 3, 1, 5.0, 900.0)]
    assert same(solve([one_task(100, memory=9.8)], points), 1.0, 1, 2)
    assert same(solve([one_task(100, memory=9.8)], points[:1]), 0.0, 0, 0)
    assert same(solve([one_task(100, memory=9.8)], points[2:]), 1.0, 1, 3)
    assert same(solve([one_task(100, memory=13.2)], points[1:]), 0.0, 0, 0)  # 2 x 13.2 > 19.62, 3 x 13.2 > 39.38


def test_batches_must_fill_within_budget():
    # batch 4, 10 ms, one level (B = 100 ms): a replica needs 3 x 1000 / 90 = 33.3 rps to fill its batches
    points = [("v", "1g.10gb", 1, 4, 10.0, 400.0)]
    assert same(solve([one_task(20)], points, levels=1), 0.0, 0, 0, 0.0)
    assert same(solve([one_task(40)], points, levels=1), 1.0, 1, 1, 0.0)
    # two MPS processes need twice the load
    points = [("v", "1g.10gb", 2, 4, 10.0, 400.0)]
    assert same(solve([one_task(40, memory=4)], points, levels=1), 0.0, 0, 0, 0.0)
    assert same(solve([one_task(70, memory=4)], points, levels=1), 1.0, 1, 1, 0.0)


def test_lower_bounds_cap_the_replicas():
    # 1000 rps on a batch-8 config needing 7 x 1000 / 90 = 77.8 rps per replica, at most 100 each:
    # with 7 replicas on one GPU the fraction served is 700 / 1000; lower bounds allow it
    points = [("v", "1g.10gb", 1, 8, 10.0, 110.0)]
    result = solve([one_task(1000)], points, levels=1)
    assert math.isclose(result.served, 0.7) and result.slices == 7
    # at 60 rps a single replica cannot fill its batches: nothing is served
    assert solve([one_task(60)], points, levels=1).served == 0


def test_latency_slo_rules_out_slow_batches():
    points = [("v", "1g.10gb", 1, 1, 30.0, 110.0)]
    assert same(solve([one_task(50, latency_slo=59)], points), 0.0, 0, 0, 0.0)
    assert same(solve([one_task(50, latency_slo=60)], points, levels=1), 1.0, 1, 1, 0.0)


def chain(accuracy_slo=1.0, demand=100.0) -> SystemSpec:
    return SystemSpec(
        name="c",
        tasks=[Task(name="a", variants=[Variant(name="a-big", accuracy=0.9, memory_gb=4),
                                        Variant(name="a-small", accuracy=0.81, memory_gb=4)]),
               Task(name="b", variants=[Variant(name="b", accuracy=0.7, memory_gb=4)])],
        edges=[Edge(source="a", target="b", factor=1.0, factor_by_variant={"a-big": 3.0})],
        slo=Slo(latency_ms=100.0, accuracy=accuracy_slo), demand_rps=demand,
    )


CHAIN = [("a-big", "1g.10gb", 1, 1, 40.0, 110.0), ("a-small", "1g.10gb", 1, 1, 40.0, 110.0),
         ("b", "1g.10gb", 1, 1, 5.0, 110.0)]


def test_task_budgeting_gives_the_slow_task_more():
    # a needs B >= 80 ms, b needs B >= 10 ms: 90 + 10 fits the 100 ms SLO with T; the equal split
    # (50 ms each) does not fit a
    assert math.isclose(solve([chain()], CHAIN).served, 1.0)
    assert solve([chain()], CHAIN, features=Features(task_budgeting=False)).served == 0.0


def test_variant_dependent_factor_and_accuracy_tradeoff():
    # a-big triples b's demand (300 rps: 3 replicas), a-small does not (100 rps: 1 replica)
    best = solve([chain(accuracy_slo=1.0)], CHAIN)
    assert same(best, 1.0, 1, 4, 0.0)
    cheaper = solve([chain(accuracy_slo=0.85)], CHAIN)
    assert (cheaper.gpus, cheaper.slices) == (1, 2) and math.isclose(cheaper.accuracy, math.log(0.9))
    # without accuracy scaling only a-big may run
    assert solve([chain(accuracy_slo=0.85)], CHAIN, features=Features(accuracy_scaling=False)) == best


def test_two_systems_share_the_pool():
    # each system alone would take 5 x 1g.10gb; one GPU holds 7: served 1 + 2/5
    first = one_task(500)
    second = first.model_copy(update={"name": "s2"})
    result = solve([first, second], [("v", "1g.10gb", 1, 1, 5.0, 110.0)])
    assert math.isclose(result.served, 1.4) and (result.gpus, result.slices) == (1, 7)
    result = solve([first, second], [("v", "1g.10gb", 1, 1, 5.0, 110.0)], gpus=2)
    assert same(result, 2.0, 2, 10, 0.0)


def test_whole_gpus_without_spatial_partitioning():
    points = [("v", "1g.10gb", 1, 1, 5.0, 110.0), ("v", "7g.80gb", 1, 1, 5.0, 550.0)]
    assert same(solve([one_task(100)], points, features=Features(spatial_partitioning=False)), 1.0, 1, 7, 0.0)


def test_the_queueing_wait_caps_the_load_per_instance():
    # 10 ms, 100 rps at the whole 100 ms budget: A = 100 - 2 x 10 ms, so one instance carries at most
    # 0.08 x 100^2 / (ln(100) / 2 + 0.08 x 100) = 77.6 rps of Poisson arrivals (under 100 / 1.1 = 90.9).
    points = [("v", "1g.10gb", 1, 1, 10.0, 100.0)]
    assert same(solve([one_task(77)], points, queueing=True), 1.0, 1, 1)
    assert same(solve([one_task(85)], points, queueing=True), 1.0, 1, 2)
    assert same(solve([one_task(85)], points, queueing=False), 1.0, 1, 1)


def test_a_parents_batch_is_a_bulk_that_caps_its_childs_load():
    # a hands b 10 requests per request (50 -> 500 rps); b's arrivals have dispersion 1 + 10 x a's batch.
    chain = SystemSpec(
        name="s", tasks=[Task(name="a", variants=[Variant(name="av", accuracy=0.9, memory_gb=4)]),
                         Task(name="b", variants=[Variant(name="bv", accuracy=0.9, memory_gb=4)])],
        edges=[Edge(source="a", target="b", factor=10.0)], slo=Slo(latency_ms=100.0), demand_rps=50)
    a_batch_1, a_batch_2 = ("av", "1g.10gb", 1, 1, 5.0, 200.0), ("av", "1g.10gb", 1, 2, 5.0, 400.0)
    b = ("bv", "1g.10gb", 1, 1, 2.0, 500.0)
    # a at batch 1 needs 20 ms (at 10 ms no wait fits), leaving b 80 ms: D = 11, most load
    # 0.076 x 500^2 / (2.303 x 11 + 0.076 x 500) = 300 rps, so two instances of b.
    assert same(solve([chain], [a_batch_1, b], queueing=True), 1.0, 1, 3)
    # a at batch 2 fills within 30 ms at the least (1 / (30 - 5) ms = 40 <= 50 rps), leaving b 70 ms:
    # D = 21, most load 0.066 x 500^2 / (2.303 x 21 + 0.066 x 500) = 203 rps, so three instances of b.
    assert same(solve([chain], [a_batch_2, b], queueing=True), 1.0, 1, 4)
    assert same(solve([chain], [a_batch_1, a_batch_2, b], queueing=True), 1.0, 1, 3)
    # Without the wait b's instances carry 500 / 1.1 = 454.5 rps either way.
    assert same(solve([chain], [a_batch_2, b], queueing=False), 1.0, 1, 3)


def _bulk_chain(demand: float = 50) -> SystemSpec:
    """a hands b 10 requests per request (50 -> 500 rps): b's least demand, of which its replicas take shares."""
    return SystemSpec(
        name="s", tasks=[Task(name="a", variants=[Variant(name="av", accuracy=0.9, memory_gb=4)]),
                         Task(name="b", variants=[Variant(name="bv", accuracy=0.9, memory_gb=4)])],
        edges=[Edge(source="a", target="b", factor=10.0)], slo=Slo(latency_ms=100.0), demand_rps=demand)


BULK_A = ("av", "1g.10gb", 1, 2, 5.0, 400.0)  # batch 2: bulks of 20 crops, and a 30 ms budget for a
BULK_B = ("bv", "1g.10gb", 1, 1, 2.0, 500.0)


def test_a_bulk_split_per_request_takes_each_replicas_share():
    # b under 70 ms: A = 0.066 s. A replica of load lam sees 1 + 20 lam / 500: the most load solves
    # 0.0921 lam^2 + 35.30 lam = 16500, lam = 273 rps, so two instances carry b's 500 rps (the whole
    # bulk needed three: D = 21, 203 rps each).
    assert same(solve([_bulk_chain()], [BULK_A, BULK_B], queueing=True, routing=Routing.PER_REQUEST), 1.0, 1, 3)
    assert same(solve([_bulk_chain()], [BULK_A, BULK_B], queueing=True), 1.0, 1, 4)


def test_a_bulk_split_per_connection_takes_a_busy_replicas_p99_of_connections():
    # Two replicas of half the load each: Binomial(16, 1/2) has its p99 at 13 connections, so a replica
    # may see 13/16 of a bulk: D = 17.25, and 250 rps waits 2.303 x 250 x 17.25 / (500 x 250) = 79 ms
    # > 66 ms. Three replicas (p99 of Binomial(16, 1/3): 10 connections, D = 13.5) wait 31 ms.
    assert same(solve([_bulk_chain()], [BULK_A, BULK_B], queueing=True, routing=Routing.PER_CONNECTION),
                1.0, 1, 4)


def test_a_pool_too_small_for_all_demand_counts_whole_bulks():
    # 500 rps into a: b's 5,000 rps is more than the 7 instances of one GPU carry (454.5 rps each with
    # headroom). Shares of b's least demand hold only when all of it is served, so a plan serving less
    # counts whole bulks whatever the routing.
    split = solve([_bulk_chain(500)], [BULK_A, BULK_B], queueing=True, routing=Routing.PER_REQUEST)
    whole = solve([_bulk_chain(500)], [BULK_A, BULK_B], queueing=True)
    assert split is not None and split.served < 1 and split == whole
