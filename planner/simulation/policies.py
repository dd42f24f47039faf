"""How requests are spread, dropped and timed: the simulation's policy choices.

Load balancing across a task's replicas:
- `per_connection` (what a Kubernetes Service gives): kube-proxy picks an
  endpoint uniformly at random when a connection opens, and a client keeps
  its connections open (HTTP keep-alive, gRPC channels), so every request on
  a connection goes to the same replica. Upstream clients hold `connections`
  connections to a task's Service and spread requests over them round-robin.
  With few connections per replica some replicas get two shares and others
  none.
- `random`: every request picks a replica at random in proportion to the
  load the plan routes to it: the optimistic bound (what a request-level
  balancer, such as a service mesh, would approach).

Batch latency spread: a batch's latency is its median (the profile) times a
lognormal factor with median 1 and p99/p50 = `p99_over_p50` (1.3 unless
swept). The profiles tessera has (ParvaGPU's CSVs, the estimator calibrated
on them) give one latency per batch, derived from throughput, so it is read
as the median.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
from pydantic import BaseModel, Field

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Balancing(str, Enum):
    PER_CONNECTION = "per-connection"
    RANDOM = "random"


class Policies(BaseModel):
    balancing: Balancing = Balancing.PER_CONNECTION
    connections: int = Field(default=16, ge=1, description="Client connections to each task's Service.")
    early_dropping: bool = False
    p99_over_p50: float = Field(default=1.3, ge=1.0, description="Batch latency spread, lognormal.")
    seed: int = 0

    @property
    def sigma(self) -> float:
        return float(np.log(self.p99_over_p50) / Z99)


def assign_replicas(count: int, weights: np.ndarray, policies: Policies, rng: np.random.Generator) -> np.ndarray:
    """The replica (an index into `weights`) of each of `count` requests in arrival order."""
    replicas = len(weights)
    if replicas == 1:
        return np.zeros(count, dtype=np.int64)
    if policies.balancing is Balancing.RANDOM:
        return np.searchsorted(np.cumsum(weights), rng.random(count) * weights.sum(), side="right").clip(0, replicas - 1)
    pinned = rng.integers(replicas, size=policies.connections)
    return pinned[np.arange(count) % policies.connections]
