"""The twin check: every server of a placement simulated for one hour before it is returned.

The conditions are the predictors' training conditions (Poisson arrivals for an
hour, the client's outstanding-request cap, --max-lora-rank as placed), so a
disagreement means the predictors erred, not that the question changed. Each
adapter's served fraction counts the requests that arrived before the last
``SERVED_GRACE_S`` of the hour: a request arriving in the last seconds cannot
finish inside the hour, and an adapter with two requests an hour would
otherwise fail its bound by chance; a cold adapter locked out of the slots
fails it whatever the grace. Each adapter's p99 time to first token is taken
over the same requests, one that never got its first token counting as
infinitely slow. Requests are drawn here and replayed as a trace,
so every request's adapter and arrival time are known.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from tessera.planner.input_files import InputError
from tessera.planner.twin import engine
from tessera.planner.twin.files import MAX_ARRIVALS
from tessera.planner.twin.profile import ServerProfile
from tessera.planner.twin.sim import OUTSTANDING_REQUEST_CAP, ServerConfig, simulate
from tessera.planner.twin.workload import Workload, generate_requests

from .model import AdapterDemand, Placement, ServiceBound, TwinCheck

CHECK_HOUR_S = 3600.0
SERVED_GRACE_S = 60.0
# A server's hour is simulated only within the twin's limit on one run (`tessera twin run`): about
# 556 req/s, ten times what the step model lets any server serve (bound.py). Beyond it the drawn
# requests alone take gigabytes (an adapter at 1e7 req/s: 3.6e10 requests, 134 GiB of adapter
# indices), to show what the step model already proves: the server starves.
MAX_CHECKED_RATE_RPS = MAX_ARRIVALS / CHECK_HOUR_S


class TwinCheckTooLarge(InputError):
    """A server offered more than the twin check simulates: ``adapter`` names its hottest adapter,
    ``strategy`` the placement it is in."""

    def __init__(self, message: str, adapter: str, strategy: str) -> None:
        super().__init__(message)
        self.adapter = adapter
        self.strategy = strategy


def require_checkable(placement: Placement, adapters: Sequence[AdapterDemand]) -> None:
    """Refuse, before anything is simulated, a placement with a server the twin check cannot simulate."""
    rates = {a.name: a.rate_rps for a in adapters}
    for server in placement.servers:
        if server.rate_rps > MAX_CHECKED_RATE_RPS:
            hottest = max(server.adapters, key=lambda name: rates[name])
            raise TwinCheckTooLarge(
                f"{rates[hottest]:.3g} req/s ({hottest!r}): the twin check would simulate server {server.index} of "
                f"the {placement.strategy} placement at {server.rate_rps:.3g} req/s, "
                f"{server.rate_rps * CHECK_HOUR_S:.3g} requests in its hour, over the twin's limit of {MAX_ARRIVALS} "
                f"({MAX_CHECKED_RATE_RPS:.0f} req/s a server)", hottest, placement.strategy)


@dataclass(frozen=True)
class ServerCase:
    """What one worker needs to check one server (picklable)."""

    profile: ServerProfile
    adapters: tuple[AdapterDemand, ...]
    max_loras: int
    max_lora_rank: int
    bound: ServiceBound
    seed: int
    hour_s: float = CHECK_HOUR_S  # simulated time: an hour, unless a test needs less


def check_server(case: ServerCase) -> TwinCheck:
    started = time.perf_counter()
    ranks = np.array([a.rank for a in case.adapters])
    rates = np.array([a.rate_rps for a in case.adapters])
    config = ServerConfig(max_loras=case.max_loras, max_rank=case.max_lora_rank, outstanding_cap=OUTSTANDING_REQUEST_CAP)
    if case.profile.refuses_to_start(case.max_loras, case.max_lora_rank):
        return TwinCheck(starts=False, wall_s=time.perf_counter() - started)
    drawn = Workload(ranks=ranks, rates=rates, duration_s=case.hour_s)
    # lengths as the twin draws them (its calibrated spread); early stops are left to simulate()
    requests = generate_requests(drawn, np.random.default_rng([case.seed, 1]), 0.0, case.profile.lengths.sigma)
    trace = Workload(ranks=ranks, rates=rates, duration_s=case.hour_s, trace=requests.as_trace())
    result = simulate(trace, case.profile, config, seed=case.seed, keep_requests=True)
    assert result.state is not None and result.ttft_s is not None  # kept: keep_requests
    judged = requests.t < case.hour_s - SERVED_GRACE_S
    served = _served_fractions(result.state, judged, requests.adapter, len(case.adapters))
    ttft_p99_ms = _p99_ttft_ms(result.ttft_s, judged, requests.adapter, len(case.adapters))
    bound = case.bound
    under = () if bound.min_served_fraction is None else tuple(
        a.name for a, f in zip(case.adapters, served) if f < bound.min_served_fraction)
    slow = () if bound.p99_ttft_ms is None else tuple(
        a.name for a, t in zip(case.adapters, ttft_p99_ms) if t > bound.p99_ttft_ms)
    return TwinCheck(
        starts=True, ratio=result.ratio, starved=result.starved, throughput_tok_s=result.throughput_tok_s,
        offered_tok_s=result.offered_tok_s, min_served_fraction=float(np.nanmin(served, initial=1.0)),
        adapters_under_bound=under, ttft_p99_ms=float(np.nanmax(ttft_p99_ms, initial=0.0)), adapters_over_ttft=slow,
        wall_s=time.perf_counter() - started)


def _served_fractions(state: np.ndarray, judged: np.ndarray, adapter_of: np.ndarray, n_adapters: int) -> np.ndarray:
    arrived = np.bincount(adapter_of[judged], minlength=n_adapters)
    finished = np.bincount(adapter_of[judged & (state == engine.FINISHED)], minlength=n_adapters)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(arrived > 0, finished / np.maximum(arrived, 1), np.nan)


def _p99_ttft_ms(ttft_s: np.ndarray, judged: np.ndarray, adapter_of: np.ndarray, n_adapters: int) -> np.ndarray:
    """Each adapter's p99 time to first token over its judged requests; a request that never got
    its first token counts as infinitely slow (NaN for an adapter without judged requests)."""
    waits = np.where(np.isnan(ttft_s[judged]), np.inf, ttft_s[judged].astype(np.float64) * 1000.0)
    owners = adapter_of[judged]
    order = np.argsort(owners, kind="stable")
    groups = np.split(waits[order], np.cumsum(np.bincount(owners, minlength=n_adapters))[:-1])
    return np.array([np.percentile(g, 99, method="higher") if g.size else np.nan for g in groups])


def check_placement(placement: Placement, adapters: Sequence[AdapterDemand], profile: ServerProfile, bound: ServiceBound,
                    seed: int = 0, workers: int = 1, progress: Callable[[int], None] | None = None,
                    hour_s: float = CHECK_HOUR_S) -> Placement:
    """The placement with every server's twin check filled in; ``progress(1)`` after each server."""
    require_checkable(placement, adapters)
    by_name = {a.name: a for a in adapters}
    cases = [ServerCase(profile, tuple(by_name[n] for n in s.adapters), s.max_loras, s.max_lora_rank, bound,
                        seed + s.index, hour_s) for s in placement.servers]
    started = time.perf_counter()
    checks: list[TwinCheck] = []
    pool = ProcessPoolExecutor(workers) if workers > 1 and len(cases) > 1 else None
    try:
        for check in (pool.map(check_server, cases) if pool else map(check_server, cases)):
            checks.append(check)
            if progress:
                progress(1)
    finally:
        if pool:
            pool.shutdown()
    servers = tuple(replace(s, twin=c) for s, c in zip(placement.servers, checks))
    return replace(placement, servers=servers, twin_s=time.perf_counter() - started)
