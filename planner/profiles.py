"""Profiles: batch latency and segment throughput per (variant, segment type, batch).

Three sources, in order of trust: a measurement (a profiler Job in the
cluster, or an imported CSV), a profile given in the system's spec, and the
built-in analytical estimate. A lookup returns the most trusted one, and the
plan says which source every choice rests on.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)


class ProfileSource(str, Enum):
    MEASURED = "measured"
    GIVEN = "given"
    ESTIMATED = "estimated"

    @property
    def trust(self) -> int:
        return list(ProfileSource).index(self)


class SegmentType(BaseModel):
    """A GPU segment: one MIG instance of a product, shared by `mps` server processes."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    mig_profile: str
    mps: int = Field(default=1, ge=1)

    def __str__(self) -> str:
        return f"{self.mig_profile}" + (f" x{self.mps} MPS" if self.mps > 1 else "")


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True)

    latency_ms: float = Field(gt=0, description="Latency of one batch of one process.")
    throughput_rps: float = Field(gt=0, description="Requests/s of the whole segment.")
    source: ProfileSource
    p50_ms: float | None = Field(default=None, gt=0, description="A measurement's median batch latency, where it "
                                                                 "recorded one (latency_ms is its p99).")
    spread: float | None = Field(default=None, ge=1, description="An estimate's p99/p50, where the variant's "
                                                                 "measurements say it; None: the planner's default.")


def measured_spread(profiles: Iterable[Profile]) -> float | None:
    """The median p99/p50 of the measured batch latencies that recorded both (None without any).

    The median, not the largest: one noisy configuration should not scale
    every estimate of the variant."""
    ratios = sorted(p.latency_ms / p.p50_ms for p in profiles
                    if p.source is ProfileSource.MEASURED and p.p50_ms is not None)
    if not ratios:
        return None
    middle = len(ratios) // 2
    return max(1.0, ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2)


ProfileKey = tuple[str, SegmentType, int]
"""(variant name, segment type, batch size). Variant names identify models."""


class ProfileStore:
    """Profiles from every source; lookups answer with the most trusted."""

    def __init__(self) -> None:
        self._profiles: dict[ProfileKey, Profile] = {}

    def add(self, variant: str, segment: SegmentType, batch: int, profile: Profile) -> None:
        key = (variant, segment, batch)
        current = self._profiles.get(key)
        if current is None or profile.source.trust <= current.source.trust:
            self._profiles[key] = profile

    def get(self, variant: str, segment: SegmentType, batch: int) -> Profile | None:
        return self._profiles.get((variant, segment, batch))

    def for_variant(self, variant: str) -> Iterable[tuple[SegmentType, int, Profile]]:
        for (name, segment, batch), profile in self._profiles.items():
            if name == variant:
                yield segment, batch, profile

    def items(self) -> Iterable[tuple[ProfileKey, Profile]]:
        return self._profiles.items()

    def __len__(self) -> int:
        return len(self._profiles)

    def __contains__(self, key: ProfileKey) -> bool:
        return key in self._profiles
