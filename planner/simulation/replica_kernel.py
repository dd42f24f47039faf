"""The event loop of the replicas' batch queues, compiled with numba.

One call runs every replica of one stage. A replica's requests arrive in
time order; its batcher works in one of two ways. As MLServer's adaptive batcher
(`timer`): a batch opens at its first request and closes when it holds
`batch` requests or when that first request has waited the batching delay,
whichever is first, whether or not a process is free; the closed batch then goes to one of the replica's processes, in turn as
MLServer's dispatcher does (or to the earliest free one: one shared queue),
waits there first in first out, and runs for its batch latency. As Triton's
dynamic batcher (`when-free`): the batch leaves when a process is free, with
up to `batch` of the requests queued by then, waiting at most the batching
delay from its first request for more (so a backlog makes full batches). The events (an
arrival, a batch closing, a process freeing) happen in time order within a
replica, and replicas do not interact, so the loop walks each replica's
arrivals once: no event objects, no heap (a replica has a few
processes, so the earliest free one is a scan).

Early dropping (when enabled, `deadline` is finite): requests marked in
`dropped` were dropped on arrival (the engine decides that with
`tessera.planner.dropping.doomed`, the frontend's rule); when a batch starts,
its requests that it would finish after their deadline (the source request's
arrival + SLO - the least time the stages after this one need) are dropped
from it. Dropped requests get NaN as completion time.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def seed_kernel(seed: int) -> None:
    np.random.seed(seed)


@njit(cache=True)
def run_replicas(arrival: np.ndarray, deadline: np.ndarray, dropped: np.ndarray, offsets: np.ndarray, replica_ids: np.ndarray,
                 batch: np.ndarray, processes: np.ndarray, delay: np.ndarray, latency: np.ndarray, sigma: float,
                 round_robin: bool, when_free: bool, done: np.ndarray, busy_s: np.ndarray) -> None:
    """Fill done[i] (completion time or NaN) for requests grouped by replica.

    arrival/deadline/dropped: per request, grouped by replica (offsets[r]..offsets[r+1]
    belong to replica_ids[r]) and sorted by time within a group.
    latency[replica, n]: median batch latency of n requests. sigma: the
    lognormal spread of one batch's latency. round_robin: batches go to the
    processes in turn (MLServer's dispatcher) instead of to the earliest free
    one (one shared queue). when_free: a batch leaves when its process is free
with what has queued (Triton's dynamic batcher), instead of when its timer
or size closes it. busy_s[replica] accumulates the processes' busy time.
    """
    free = np.zeros(int(processes.max()))
    members = np.empty(int(batch.max()), dtype=np.int64)
    for group in range(len(replica_ids)):
        replica = replica_ids[group]
        size, k, wait = batch[replica], processes[replica], delay[replica]
        for p in range(k):
            free[p] = -np.inf
        turn = 0
        i, end = offsets[group], offsets[group + 1]
        while i < end:
            if dropped[i]:
                done[i] = np.nan
                i += 1
                continue
            if round_robin:
                chosen = turn
                turn = (turn + 1) % k
            else:
                chosen = 0
                for p in range(1, k):
                    if free[p] < free[chosen]:
                        chosen = p
            close = arrival[i] + wait
            if when_free:
                close = max(close, free[chosen])
            count = 0
            while i < end and count < size and arrival[i] <= close:
                if dropped[i]:
                    done[i] = np.nan
                else:
                    members[count] = i
                    count += 1
                    if count == size:
                        close = arrival[i]
                i += 1
            start = max(close, free[chosen])
            kept = 0
            for m in range(count):
                if start + latency[replica, count] <= deadline[members[m]]:
                    members[kept] = members[m]
                    kept += 1
                else:
                    done[members[m]] = np.nan
            if kept == 0:
                continue
            took = latency[replica, kept] * math.exp(sigma * np.random.standard_normal())
            free[chosen] = start + took
            busy_s[replica] += took
            for m in range(kept):
                done[members[m]] = start + took


@njit(cache=True)
def fold_latest(origin: np.ndarray, done: np.ndarray, finish: np.ndarray) -> None:
    """finish[o] = the latest completion among o's requests; NaN once any of them was dropped."""
    for i in range(len(origin)):
        o = origin[i]
        if math.isnan(done[i]) or math.isnan(finish[o]):
            finish[o] = np.nan
        elif done[i] > finish[o]:
            finish[o] = done[i]
