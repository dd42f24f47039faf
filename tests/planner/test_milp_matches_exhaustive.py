"""The MILP's optimum equals an exhaustive search's on small random instances.

For every instance, `plan()`'s objective tuple (served fraction summed over
systems, GPUs, compute slices, accuracy score) under the planner's default
options (only headroom, budget levels and batches come from the instance)
must equal the exhaustive search's (served fraction and accuracy to the
options' MIP gap), and
the plan must pass the independent checker. The exhaustive
search's own optimum is first written down as a plan and checked too.

Default run: DEFAULT_SEEDS random instances (about 25 s on a shared core)
and MEASURED_SEEDS whose profiles are real A100-80GB measurements (batches
up to 128); `pytest -m slow` (or TESSERA_SLOW=1) adds SLOW_SEEDS more of each;
TESSERA_EXHAUSTIVE_SEEDS=N changes the default count. A failing seed's
assertion message prints the whole instance; rerun it alone with
`pytest tests/planner/test_milp_matches_exhaustive.py -k "random_instance and 543"`
or `python -P -m pytest ... -k ...` from the repository root.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random

import pytest

from tessera.planner import solve
from tessera.planner.checker import check_plan
from tessera.planner.features import Features
from tessera.planner.latency import Routing
from tessera.planner.measured import read_parvagpu_dir
from tessera.planner.model import Edge, Pool, Slo, SystemSpec, Task, Variant
from tessera.planner.plan import Plan
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

from .exhaustive import Objective, exhaustive_optimum, exhaustive_search, stage_one, witness_plan
from .instances import Instance, random_instance, random_measured_instance

DEFAULT_SEEDS = int(os.environ.get("TESSERA_EXHAUSTIVE_SEEDS", "120"))
SLOW_SEEDS = 1000
PRIORITY_SEEDS = int(os.environ.get("TESSERA_EXHAUSTIVE_PRIORITY_SEEDS", "60"))
MEASURED_SEEDS = int(os.environ.get("TESSERA_EXHAUSTIVE_MEASURED_SEEDS", "60"))
SERVED_TOL = 1e-5
ACCURACY_TOL = 1e-6


def options_for(instance: Instance):
    """The planner's default options, but for what the instance itself sets (headroom, levels, batches)."""
    line = {} if instance.exact_up_to_gpus is None else {"exact_up_to_gpus": instance.exact_up_to_gpus}
    return solve.PlannerOptions(headroom=instance.headroom, budget_levels=instance.budget_levels,
                                batches=instance.batches, time_limit_s=60, queueing=instance.queueing,
                                routing=instance.routing, **line)


def plan_objective(plan: Plan, systems: list[SystemSpec]) -> Objective:
    served: list[float] = []
    accuracy: list[float] = []
    for system in systems:
        summary = next(s for s in plan.systems if s.system == system.name)
        served.append(summary.served_rps / system.demand_rps if system.demand_rps > 0 else 1.0)
        chosen = {t.task: t.variant for t in plan.tasks if t.system == system.name}
        accuracy.append(sum(math.log(system.path_accuracy(p, chosen)) for p in system.paths) / len(system.paths)
                        if len(chosen) == len(system.tasks) else 0.0)
    return Objective(sum(served), plan.gpus_used, plan.slices_used, sum(accuracy),
                     sum(a for a, s in zip(accuracy, systems) if s.priority == "accuracy"),
                     stage_one(systems, served, accuracy))


def exhaustive(instance: Instance) -> Objective | None:
    """The exhaustive optimum, after checking that the plan it stands for is valid and reaches it."""
    found = exhaustive_search(instance.systems, instance.pool, instance.store, instance.features,
                              instance.headroom, instance.budget_levels, instance.batches, instance.queueing,
                              routing=instance.routing)
    if found is None:
        return None
    objective, choices = found
    witness = witness_plan(instance.systems, instance.pool, instance.features, instance.headroom, choices,
                           instance.queueing, routing=instance.routing)
    errors = check_plan(witness, instance.systems, instance.pool, instance.store, instance.features,
                        options_for(instance))
    assert not errors, "the exhaustive search's own plan breaks constraints:\n  " + "\n  ".join(errors)
    reached = plan_objective(witness, instance.systems)
    assert abs(reached.served - objective.served) <= 1e-9 and (reached.gpus, reached.slices) == (
        objective.gpus, objective.slices) and abs(reached.accuracy - objective.accuracy) <= 1e-9 and abs(
        reached.priority_accuracy - objective.priority_accuracy) <= 1e-9, (reached, objective)
    return objective


