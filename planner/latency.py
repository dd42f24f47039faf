"""The stage latency model the planner plans with, stated once.

A task's stage is served by segments, each running `mps` server processes
that take batches of `batch` requests. Latencies are p99 batch latencies: a
measured or given profile states its p99; an estimate is a median (the
estimator is calibrated on throughput-derived latencies), so it is scaled by
the batch latency's p99/p50 spread (p99_batch_latency_ms): the median of the
variant's measured p99/p50 where its measurements recorded both, 1 where
the estimate is corrected by (fitted to) measured p99s, else the planner's
`latency_spread`. A request
arriving at a process:

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

4. Queueing. A request may also wait behind earlier requests, and under
   fan-out they come in bulks: a parent batch of b requests with a factor f
   hands about f x b requests to the child at once. The p99 wait is the
   heavy-traffic (diffusion) bound for a queue whose arrivals have index of
   dispersion D (variance over mean of counts: 1 for Poisson, 1 + bulk size
   for Poisson-sized bulks): W99 = ln(100) / 2 x lam D / (mu (mu - lam)) at
   load lam on a segment of throughput mu, so Q99 = mu x W99 requests are
   ahead of a request at the p99. A batching server does not serve them one
   at a time: its `mps` processes take n = mps x batch requests per round,
   each round within one batch latency, so a request with Q ahead starts
   within the batch in progress and floor(Q / n) more rounds (exact for a
   whole Q: it is the (Q + 1)th in line, in round ceil((Q + 1) / n)). Its
   batch forms while it queues.

So stage latency = batch latency + max(batch formation time, batch latency x
(1 + floor(Q99 / n))). Beside the two conditions above, the wait gives a
most load per segment for a budget B: the budget holds k = floor((B - 2 x
batch latency) / batch latency) rounds beyond the two batches, so
Q99 < n (k + 1), a wait W99 below A = n (k + 1) / mu, which holds for
lam <= A mu^2 / (ln(100) / 2 x D + A mu), the mirror of the least load;
the two hold apart, so together they keep the stage within B. D = 0 turns
the wait off (the model before the simulation found it optimistic). Before
the rounds (issue 24), A was B - 2 x batch latency, as if the queue ahead
drained one request at a time after the batch in progress: at 42x the
examples' demand that planned 59 GPUs where 23-30 simulate within the SLO
(bench/results/queueing_truth.md).

5. Bulks split over replicas (`Routing`). A parent's bulk reaches the
   child's replicas, not one of them: a replica carrying the share s of the
   task's load sees bulks of about bulk x g(s), with g(s) = min(1, s) when
   each request is routed in proportion to planned capacity (per request,
   the frontend), and g(s) = min(1, max(1, q99(Binomial(k, s))) / k) behind
   a plain Service, whose k client connections are pinned to replicas at
   random (per connection: a replica holds at most k of them, a busy one up
   to the p99 of its count). The share is taken of a lower bound on the
   task's load (its least demand over the allowed variants, valid while the
   plan serves all demand), so a replica's most load is still a constant of
   its budget and bulk: the largest lam with
   lam (ln(100) / 2 x (1 + bulk x g(lam / base)) + A mu) <= A mu^2, found
   interval by interval of g. `ONE_REPLICA` lets a whole bulk land on every
   replica (safe for any routing; the model before the split).

Segments are also never loaded above 1 / (1 + headroom) of their profiled
throughput.
"""

from __future__ import annotations

import math
from enum import Enum
from functools import cache

from tessera.planner.profiles import Profile, ProfileSource

MS_PER_S = 1000.0


DEFAULT_CONNECTIONS = 16  # client connections to a task's Service (a gRPC channel pool, an HTTP keep-alive pool)


class Routing(str, Enum):
    """How a task's requests reach its replicas, which sets the share of a parent's bulk each replica sees."""

    ONE_REPLICA = "one-replica"  # no split: every replica may get a whole bulk (safe for any routing)
    PER_REQUEST = "per-request"  # each request to a replica in proportion to its planned load (the frontend)
    PER_CONNECTION = "per-connection"  # a Service: k connections pinned to replicas at random, round-robin over them


# p99 of an exponential tail whose mean is the diffusion's mean wait: ln(100) x mean, mean = lam D / (2 mu (mu - lam)).
P99_WAIT_FACTOR = math.log(100) / 2
# A queue ahead of exactly n (k + 1), the most load's, counts k rounds, and so does one a solver's tolerance above it
# (a ten-thousandth of a round): the rounds step, and a plan at its most load must not step over its budget.
ROUND_SLACK = 1e-4


