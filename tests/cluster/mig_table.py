"""The MIG-manager stand-in's own table of MIG profiles and placements.

Deliberately independent of tessera's GPU catalog (tessera.planner.catalog):
the stand-in plays the hardware, so it must be able to refuse a layout the
product wrongly thinks valid. Facts follow NVIDIA's MIG user guide: memory in
eighths (slices 0..7), compute in sevenths; a profile may start only at the
listed memory slices.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    memory_slices: int
    compute_slices: int
    starts: tuple[int, ...]
    max_count: int


# Shapes by position in each family's name list below.
SHAPES = (
    Shape(1, 1, (0, 1, 2, 3, 4, 5, 6), 7),  # 1g
    Shape(2, 1, (0, 2, 4, 6), 4),           # 1g with double memory
    Shape(2, 2, (0, 2, 4), 3),              # 2g
    Shape(4, 3, (0, 4), 2),                 # 3g
    Shape(4, 4, (0,), 1),                   # 4g
    Shape(8, 7, (0,), 1),                   # 7g
)

FAMILY_PROFILES = {
    "A100-40GB": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H200-141GB": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}

# GPU feature discovery's nvidia.com/gpu.product values -> family, total MiB.
PRODUCTS = {
    "NVIDIA-A100-SXM4-40GB": ("A100-40GB", 40960),
    "NVIDIA-A100-SXM4-80GB": ("A100-80GB", 81920),
    "NVIDIA-H100-80GB-HBM3": ("H100-80GB", 81559),
    "NVIDIA-H200": ("H200-141GB", 143771),
}


class LayoutRefused(ValueError):
    """The hardware would refuse this layout (what mig-parted reports as failed)."""


def profiles(product: str) -> dict[str, Shape]:
    if product not in PRODUCTS:
        raise LayoutRefused(f"GPU product {product!r} is not MIG-capable in the stand-in's table")
    return dict(zip(FAMILY_PROFILES[PRODUCTS[product][0]], SHAPES))


def profile_memory_mib(product: str, profile: str) -> int:
    return PRODUCTS[product][1] * profiles(product)[profile].memory_slices // 8


def place(product: str, mig_devices: dict[str, int]) -> list[tuple[str, int]]:
    """Returns (profile, start slice) for every instance, or raises LayoutRefused.

    Valid when the multiset of instances fits at allowed starts without two
    instances sharing a memory slice, and compute slices add up to at most 7.
    """
    table = profiles(product)
    wanted: list[str] = []
    for profile, count in mig_devices.items():
        if profile not in table:
            raise LayoutRefused(f"unknown MIG profile {profile!r} for {product}")
        if not isinstance(count, int) or count < 0:
            raise LayoutRefused(f"bad count {count!r} for {profile}")
        if count > table[profile].max_count:
            raise LayoutRefused(f"{count} x {profile} exceeds the maximum of {table[profile].max_count}")
        wanted += [profile] * count
    if sum(table[p].compute_slices for p in wanted) > 7:
        raise LayoutRefused(f"{dict(Counter(wanted))} needs more than 7 compute slices")
    # Biggest first keeps the search small; a GPU holds at most 7 instances.
    wanted.sort(key=lambda p: -table[p].memory_slices)
    placement = _search(table, wanted, used=frozenset())
    if placement is None:
        raise LayoutRefused(f"no valid placement for {dict(Counter(wanted))} on {product}")
    return placement


def _search(table: dict[str, Shape], wanted: list[str], used: frozenset[int]):
    if not wanted:
        return []
    profile, rest = wanted[0], wanted[1:]
    shape = table[profile]
    for start in shape.starts:
        slices = frozenset(range(start, start + shape.memory_slices))
        if slices & used:
            continue
        tail = _search(table, rest, used | slices)
        if tail is not None:
            return [(profile, start), *tail]
    return None