def compare(instance: Instance) -> None:
    expected = exhaustive(instance)
    options = options_for(instance)
    if expected is None:
        with pytest.raises(solve.NoPlanError):
            solve.plan(instance.systems, instance.pool, instance.store, instance.features, options)
        return
    plan = solve.plan(instance.systems, instance.pool, instance.store, instance.features, options)
    errors = check_plan(plan, instance.systems, instance.pool, instance.store, instance.features, options)
    got = plan_objective(plan, instance.systems)
    context = f"\n{instance.describe()}\nexhaustive: {expected}\nMILP:       {got}"
    assert not errors, "the MILP's plan breaks constraints:\n  " + "\n  ".join(errors) + context
    # The serve and accuracy stages stop at the options' relative MIP gap (a partly served pool may end a
    # hair below the optimum, never above it); GPUs and slices are proven exactly.
    assert len(got.by_priority) == len(expected.by_priority), "serving all differs" + context
    for rank, (mine, best) in enumerate(zip(got.by_priority, expected.by_priority)):
        tolerance = SERVED_TOL if rank % 2 == 0 else accuracy_tolerance(options, best)
        assert abs(mine - best) <= max(tolerance, options.mip_gap * abs(best)), (
            f"stage 1 by priority differs at {rank}" + context)
    assert got.served <= expected.served + SERVED_TOL, "the MILP serves more than the optimum" + context
    assert got.served >= expected.served * (1 - options.mip_gap) - SERVED_TOL, "served fraction differs" + context
    assert abs(got.priority_accuracy - expected.priority_accuracy) <= accuracy_tolerance(
        options, expected.priority_accuracy), "accuracy of the systems with priority accuracy differs" + context
    assert (got.gpus, got.slices) == (expected.gpus, expected.slices), "GPUs or slices differ" + context
    assert abs(got.accuracy - expected.accuracy) <= accuracy_tolerance(options, expected.accuracy), (
        "accuracy score differs" + context)


def with_priorities(instance: Instance, seed: int) -> Instance:
    """The instance with its systems' poolPriority drawn from a stream of their own, never all equal."""
    drawn = random.Random(seed + 2_000_003).sample(range(-3, 4), len(instance.systems))
    return dataclasses.replace(instance, systems=[s.model_copy(update={"pool_priority": p})
                                                  for s, p in zip(instance.systems, drawn)])


def accuracy_tolerance(options, score: float) -> float:
    return max(ACCURACY_TOL, options.mip_gap * abs(score))


@pytest.mark.parametrize("seed", range(DEFAULT_SEEDS))
def test_random_instance(seed):
    compare(random_instance(seed))


@pytest.mark.parametrize("seed", range(PRIORITY_SEEDS))
def test_random_instance_of_two_systems_of_different_priorities(seed):
    compare(with_priorities(random_instance(seed, systems=2), seed))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(DEFAULT_SEEDS, DEFAULT_SEEDS + SLOW_SEEDS))
def test_random_instance_slow(seed):
    compare(random_instance(seed))


@pytest.fixture(scope="module")
def measured_rows(measurements):
    return read_parvagpu_dir(measurements)


@pytest.mark.parametrize("seed", range(MEASURED_SEEDS))
def test_random_instance_with_measured_a100_profiles(seed, measured_rows):
    compare(random_measured_instance(seed, measured_rows))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(MEASURED_SEEDS, MEASURED_SEEDS + SLOW_SEEDS))
def test_random_instance_with_measured_a100_profiles_slow(seed, measured_rows):
    compare(random_measured_instance(seed, measured_rows))


# ---------------------------------------------------------------------------
# Explicit instances for the cases the random ones must not miss
# ---------------------------------------------------------------------------

GPU = "H100-80GB"


def _store(points) -> ProfileStore:
    store = ProfileStore()
    for variant, profile, mps, batch, latency, throughput in points:
        store.add(variant, SegmentType(gpu=GPU, mig_profile=profile, mps=mps), batch,
                  Profile(latency_ms=latency, throughput_rps=throughput, source=ProfileSource.GIVEN))
    return store