def stage_latency_ms(batch_latency_ms: float, batch: int, mps: int, load_per_segment_rps: float,
                     throughput_rps: float = math.inf, dispersion: float = 0.0) -> float:
    """Worst-case (p99) latency of one request through a segment at the given load."""
    rounds = rounds_ahead(load_per_segment_rps, throughput_rps, dispersion, mps * batch)
    queued_ms = batch_latency_ms * (1 + rounds)
    return batch_latency_ms + max(batching_delay_ms(batch_latency_ms, batch, mps, load_per_segment_rps), queued_ms)


def rounds_ahead(load_per_segment_rps: float, throughput_rps: float, dispersion: float, round_requests: int) -> float:
    """Rounds of batches a request waits for beyond the batch in progress, at the p99 of the queue ahead:
    floor(Q99 / n) for Q99 = throughput x p99 wait and n = mps x batch (0 without queueing, inf past the
    throughput)."""
    wait_ms = queueing_wait_p99_ms(load_per_segment_rps, throughput_rps, dispersion)
    if wait_ms <= 0 or math.isinf(wait_ms):
        return wait_ms  # no queueing, or an overloaded segment
    return float(max(0, math.floor(wait_ms / MS_PER_S * throughput_rps / round_requests - ROUND_SLACK)))


def queue_allowance_s(batch_latency_ms: float, throughput_rps: float, budget_ms: float, round_requests: int) -> float:
    """The p99 wait W99 may reach for a stage to fit its budget: n (k + 1) / mu, k the whole rounds the
    budget holds beyond two batches (0 where two batches do not fit)."""
    spare_ms = budget_ms - 2 * batch_latency_ms
    if spare_ms < 0:
        return 0.0
    rounds = math.floor(spare_ms / batch_latency_ms * (1 + 1e-12))
    return round_requests * (rounds + 1) / throughput_rps


def batching_delay_ms(batch_latency_ms: float, batch: int, mps: int, load_per_segment_rps: float) -> float:
    """How long a request may wait for its batch: the batch in progress or the batch's formation."""
    if batch == 1:
        return batch_latency_ms
    if load_per_segment_rps <= 0:
        return math.inf
    per_process_rps = load_per_segment_rps / mps
    return max(batch_latency_ms, (batch - 1) / per_process_rps * MS_PER_S)


def queueing_wait_p99_ms(load_per_segment_rps: float, throughput_rps: float, dispersion: float) -> float:
    """The p99 wait behind earlier requests (0 without load or with dispersion 0)."""
    if load_per_segment_rps <= 0 or dispersion <= 0:
        return 0.0
    if load_per_segment_rps >= throughput_rps:
        return math.inf
    return (P99_WAIT_FACTOR * load_per_segment_rps * dispersion
            / (throughput_rps * (throughput_rps - load_per_segment_rps)) * MS_PER_S)


def max_segment_load_rps(batch_latency_ms: float, throughput_rps: float, dispersion: float, budget_ms: float,
                         round_requests: int) -> float:
    """The most load per segment whose p99 queueing wait still fits the budget beside the batch in progress
    and its own (in rounds of `round_requests` = mps x batch)."""
    if dispersion <= 0:
        return throughput_rps
    allowance_s = queue_allowance_s(batch_latency_ms, throughput_rps, budget_ms, round_requests)
    if allowance_s <= 0:
        return 0.0
    return allowance_s * throughput_rps ** 2 / (P99_WAIT_FACTOR * dispersion + allowance_s * throughput_rps)


def bulk_share(share: float, routing: Routing, connections: int = DEFAULT_CONNECTIONS) -> float:
    """The most of a bulk one replica sees, given its share of the task's load (g(s) above)."""
    if routing is Routing.ONE_REPLICA:
        return 1.0
    share = min(max(share, 0.0), 1.0)
    if routing is Routing.PER_REQUEST:
        return share
    return min(1.0, max(1, _connections_p99(connections, share)) / connections)


def replica_dispersion(bulk: float, load_per_replica_rps: float, base_rps: float, routing: Routing,
                       connections: int = DEFAULT_CONNECTIONS) -> float:
    """Index of dispersion of one replica's arrivals: 1 + its part of the bulk (a whole bulk without a base)."""
    share = 1.0 if base_rps <= 0 else bulk_share(load_per_replica_rps / base_rps, routing, connections)
    return arrival_dispersion(bulk * share)


