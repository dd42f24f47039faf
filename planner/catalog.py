"""GPU catalog: products, their MIG profiles, valid whole-GPU layouts, MPS degrees.

Source: NVIDIA's MIG user guide (supported profiles and placements for A100,
H100 and H200). A GPU has 8 memory slices and 7 compute slices; an instance
of a profile occupies `memory_slices` consecutive memory slices starting at
one of its `starts`, and `compute_slices` compute slices. Valid layouts are
derived from those placement rules, never listed by hand.
"""

from __future__ import annotations

from functools import cache
from typing import Iterator

from pydantic import BaseModel, ConfigDict, Field

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
WHOLE_GPU_PROFILE_SLICES = 7


class MigProfile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    compute_slices: int = Field(ge=1, le=COMPUTE_SLICES)
    memory_slices: int = Field(ge=1, le=MEMORY_SLICES)
    memory_gb: float = Field(gt=0)
    max_count: int = Field(ge=1)
    starts: tuple[int, ...]

    def occupies(self, start: int) -> range:
        return range(start, start + self.memory_slices)


class GpuProduct(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    memory_gb: float
    sm_count: int
    memory_bandwidth_gbs: float
    fp16_dense_tflops: float
    profiles: tuple[MigProfile, ...]
    mps_degrees: tuple[int, ...] = (1, 2, 3, 4)

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise KeyError(f"{self.name} has no MIG profile {name!r} (known: {known})")

    @property
    def whole_gpu_profile(self) -> MigProfile:
        return next(p for p in self.profiles if p.compute_slices == WHOLE_GPU_PROFILE_SLICES)

    def sm_share(self, profile: MigProfile) -> int:
        """SMs of an instance: a compute slice is 1/7 of the GPU's MIG-usable SMs."""
        return (self.sm_count // COMPUTE_SLICES) * profile.compute_slices

    def bandwidth_share(self, profile: MigProfile) -> float:
        return self.memory_bandwidth_gbs * profile.memory_slices / MEMORY_SLICES


Layout = tuple[tuple[str, int], ...]
"""A whole-GPU MIG layout: sorted (profile name, instance count) pairs."""


def _profiles(names_and_memory: list[tuple[str, float]]) -> tuple[MigProfile, ...]:
    shapes = [  # (compute, memory slices, max count, starts), the guide's rows in order
        (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
        (1, 2, 4, (0, 2, 4, 6)),
        (2, 2, 3, (0, 2, 4)),
        (3, 4, 2, (0, 4)),
        (4, 4, 1, (0,)),
        (7, 8, 1, (0,)),
    ]
    return tuple(
        MigProfile(name=name, compute_slices=c, memory_slices=m, memory_gb=gb, max_count=n, starts=s)
        for (name, gb), (c, m, n, s) in zip(names_and_memory, shapes, strict=True)
    )


CATALOG: dict[str, GpuProduct] = {
    gpu.name: gpu
    for gpu in (
        GpuProduct(
            name="A100-40GB", memory_gb=40, sm_count=108, memory_bandwidth_gbs=1555, fp16_dense_tflops=312,
            profiles=_profiles([("1g.5gb", 4.75), ("1g.10gb", 9.75), ("2g.10gb", 9.75),
                                ("3g.20gb", 19.62), ("4g.20gb", 19.62), ("7g.40gb", 39.38)]),
        ),
        GpuProduct(
            name="A100-80GB", memory_gb=80, sm_count=108, memory_bandwidth_gbs=2039, fp16_dense_tflops=312,
            profiles=_profiles([("1g.10gb", 9.75), ("1g.20gb", 19.62), ("2g.20gb", 19.62),
                                ("3g.40gb", 39.38), ("4g.40gb", 39.38), ("7g.80gb", 79.25)]),
        ),
        GpuProduct(
            name="H100-80GB", memory_gb=80, sm_count=132, memory_bandwidth_gbs=3350, fp16_dense_tflops=989,
            profiles=_profiles([("1g.10gb", 9.75), ("1g.20gb", 19.62), ("2g.20gb", 19.62),
                                ("3g.40gb", 39.38), ("4g.40gb", 39.38), ("7g.80gb", 79.25)]),
        ),
        GpuProduct(
            name="H200-141GB", memory_gb=141, sm_count=132, memory_bandwidth_gbs=4800, fp16_dense_tflops=989,
            profiles=_profiles([("1g.18gb", 16.5), ("1g.35gb", 32.5), ("2g.35gb", 32.5),
                                ("3g.71gb", 70.0), ("4g.71gb", 70.0), ("7g.141gb", 140.0)]),
        ),
    )
}


def gpu_product(name: str) -> GpuProduct:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown GPU product {name!r} (known: {', '.join(CATALOG)})") from None


def _placements(profiles: tuple[MigProfile, ...]) -> Iterator[tuple[MigProfile, ...]]:
    """Every set of instances that fits on one GPU, as placed profiles in start order."""

    def extend(first_free_start: int, used: frozenset[int], compute: int,
               chosen: tuple[MigProfile, ...]) -> Iterator[tuple[MigProfile, ...]]:
        yield chosen
        for start in range(first_free_start, MEMORY_SLICES):
            for profile in profiles:
                if start not in profile.starts or compute + profile.compute_slices > COMPUTE_SLICES:
                    continue
                cells = set(profile.occupies(start))
                if cells & used:
                    continue
                yield from extend(start + 1, used | cells, compute + profile.compute_slices,
                                  chosen + (profile,))

    yield from extend(0, frozenset(), 0, ())


@cache
def valid_layouts(gpu_name: str) -> tuple[Layout, ...]:
    """All distinct non-empty MIG layouts the placement rules allow on this GPU."""
    gpu = gpu_product(gpu_name)
    layouts = set()
    for placed in _placements(gpu.profiles):
        if not placed:
            continue
        counts: dict[str, int] = {}
        for profile in placed:
            counts[profile.name] = counts.get(profile.name, 0) + 1
        if all(counts[p.name] <= p.max_count for p in gpu.profiles if p.name in counts):
            layouts.add(tuple(sorted(counts.items())))
    return tuple(sorted(layouts, key=lambda layout: (-layout_compute_slices(gpu, layout), layout)))


def layout_compute_slices(gpu: GpuProduct, layout: Layout) -> int:
    return sum(gpu.profile(name).compute_slices * count for name, count in layout)


def layout_name(layout: Layout) -> str:
    """A stable, label-safe name such as `1g.10gbx1.3g.40gbx2` for mig-parted configs."""
    return ".".join(f"{name}x{count}" for name, count in layout)