def _instance(systems, store, gpus=1, features=Features(), levels=4, batches=(1, 2, 4), headroom=0.1,
              queueing=True, routing=Routing.ONE_REPLICA) -> Instance:
    return Instance(seed=-1, systems=systems, pool=Pool(gpu=GPU, gpus=gpus), store=store, features=features,
                    headroom=headroom, budget_levels=levels, batches=batches, queueing=queueing, routing=routing)


def _chain(demand, latency_slo=100.0, accuracy_slo=0.9) -> SystemSpec:
    return SystemSpec(
        name="chain",
        tasks=[Task(name="det", variants=[Variant(name="det-s", accuracy=0.85, memory_gb=8),
                                          Variant(name="det-l", accuracy=0.9, memory_gb=18)]),
               Task(name="cls", variants=[Variant(name="cls", accuracy=0.7, memory_gb=4)])],
        edges=[Edge(source="det", target="cls", factor=2.0, factor_by_variant={"det-l": 3.0})],
        slo=Slo(latency_ms=latency_slo, accuracy=accuracy_slo),
        demand_rps=demand,
    )


CHAIN_POINTS = [
    ("det-s", "1g.10gb", 1, 1, 8.0, 110.0),
    ("det-s", "2g.20gb", 1, 4, 12.0, 330.0),
    ("det-l", "2g.20gb", 1, 2, 14.0, 140.0),
    ("det-l", "3g.40gb", 1, 4, 11.0, 360.0),
    ("cls", "1g.10gb", 1, 1, 3.0, 300.0),
    ("cls", "1g.10gb", 2, 4, 9.0, 700.0),
]


def test_chain_fully_served():
    compare(_instance([_chain(demand=150)], _store(CHAIN_POINTS)))


def test_pool_too_small_serves_part():
    instance = _instance([_chain(demand=5000)], _store(CHAIN_POINTS))
    expected = exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                                  instance.headroom, instance.budget_levels, instance.batches)
    assert expected is not None and 0 < expected.served < 1
    compare(instance)


def test_no_configuration_meets_the_latency_slo():
    # every 2 x batch latency is above the whole 10 ms SLO: nothing can be served
    instance = _instance([_chain(demand=100, latency_slo=10.0)], _store(CHAIN_POINTS))
    expected = exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                                  instance.headroom, instance.budget_levels, instance.batches)
    assert expected == Objective(0.0, 0, 0, 0.0)
    compare(instance)


def test_batches_too_slow_to_fill_at_low_demand():
    # at 2 rps a batch of 4 takes 1.5 s to fill: only batch-1 configurations can serve
    compare(_instance([_chain(demand=2, latency_slo=60.0, accuracy_slo=0.5)], _store(CHAIN_POINTS)))


def test_two_systems_share_a_small_pool():
    other = SystemSpec(
        name="ocr", tasks=[Task(name="read", variants=[Variant(name="read", accuracy=0.9, memory_gb=9)])],
        slo=Slo(latency_ms=60.0), demand_rps=900,
    )
    points = CHAIN_POINTS + [("read", "1g.10gb", 1, 1, 5.0, 120.0), ("read", "2g.20gb", 1, 2, 7.0, 400.0)]
    compare(_instance([_chain(demand=300), other], _store(points), gpus=1))


@pytest.mark.parametrize("features", ["A+S", "S+T", "A+T", "unopt"])
def test_feature_subsets(features):
    points = CHAIN_POINTS + [("det-s", "7g.80gb", 1, 4, 6.0, 900.0), ("det-l", "7g.80gb", 1, 4, 7.0, 800.0),
                             ("cls", "7g.80gb", 1, 2, 2.0, 1500.0)]
    compare(_instance([_chain(demand=400, accuracy_slo=0.9)], _store(points), gpus=2,
                      features=Features.parse(features)))



# ---------------------------------------------------------------------------
# Mismatches found between the MILP and the exhaustive search, kept as cases
# ---------------------------------------------------------------------------

H200 = "H200-141GB"


def _h200_store(points) -> ProfileStore:
    store = ProfileStore()
    for variant, profile, mps, batch, latency, throughput in points:
        store.add(variant, SegmentType(gpu=H200, mig_profile=profile, mps=mps), batch,
                  Profile(latency_ms=latency, throughput_rps=throughput, source=ProfileSource.GIVEN))
    return store


