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

Within a replica, a batch leaves when a process is free, with what has
queued (`when-free`, Triton's dynamic batcher, the planner's assumption that
a busy process fills its next batch), or when it is full or its first
request has waited the batching delay (`timer`, MLServer's adaptive
batching, which keeps cutting small batches under a backlog). Batches go to
the process that is free first (`earliest-free`) or to the processes in turn
(`round-robin`, MLServer's dispatcher over its parallel workers).

Batch latency spread: a batch's latency is its median (the profile) times a
lognormal factor with median 1 and p99/p50 = `p99_over_p50` (1.3 unless
swept). The profiles tessera has (ParvaGPU's CSVs, the estimator calibrated
on them) give one latency per batch, derived from throughput, so it is read
as the median.
"""

from __future__ import annotations

from enum import Enum
from typing import cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.latency import DEFAULT_CONNECTIONS

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Balancing(str, Enum):
    PER_CONNECTION = "per-connection"
    RANDOM = "random"


class Batcher(str, Enum):
    """When a replica's batch leaves (replica_kernel states both)."""

    TIMER = "timer"  # MLServer's adaptive batching: full, or the first request waited the delay
    WHEN_FREE = "when-free"  # Triton's dynamic batcher: when a process is free, with what has queued


class Dispatch(str, Enum):
    """Which of a replica's processes runs the next batch."""

    ROUND_ROBIN = "round-robin"  # MLServer's dispatcher over its parallel workers
    EARLIEST_FREE = "earliest-free"  # one queue shared by the processes


class Policies(BaseModel):
    model_config = ConfigDict(frozen=True)  # safe as a default argument

    balancing: Balancing = Balancing.PER_CONNECTION
    connections: int = Field(default=DEFAULT_CONNECTIONS, ge=1, description="Client connections to each task's Service.")
    batcher: Batcher = Batcher.WHEN_FREE
    dispatch: Dispatch = Dispatch.EARLIEST_FREE
    early_dropping: bool = False
    drop_margin_ms: float = Field(default=0.0, ge=0, description="Early dropping keeps this much budget in "
                                                                 "hand beyond the least time ahead.")
    p99_over_p50: float = Field(default=1.3, ge=1.0, description="Batch latency spread, lognormal.")
    hop_ms: float = Field(default=0.0, ge=0, description="Network and request handling before each stage's "
                                                         "batcher, outside the profiles.")
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
        return cast(np.ndarray, np.searchsorted(np.cumsum(weights), rng.random(count) * weights.sum(),
                                                side="right").clip(0, replicas - 1))
    pinned = rng.integers(replicas, size=policies.connections)
    return pinned[np.arange(count) % policies.connections]
