"""Random small planning instances for the MILP-versus-exhaustive property test.

An instance is everything `plan()` takes: systems, pool, a filled profile
store, features and planner options. Instances are drawn from a seed, so a
failing seed reproduces exactly. Sizes stay within what the exhaustive search
handles quickly: 1-3 tasks, 1-3 variants, 1-4 segment types, 1-3 batch sizes,
1-2 GPUs, 3-10 budget levels.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tessera.planner.catalog import CATALOG
from tessera.planner.features import Features, all_feature_sets
from tessera.planner.latency import Routing
from tessera.planner.model import Edge, Pool, Slo, SystemSpec, Task, Variant
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

SHAPES = {
    1: [[]],
    2: [[("a", "b")]],
    3: [
        [("a", "b"), ("b", "c")],  # chain
        [("a", "b"), ("a", "c")],  # fork
        [("a", "c"), ("b", "c")],  # join: two sources
        [("a", "b"), ("a", "c"), ("b", "c")],  # triangle: paths of 2 and 3 tasks
    ],
}


@dataclass
class Instance:
    seed: int
    systems: list[SystemSpec]
    pool: Pool
    store: ProfileStore
    features: Features
    headroom: float
    budget_levels: int
    batches: tuple[int, ...]
    notes: list[str] = field(default_factory=list)
    queueing: bool = True  # the planner's default; hand-worked throughput-only instances turn it off
    routing: Routing = Routing.ONE_REPLICA  # how bulks reach replicas (split over them unless one-replica)
    exact_up_to_gpus: int | None = None  # None: the planner's default line

    def describe(self) -> str:
        lines = [f"seed {self.seed}: pool {self.pool.gpus} x {self.pool.gpu}, features {self.features.label}, "
                 f"headroom {self.headroom}, levels {self.budget_levels}, batches {self.batches}"]
        for system in self.systems:
            lines.append(system.model_dump_json(exclude_defaults=True))
        for variant in sorted({v.name for s in self.systems for t in s.tasks for v in t.variants}):
            for segment, batch, profile in sorted(self.store.for_variant(variant),
                                                  key=lambda x: (str(x[0]), x[1])):
                lines.append(f"  {variant} {segment.mig_profile} mps={segment.mps} b={batch}: "
                             f"lat={profile.latency_ms!r} thr={profile.throughput_rps!r}")
        return "\n".join(lines)


def random_instance(seed: int, systems: int | None = None) -> Instance:
    rng = random.Random(seed)
    gpu = CATALOG[rng.choice(sorted(CATALOG))]
    features = rng.choice([Features()] * 4 + all_feature_sets())
    batches = tuple(sorted(rng.sample([1, 2, 4, 8], rng.randint(1, 3))))
    if 1 not in batches and rng.random() < 0.8:
        batches = (1,) + batches[1:]
    if features.spatial_partitioning:
        pairs = [(p, k) for p in gpu.profiles for k in gpu.mps_degrees if k <= 2 or rng.random() < 0.3]
        segments = rng.sample(pairs, rng.randint(1, 4))
    else:
        segments = [(gpu.whole_gpu_profile, 1)]
    # without S every task needs whole GPUs of its own: mostly two of them
    pool = Pool(gpu=gpu.name, gpus=rng.randint(1, 2) if features.spatial_partitioning else rng.choice([1, 2, 2]))
    store = ProfileStore()
    n_systems = systems or (2 if rng.random() < 0.15 else 1)
    specs = []
    for s in range(n_systems):
        most = 3 if n_systems == 1 and (features.spatial_partitioning or rng.random() < 0.3) else 2
        tasks = rng.randint(1, most)
        specs.append(_random_system(rng, f"s{s}", tasks, gpu, segments, batches, store))
    # Priorities come from a stream of their own, so the rest of every seed's instance stays as it was.
    priorities = random.Random(seed + 1_000_003)
    specs = [spec.model_copy(update={"priority": "accuracy" if priorities.random() < 0.15 else "cost"})
             for spec in specs]
    return Instance(
        seed=seed, systems=specs, pool=pool, store=store, features=features,
        headroom=rng.choice([0.0, 0.1, 0.25]), budget_levels=rng.choice([3, 4, 5, 8, 10]), batches=batches,
    )


def _random_system(rng: random.Random, name: str, n_tasks: int, gpu, segments, batches, store) -> SystemSpec:
    names = "abc"[:n_tasks]
    shape = rng.choice(SHAPES[n_tasks])
    tasks = []
    min_latency = {}  # per task: the fastest 2 x batch latency of any profile
    typical_thr = []
    for t in names:
        variants = []
        for v in range(rng.randint(1, 3)):
            vname = f"{name}{t}{v}"
            memory = rng.choice([rng.uniform(1, 6)] * 7 + [rng.uniform(6, 20)] * 2 + [rng.uniform(20, 75)])
            variants.append(Variant(name=vname, accuracy=rng.uniform(0.5, 1.0), memory_gb=memory))
            speed = rng.uniform(0.3, 3.0)  # bigger is slower
            for profile, k in segments:
                for b in batches:
                    if rng.random() < 0.15:
                        continue  # not every point is profiled
                    share = 7 / profile.compute_slices
                    latency = speed * share ** rng.uniform(0.4, 1.0) * (4 + 2.5 * b) * (1 + 0.4 * (k - 1))
                    latency *= rng.uniform(0.8, 1.25)
                    throughput = k * b * 1000 / latency * rng.uniform(0.6, 1.0)
                    source = rng.choice([ProfileSource.GIVEN, ProfileSource.MEASURED, ProfileSource.ESTIMATED])
                    store.add(vname, SegmentType(gpu=gpu.name, mig_profile=profile.name, mps=k), b,
                              Profile(latency_ms=latency, throughput_rps=throughput, source=source))
                    min_latency[t] = min(min_latency.get(t, float("inf")), 2 * latency)
                    typical_thr.append(throughput)
        tasks.append(Task(name=f"{t}", variants=variants))
    edges = []
    for source, target in shape:
        upstream = next(task for task in tasks if task.name == source)
        by_variant = {v.name: rng.uniform(0.3, 3.0) for v in upstream.variants if rng.random() < 0.4}
        edges.append(Edge(source=source, target=target, factor=rng.uniform(0.3, 3.0), factor_by_variant=by_variant))
    fastest_path = max(
        (sum(min_latency.get(t, 50.0) for t in path) for path in _paths(names, shape)), default=50.0)
    tightness = rng.choice([0.8, 2.0, 3.0, 5.0, 10.0, 20.0])
    latency_slo = fastest_path * tightness * rng.uniform(0.9, 1.1)
    thr = sorted(typical_thr)[len(typical_thr) // 2] if typical_thr else 100.0
    demand = thr * rng.choice([0.05, 0.3, 1.0, 3.0, 10.0]) * rng.uniform(0.8, 1.2)
    accuracy_slo = rng.choice([1.0, rng.uniform(0.4, 0.9), rng.uniform(0.7, 1.0), rng.uniform(0.85, 1.0)])
    return SystemSpec(name=name, tasks=tasks, edges=edges, slo=Slo(latency_ms=latency_slo, accuracy=accuracy_slo),
                      demand_rps=demand)


def _paths(names: str, shape) -> list[list[str]]:
    targets = {t for _, t in shape}
    sources = [n for n in names if n not in targets]

    def walk(node):
        children = [t for s, t in shape if s == node]
        if not children:
            return [[node]]
        return [[node] + rest for c in children for rest in walk(c)]

    return [p for s in sources for p in walk(s)]


MEASURED_GPU = "A100-80GB"
MEASURED_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]


def random_measured_instance(seed: int, rows: list) -> Instance:
    """A random small instance whose profiles are real A100-80GB measurements (ParvaGPU).

    `rows` are the MeasuredRow objects of the measurement folder; each variant
    is one measured model, on 1-4 of its measured segment types (MPS <= 4)
    and 1-3 batch sizes up to 128. Accuracies, memory, SLOs and demand are
    drawn as in `random_instance`, scaled to the measured latencies.
    """
    rng = random.Random(seed)
    models = sorted({row.variant for row in rows})
    segments = sorted({(row.segment.mig_profile, row.segment.mps) for row in rows if row.segment.mps <= 4})
    chosen_segments = set(rng.sample(segments, rng.randint(1, 4)))
    batches = tuple(sorted(rng.sample(MEASURED_BATCHES, rng.randint(1, 3))))
    n_tasks = rng.randint(1, 3)
    shape = rng.choice(SHAPES[n_tasks])
    names = "abc"[:n_tasks]
    store = ProfileStore()
    tasks, fastest, throughputs = [], {}, []
    for t in names:
        variants = []
        for model in rng.sample(models, rng.randint(1, 2)):
            variants.append(Variant(name=model, accuracy=rng.uniform(0.5, 1.0), memory_gb=rng.uniform(1, 9)))
            for row in rows:
                if row.variant == model and (row.segment.mig_profile, row.segment.mps) in chosen_segments \
                        and row.batch in batches:
                    store.add(model, row.segment, row.batch, Profile(latency_ms=row.latency_ms,
                                                                     throughput_rps=row.throughput_rps,
                                                                     source=ProfileSource.MEASURED))
                    fastest[t] = min(fastest.get(t, float("inf")), 2 * row.latency_ms)
                    throughputs.append(row.throughput_rps)
        tasks.append(Task(name=t, variants=variants))
    edges = [Edge(source=s, target=t, factor=rng.uniform(0.3, 3.0)) for s, t in shape]
    slowest_path = max(sum(fastest.get(t, 50.0) for t in path) for path in _paths(names, shape))
    typical = sorted(throughputs)[len(throughputs) // 2] if throughputs else 100.0
    system = SystemSpec(
        name="s0", tasks=tasks, edges=edges,
        slo=Slo(latency_ms=slowest_path * rng.choice([0.8, 2.0, 3.0, 5.0, 10.0]) * rng.uniform(0.9, 1.1),
                accuracy=rng.choice([1.0, rng.uniform(0.4, 0.9), rng.uniform(0.7, 1.0)])),
        demand_rps=typical * rng.choice([0.05, 0.3, 1.0, 3.0, 10.0]) * rng.uniform(0.8, 1.2))
    return Instance(seed=seed, systems=[system], pool=Pool(gpu=MEASURED_GPU, gpus=rng.randint(1, 2)), store=store,
                    features=Features(), headroom=rng.choice([0.0, 0.1, 0.25]),
                    budget_levels=rng.choice([3, 4, 5, 8, 10]), batches=batches)