def test_cost_is_minimised_after_partial_service():
    """Found by seed 103. Two 4g.71gb instances (one per GPU, 8 slices) serve the most; the MILP's plan
    kept the serve stage's layouts (14 slices): its cost stage after the serve stage reported 0.0."""
    spec = SystemSpec(
        name="s0",
        tasks=[Task(name="a", variants=[Variant(name="a0", accuracy=0.54, memory_gb=4.9)]),
               Task(name="b", variants=[Variant(name="b0", accuracy=0.81, memory_gb=50.2)])],
        edges=[Edge(source="a", target="b", factor=1.37)],
        slo=Slo(latency_ms=83.3, accuracy=0.95), demand_rps=151.5,
    )
    store = _h200_store([("a0", "4g.71gb", 1, 1, 8.95, 104.0), ("b0", "4g.71gb", 1, 2, 13.3, 104.6)])
    # The seed's numbers without the queueing wait.
    instance = Instance(seed=-103, systems=[spec], pool=Pool(gpu=H200, gpus=2), store=store, features=Features(),
                        headroom=0.1, budget_levels=4, batches=(1, 2, 4), queueing=False)
    expected = exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                                  instance.headroom, instance.budget_levels, instance.batches, queueing=False)
    assert (expected.gpus, expected.slices) == (2, 8) and 0 < expected.served < 1
    compare(instance)


def test_accuracy_is_maximised_after_cost():
    """Found by seed 151. Both systems are served on 6 slices of one GPU either way; the most accurate
    such plan scores -0.1505, the MILP's plan -0.3204: its accuracy stage reported the optimum (0.0 on
    its own terms) but the plan kept the cost stage's variants."""
    s0 = SystemSpec(
        name="s0",
        tasks=[Task(name="a", variants=[Variant(name="s0a0", accuracy=0.9965, memory_gb=10.22),
                                        Variant(name="s0a1", accuracy=0.8572, memory_gb=1.166)]),
               Task(name="b", variants=[Variant(name="s0b0", accuracy=0.6139, memory_gb=8.984),
                                        Variant(name="s0b1", accuracy=0.9477, memory_gb=18.37)])],
        edges=[Edge(source="a", target="b", factor=0.8735, factor_by_variant={"s0a1": 1.1396})],
        slo=Slo(latency_ms=1891.1, accuracy=0.4106), demand_rps=46.07,
    )
    s1 = SystemSpec(
        name="s1",
        tasks=[Task(name="a", variants=[Variant(name="s1a0", accuracy=0.9071, memory_gb=17.08),
                                        Variant(name="s1a1", accuracy=0.7654, memory_gb=5.112)]),
               Task(name="b", variants=[Variant(name="s1b0", accuracy=0.9014, memory_gb=13.18)])],
        edges=[Edge(source="a", target="b", factor=1.3198)],
        slo=Slo(latency_ms=3012.9, accuracy=0.7014), demand_rps=1.1299,
    )
    store = _h200_store([
        ("s0a1", "2g.35gb", 2, 8, 140.73, 109.74),
        ("s0b0", "2g.35gb", 2, 8, 155.76, 65.91),
        ("s0b1", "1g.35gb", 1, 2, 95.22, 16.51),
        ("s0b1", "1g.35gb", 1, 8, 76.71, 79.70),
        ("s1a0", "1g.35gb", 1, 2, 100.62, 17.70),
        ("s1a1", "1g.35gb", 1, 2, 86.35, 15.14),
        ("s1b0", "2g.35gb", 2, 2, 130.14, 23.03),
    ])
    instance = Instance(seed=-151, systems=[s0, s1], pool=Pool(gpu=H200, gpus=2), store=store,
                        features=Features(), headroom=0.1, budget_levels=3, batches=(2, 4, 8))
    compare(instance)


