"""Synthetic adapter pools for benchmarks and tests, drawn deterministically from a seed.

Ranks from {8, 16, 32} (shares 50/30/20 %); rates skewed: Zipf over a random
permutation of the adapters with exponent ``skew`` (1.0: the hottest adapter
carries about 1/H(n) of the pool, 13% at 1,000 adapters), scaled to
``total_rps``. Both twin models: ``model`` is a twin profile name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import AdapterDemand, PlacementProblem, PoolLimits, ServiceBound

RANKS = (8, 16, 32)
RANK_SHARES = (0.5, 0.3, 0.2)


@dataclass(frozen=True)
class Scenario:
    adapters: int
    total_rps: float
    model: str
    skew: float = 1.0
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.model}-{self.adapters}a-{self.total_rps:g}rps-s{self.skew:g}-{self.seed}"


def draw_adapters(scenario: Scenario) -> tuple[AdapterDemand, ...]:
    rng = np.random.default_rng([scenario.seed, scenario.adapters])
    ranks = rng.choice(RANKS, size=scenario.adapters, p=RANK_SHARES)
    weights = 1.0 / np.arange(1, scenario.adapters + 1) ** scenario.skew
    rng.shuffle(weights)
    rates = scenario.total_rps * weights / weights.sum()
    return tuple(AdapterDemand(f"adapter-{i:04d}", int(r), float(x)) for i, (r, x) in enumerate(zip(ranks, rates)))


def problem_of(scenario: Scenario, bound: ServiceBound | None = None,
               limits: PoolLimits | None = None) -> PlacementProblem:
    return PlacementProblem(adapters=draw_adapters(scenario), model=scenario.model, bound=bound or ServiceBound(),
                            limits=limits or PoolLimits(), name=scenario.name)
