"""The stage latency model the planner plans with, stated once.

A task's stage is served by segments, each running `mps` server processes
that take batches of `batch` requests. Latencies are the profile's batch
latency (its p99 where measured). A request arriving at a process:

1. waits for its batch to fill: at most (batch - 1) / (arrival rate of that
   process); a busy process fills the next batch while the current one runs,
   so this wait overlaps with
2. the batch in progress (at most one batch latency), and then
3. runs in its own batch (one batch latency).

So stage latency = batch latency + max(batch latency, batch formation time).
A task's latency budget must hold both terms, which gives two linear
conditions for a budget B: 2 x batch latency <= B, and the load routed to the
segment must be high enough that batches fill in time:
load per segment >= mps x (batch - 1) / (B - batch latency).

Segments are also never loaded above 1 / (1 + headroom) of their profiled
throughput, which keeps the queue in front of a busy process bounded.
"""

from __future__ import annotations

import math

MS_PER_S = 1000.0


def stage_latency_ms(batch_latency_ms: float, batch: int, mps: int, load_per_segment_rps: float) -> float:
    """Worst-case latency of one request through a segment at the given load."""
    if batch == 1:
        return 2 * batch_latency_ms
    if load_per_segment_rps <= 0:
        return math.inf
    per_process_rps = load_per_segment_rps / mps
    formation_ms = (batch - 1) / per_process_rps * MS_PER_S
    return batch_latency_ms + max(batch_latency_ms, formation_ms)


def min_segment_load_rps(batch_latency_ms: float, batch: int, mps: int, budget_ms: float) -> float:
    """The least load per segment that fills its batches within the budget."""
    if batch == 1:
        return 0.0
    slack_ms = budget_ms - batch_latency_ms
    if slack_ms <= 0:
        return math.inf
    return mps * (batch - 1) * MS_PER_S / slack_ms


def fits_budget(batch_latency_ms: float, budget_ms: float) -> bool:
    return 2 * batch_latency_ms <= budget_ms