def test_cost_stage_after_serving_part_on_a_fork():
    """Found by seed 543. A fork a -> b, a -> c on two A100-80GB GPUs serves 4.5% at most; the cheapest
    such plan takes 11 slices. HiGHS's presolve declared the cost stage (after the serve stage's hold)
    infeasible, though the serve stage's own solution satisfies it, and the plan kept 14 slices."""
    gpu = "A100-80GB"
    spec = SystemSpec(
        name="s0",
        tasks=[Task(name="a", variants=[Variant(name="s0a0", accuracy=0.7936, memory_gb=3.945),
                                        Variant(name="s0a1", accuracy=0.9406, memory_gb=4.791),
                                        Variant(name="s0a2", accuracy=0.6415, memory_gb=4.941)]),
               Task(name="b", variants=[Variant(name="s0b0", accuracy=0.5800, memory_gb=14.72),
                                        Variant(name="s0b1", accuracy=0.5631, memory_gb=5.970),
                                        Variant(name="s0b2", accuracy=0.6410, memory_gb=58.25)]),
               Task(name="c", variants=[Variant(name="s0c0", accuracy=0.8779, memory_gb=1.998)])],
        edges=[Edge(source="a", target="b", factor=0.5423),
               Edge(source="a", target="c", factor=1.5556, factor_by_variant={"s0a0": 0.3538, "s0a2": 0.3926})],
        slo=Slo(latency_ms=82.92, accuracy=0.8523), demand_rps=693.9,
    )
    store = ProfileStore()
    for variant, profile, latency, throughput in [("s0a0", "3g.40gb", 12.03, 57.68), ("s0a1", "4g.40gb", 17.63, 50.06),
                                                  ("s0b1", "3g.40gb", 10.16, 69.22), ("s0c0", "4g.40gb", 13.03, 61.04)]:
        store.add(variant, SegmentType(gpu=gpu, mig_profile=profile, mps=1), 1,
                  Profile(latency_ms=latency, throughput_rps=throughput, source=ProfileSource.GIVEN))
    instance = Instance(seed=-543, systems=[spec], pool=Pool(gpu=gpu, gpus=2), store=store, features=Features(),
                        headroom=0.25, budget_levels=4, batches=(1, 8))
    expected = exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                                  instance.headroom, instance.budget_levels, instance.batches)
    assert (expected.gpus, expected.slices) == (2, 11) and 0 < expected.served < 0.1
    compare(instance)


def test_one_task_served_on_the_cheapest_segment():
    """Found by seed 21. One task, fully served: one 1g.10gb (two MPS processes, 102 rps with headroom)
    carries its 99 rps on 1 slice; the MILP's plan used 7 slices: its cost stage reported 0.0 after the
    relax-and-fix start (HiGHS warm start between stages)."""
    gpu = "A100-80GB"
    spec = SystemSpec(
        name="s0",
        tasks=[Task(name="a", variants=[Variant(name="s0a0", accuracy=0.5116, memory_gb=3.488),
                                        Variant(name="s0a1", accuracy=0.6460, memory_gb=2.005),
                                        Variant(name="s0a2", accuracy=0.9589, memory_gb=4.380)])],
        slo=Slo(latency_ms=52.77, accuracy=0.9139), demand_rps=99.12,
    )
    store = ProfileStore()
    for profile, mps, latency, throughput in [("1g.10gb", 2, 14.26, 112.53), ("4g.40gb", 4, 12.22, 248.11)]:
        store.add("s0a2", SegmentType(gpu=gpu, mig_profile=profile, mps=mps), 1,
                  Profile(latency_ms=latency, throughput_rps=throughput, source=ProfileSource.GIVEN))
    # The seed's optimum without the queueing wait (one 1g.10gb instance carries the demand).
    instance = Instance(seed=-21, systems=[spec], pool=Pool(gpu=gpu, gpus=2), store=store,
                        features=Features.parse("S"), headroom=0.1, budget_levels=4, batches=(1, 4, 8), queueing=False)
    expected = exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                                  instance.headroom, instance.budget_levels, instance.batches, queueing=False)
    assert expected == Objective(1.0, 1, 1, 0.0)
    compare(instance)


def test_priority_accuracy_with_a_single_variant_and_a_small_pool():
    """Found by seeds 13, 26, 53, 80, 256 (priority accuracy). With one variant per task (or accuracy
    scaling off) the accuracy-first stage's objective is a constant, so it is not solved, and the
    planner takes the full demand as feasible: here only 700 of 1000 rps fit one GPU, and plan()
    failed (no values for the variant binaries) instead of serving 70%."""
    spec = SystemSpec(
        name="ocr", priority="accuracy",
        tasks=[Task(name="read", variants=[Variant(name="read", accuracy=0.9, memory_gb=4)])],
        slo=Slo(latency_ms=50.0), demand_rps=1000,
    )
    # 700 rps is the throughput bound alone; the queueing wait would lower it.
    instance = _instance([spec], _store([("read", "1g.10gb", 1, 1, 5.0, 110.0)]), gpus=1, queueing=False)
    expected = exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                                  instance.headroom, instance.budget_levels, instance.batches, queueing=False)
    assert math.isclose(expected.served, 0.7) and (expected.gpus, expected.slices) == (1, 7)
    compare(instance)