def max_replica_load_rps(batch_latency_ms: float, throughput_rps: float, budget_ms: float, bulk: float,
                         base_rps: float, routing: Routing, connections: int = DEFAULT_CONNECTIONS, *,
                         round_requests: int) -> float:
    """The most load per replica whose p99 queueing wait fits the budget when its bulk share follows its load.

    The wait rises with the load and so does the share, so the loads that fit
    are an interval from 0; on each interval of shares where g is one
    expression its end is closed form (the quadratic of min(1, s), or the
    constant dispersion of a connection count).
    """
    whole = max_segment_load_rps(batch_latency_ms, throughput_rps, arrival_dispersion(bulk), budget_ms,
                                 round_requests)
    if routing is Routing.ONE_REPLICA or base_rps <= 0 or bulk <= 0:
        return whole
    allowance_s = queue_allowance_s(batch_latency_ms, throughput_rps, budget_ms, round_requests)
    if allowance_s <= 0:
        return 0.0
    a, mu = allowance_s, throughput_rps
    if routing is Routing.PER_REQUEST:
        # lam (c (1 + bulk lam / base) + A mu) = A mu^2, the positive root
        quadratic = P99_WAIT_FACTOR * bulk / base_rps
        linear = P99_WAIT_FACTOR + a * mu
        root = 2 * a * mu ** 2 / (linear + math.sqrt(linear ** 2 + 4 * quadratic * a * mu ** 2))
        return root if root <= base_rps else whole
    for low, high, count in _connection_intervals(connections):
        at_count = max_segment_load_rps(batch_latency_ms, throughput_rps,
                                        arrival_dispersion(bulk * max(1, count) / connections), budget_ms,
                                        round_requests)
        if at_count < low * base_rps:
            return low * base_rps * (1 - 1e-9)  # the shares below this interval's start fitted, none in it does
        if at_count < high * base_rps:
            return at_count
    # past the task's least load a replica may take all of it, so a whole bulk
    return whole if whole >= base_rps else base_rps * (1 - 1e-9)


@cache
def _connection_intervals(connections: int) -> tuple[tuple[float, float, int], ...]:
    """(from share, to share, the p99 connection count there) for shares in [0, 1]: where g is one constant."""
    intervals = []
    low = 0.0
    for count in range(connections + 1):
        high = _share_where_p99_exceeds(connections, count)
        if high > low:
            intervals.append((low, high, count))
            low = high
        if low >= 1.0:
            break
    return tuple(intervals)


def _share_where_p99_exceeds(connections: int, count: int) -> float:
    """The least share whose p99 connection count is above `count` (1 where none is)."""
    if count >= connections:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if _connections_p99(connections, middle) > count:
            high = middle
        else:
            low = middle
    return high


def _connections_p99(connections: int, share: float) -> int:
    """The p99 of how many of `connections` land on a replica that each picks with probability `share`."""
    total = 0.0
    for count in range(connections + 1):
        total += math.comb(connections, count) * share ** count * (1 - share) ** (connections - count)
        if total >= 0.99:
            return count
    return connections


def batch_spread(profile: Profile, default_spread: float) -> float:
    """The p99/p50 that makes a profile's batch latency a p99: 1 for a measured or given one (it states its
    p99), an estimate's own where its variant's measurements set it, else the default."""
    if profile.source is not ProfileSource.ESTIMATED:
        return 1.0
    return profile.spread if profile.spread is not None else default_spread


def p99_batch_latency_ms(profile: Profile, default_spread: float) -> float:
    """The p99 a profile's batch latency stands for: estimates are medians, scaled by their spread."""
    return profile.latency_ms * batch_spread(profile, default_spread)


def usable_load_rps(batch_latency_ms: float, throughput_rps: float, utilisation: float, dispersion: float,
                    budget_ms: float, round_requests: int) -> float:
    """The most load per segment: its throughput at the headroom's utilisation, or less where the p99
    queueing wait must fit the budget."""
    return min(throughput_rps * utilisation,
               max_segment_load_rps(batch_latency_ms, throughput_rps, dispersion, budget_ms, round_requests))


def arrival_dispersion(bulk: float) -> float:
    """Index of dispersion of Poisson arrivals of bulks whose size is Poisson with mean `bulk` (0: single)."""
    return 1.0 + bulk


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