def test_priority_accuracy_comes_before_cost():
    # the chain's best detector (det-l) triples the classifier's demand; with priority accuracy it is
    # kept although det-s would be cheaper
    cost = _chain(demand=150, accuracy_slo=0.9)
    accuracy = cost.model_copy(update={"priority": "accuracy"})
    cheap = exhaustive_optimum([cost], Pool(gpu=GPU, gpus=1), _store(CHAIN_POINTS), Features(), 0.1, 4, (1, 2, 4))
    best = exhaustive_optimum([accuracy], Pool(gpu=GPU, gpus=1), _store(CHAIN_POINTS), Features(), 0.1, 4,
                              (1, 2, 4))
    assert best.accuracy == 0.0 and cheap.accuracy < 0 and best.slices > cheap.slices
    compare(_instance([cost], _store(CHAIN_POINTS)))
    compare(_instance([accuracy], _store(CHAIN_POINTS)))


def test_nothing_servable_on_a_triangle_still_plans():
    """Found by seed 517. Task a's only variant needs a whole H200 and the pool has one GPU, so nothing
    can be served: the optimum serves 0% on no GPU. plan() raised NoPlanError: the warm-started serve
    stage ended in HiGHS "Solve error" and was taken for infeasible; solved cold it is optimal."""
    spec = SystemSpec.model_validate_json('{"name":"s0","tasks":[{"name":"a","variants":[{"name":"s0a0","accuracy":0.7110346492462227,"memory_gb":70.46096963861962}]},{"name":"b","variants":[{"name":"s0b0","accuracy":0.7659745827489934,"memory_gb":16.375057800013803},{"name":"s0b1","accuracy":0.6306428972347098,"memory_gb":2.983070016869915}]},{"name":"c","variants":[{"name":"s0c0","accuracy":0.9689119305197117,"memory_gb":3.8534476300918317},{"name":"s0c1","accuracy":0.5245970550229996,"memory_gb":4.161015022222067},{"name":"s0c2","accuracy":0.9364928392355902,"memory_gb":5.279967508537574}]}],"edges":[{"source":"a","target":"b","factor":2.3297026931289206},{"source":"a","target":"c","factor":2.3125817834282576},{"source":"b","target":"c","factor":0.8626963827136216}],"slo":{"latency_ms":35.75863239409435,"accuracy":0.8542282766742919},"demand_rps":42.34740042400904}')
    points = [
        ("s0a0", "7g.141gb", 1, 1, 10.859141123168246, 88.88831544208418),
        ("s0b0", "7g.141gb", 2, 1, 10.307203890068866, 142.06400612784836),
        ("s0b0", "7g.141gb", 2, 2, 11.658859252532242, 298.6851319892831),
        ("s0b0", "4g.71gb", 1, 1, 9.25582273661833, 92.5050063812761),
        ("s0b0", "4g.71gb", 1, 2, 10.53029689942177, 149.66517959935618),
        ("s0c0", "7g.141gb", 2, 2, 10.154327359885862, 283.432735235569),
        ("s0c0", "7g.141gb", 1, 1, 4.962846154548288, 141.40326397380667),
        ("s0c0", "7g.141gb", 1, 2, 7.4737160794227755, 229.6881611881511),
        ("s0c0", "4g.71gb", 1, 1, 6.830081055094434, 131.73895205724082),
        ("s0c0", "4g.71gb", 1, 2, 9.029660896700396, 146.268849855932),
        ("s0c2", "7g.141gb", 2, 1, 6.034333368838816, 330.9586301919857),
        ("s0c2", "7g.141gb", 2, 2, 8.0371615104663, 416.4450210442527),
        ("s0c2", "7g.141gb", 1, 1, 4.283771156918029, 218.1322906556209),
        ("s0c2", "4g.71gb", 1, 1, 6.433094059881152, 120.05079520221163),
    ]
    store = ProfileStore()
    for variant, profile, mps, batch, latency, throughput in points:
        store.add(variant, SegmentType(gpu=H200, mig_profile=profile, mps=mps), batch,
                  Profile(latency_ms=latency, throughput_rps=throughput, source=ProfileSource.GIVEN))
    instance = Instance(seed=-517, systems=[spec], pool=Pool(gpu=H200, gpus=1), store=store, features=Features(),
                        headroom=0.25, budget_levels=4, batches=(1, 2, 8))
    assert exhaustive_optimum(instance.systems, instance.pool, instance.store, instance.features,
                              instance.headroom, instance.budget_levels, instance.batches) == Objective(0.0, 0, 0, 0.0)
    compare(instance)


def test_a_parents_batch_caps_its_childs_load_as_the_search_finds():
    chain = SystemSpec(
        name="s", tasks=[Task(name="a", variants=[Variant(name="av", accuracy=0.9, memory_gb=4)]),
                         Task(name="b", variants=[Variant(name="bv", accuracy=0.9, memory_gb=4)])],
        edges=[Edge(source="a", target="b", factor=10.0)], slo=Slo(latency_ms=100.0), demand_rps=50)
    points = [("av", "1g.10gb", 1, 1, 5.0, 200.0), ("av", "1g.10gb", 1, 2, 5.0, 400.0),
              ("bv", "1g.10gb", 1, 1, 2.0, 500.0), ("bv", "2g.20gb", 1, 1, 2.0, 1000.0)]
    compare(_instance([chain], _store(points), levels=10))


# Bulks split over replicas: the same instances under the two routings that split them.
SPLIT_SEEDS = int(os.environ.get("TESSERA_EXHAUSTIVE_SPLIT_SEEDS", "12"))
SLOW_LINE_AND_SPLIT_SEEDS = 48


@pytest.mark.parametrize("routing", [Routing.PER_REQUEST, Routing.PER_CONNECTION])
@pytest.mark.parametrize("seed", range(SPLIT_SEEDS))
def test_random_instance_with_bulks_split_over_replicas(seed, routing):
    compare(dataclasses.replace(random_instance(seed), routing=routing))


@pytest.mark.parametrize("routing", [Routing.PER_REQUEST, Routing.PER_CONNECTION])
@pytest.mark.parametrize("seed", range(SPLIT_SEEDS // 2))
def test_random_instance_with_measured_a100_profiles_and_bulks_split_over_replicas(seed, routing, measured_rows):
    compare(dataclasses.replace(random_measured_instance(seed, measured_rows), routing=routing))


@pytest.mark.slow
@pytest.mark.parametrize("routing", [Routing.PER_REQUEST, Routing.PER_CONNECTION])
@pytest.mark.parametrize("seed", range(SPLIT_SEEDS, SPLIT_SEEDS + SLOW_LINE_AND_SPLIT_SEEDS))
def test_random_instance_with_bulks_split_over_replicas_slow(seed, routing, measured_rows):
    compare(dataclasses.replace(random_instance(seed), routing=routing))
    compare(dataclasses.replace(random_measured_instance(seed, measured_rows), routing=routing))


def _bulk_chain(demand: float) -> SystemSpec:
    return SystemSpec(
        name="s", tasks=[Task(name="a", variants=[Variant(name="av", accuracy=0.9, memory_gb=4)]),
                         Task(name="b", variants=[Variant(name="bv", accuracy=0.9, memory_gb=4)])],
        edges=[Edge(source="a", target="b", factor=10.0)], slo=Slo(latency_ms=100.0), demand_rps=demand)


BULK_POINTS = [("av", "1g.10gb", 1, 2, 5.0, 400.0), ("bv", "1g.10gb", 1, 1, 2.0, 500.0)]


@pytest.mark.parametrize("routing", list(Routing))
def test_a_fan_out_bulk_split_over_replicas_by_routing(routing):
    # tests/planner/test_exhaustive.py works these out: 3 slices per request, 4 per connection or whole.
    compare(_instance([_bulk_chain(50)], _store(BULK_POINTS), levels=10, batches=(1, 2), routing=routing))


@pytest.mark.parametrize("routing", [Routing.PER_REQUEST, Routing.PER_CONNECTION])
def test_a_pool_too_small_plans_whole_bulks_and_says_so(routing):
    instance = _instance([_bulk_chain(500)], _store(BULK_POINTS), levels=10, batches=(1, 2), routing=routing)
    compare(instance)
    plan = solve.plan(instance.systems, instance.pool, instance.store, instance.features, options_for(instance))
    assert not plan.fully_served and plan.routing is routing
    assert all(t.share_base_rps == 0 for t in plan.tasks)


def test_a_plan_serving_all_takes_bulk_shares_of_the_least_demand():
    instance = _instance([_bulk_chain(50)], _store(BULK_POINTS), levels=10, batches=(1, 2),
                         routing=Routing.PER_REQUEST)
    plan = solve.plan(instance.systems, instance.pool, instance.store, instance.features, options_for(instance))
    assert plan.fully_served and plan.task("s", "b").share_base_rps == pytest.approx(500.0)
    assert plan.task("s", "b").arrival_dispersion == pytest.approx(21.0)


# Pools of 1-4 GPUs under the default options (above 2 GPUs they tier options and prune busy tasks), and
# the same instances with the tiering on everywhere (--exact-up-to 0), so the inexact reductions are
# exercised wherever the line sits; without the queueing wait (the default) and with it.
LINE_SEEDS = int(os.environ.get("TESSERA_EXHAUSTIVE_LINE_SEEDS", "8"))


def _on_gpus(instance: Instance, gpus: int, exact_up_to: int | None, queueing: bool) -> Instance:
    return dataclasses.replace(instance, pool=Pool(gpu=instance.pool.gpu, gpus=gpus), exact_up_to_gpus=exact_up_to,
                               queueing=queueing)


LINES = [pytest.param(None, False, id="defaults"), pytest.param(0, False, id="tiers-everywhere"),
         pytest.param(None, True, id="queueing"), pytest.param(0, True, id="queueing-tiers-everywhere")]


@pytest.mark.parametrize("exact_up_to, queueing", LINES)
@pytest.mark.parametrize("seed", range(LINE_SEEDS))
def test_random_instance_on_one_to_four_gpus(seed, exact_up_to, queueing):
    compare(_on_gpus(random_instance(seed), 1 + seed % 4, exact_up_to, queueing))


@pytest.mark.parametrize("exact_up_to, queueing", LINES)
@pytest.mark.parametrize("seed", range(LINE_SEEDS))
def test_random_instance_with_measured_a100_profiles_on_one_to_four_gpus(seed, exact_up_to, queueing, measured_rows):
    compare(_on_gpus(random_measured_instance(seed, measured_rows), 1 + seed % 4, exact_up_to, queueing))


TIERS_LOSE = {18, 23}  # the measured seeds below, where the option tiers lose
TIERS_LOSE_QUEUEING = {30}  # and where they lose with the queueing wait


@pytest.mark.slow
@pytest.mark.parametrize("exact_up_to, queueing", LINES)
@pytest.mark.parametrize("seed", range(LINE_SEEDS, LINE_SEEDS + SLOW_LINE_AND_SPLIT_SEEDS))
def test_random_instance_on_one_to_four_gpus_slow(seed, exact_up_to, queueing, measured_rows):
    compare(_on_gpus(random_instance(seed), 1 + seed % 4, exact_up_to, queueing))
    if seed not in (TIERS_LOSE_QUEUEING if queueing else TIERS_LOSE):
        compare(_on_gpus(random_measured_instance(seed, measured_rows), 1 + seed % 4, exact_up_to, queueing))


# Known losses of the option tiers (least-load tier ratio 2) above the exact line: the exact model
# finds these but takes 17.5 CPU s on the benchmark's 4 GPUs (target 10), so the line stays at 2
# (docs/planner.md). Strict: a tiering that loses nothing here makes them pass, and then fail as xpass.
@pytest.mark.xfail(strict=True, reason="option tiers: 2 GPUs / 8 slices where 1 / 6 serve (3 GPUs), "
                                       "4 slices where 3 serve (4 GPUs)")
@pytest.mark.parametrize("seed", [18, 23])
def test_option_tiers_above_the_exact_line_lose_on_these_measured_instances(seed, measured_rows):
    compare(_on_gpus(random_measured_instance(seed, measured_rows), 1 + seed % 4, None, False))


# The exact model (--exact-up-to 3) serves this one as the exhaustive search does.
@pytest.mark.xfail(strict=True, reason="option tiers with the queueing wait: served 0.1970 where 0.1983 can be (3 GPUs)")
@pytest.mark.parametrize("seed", sorted(TIERS_LOSE_QUEUEING))
def test_option_tiers_above_the_exact_line_lose_with_the_queueing_wait_on_this_measured_instance(seed, measured_rows):
    compare(_on_gpus(random_measured_instance(seed, measured_rows), 1 + seed % 4, None, True))
