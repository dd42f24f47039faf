"""Workloads for the twin: adapters (rank, rate), duration, request lengths.

Arrivals are generated vectorised: either an independent Poisson process per
adapter, or (``n_arrivals`` given) exactly that many arrivals, which is the
Poisson process conditioned on its count: uniform times, adapters drawn in
proportion to their rates. A trace (times, adapters, lengths) can be replayed
instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

MAX_PROMPT = 1024
MAX_TOTAL = 2048
# Times in the server (s) over which adapters count as active: a short request's,
# a typical one's, and a queued one's under load.
ACTIVE_TAUS = (2.0, 8.0, 30.0)

# The --max-lora-rank values vLLM 0.8.5 starts with: `possible_max_ranks` in LoRAConfig.__post_init__
# (vllm/config.py); any other value stops the server at start with a ValueError. An adapter of a rank
# between them is served by the next one up, which sizes every slot's LoRA buffers.
VLLM_MAX_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def server_max_lora_rank(adapter_rank: int) -> int:
    """The --max-lora-rank a server needs for adapters up to this rank: the smallest vLLM accepts at or above it."""
    for allowed in VLLM_MAX_LORA_RANKS:
        if allowed >= adapter_rank:
            return allowed
    raise ValueError(f"LoRA rank {adapter_rank} is above the largest --max-lora-rank vLLM accepts, "
                     f"{VLLM_MAX_LORA_RANKS[-1]}")


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]


@dataclass(frozen=True)
class Trace:
    """Requests to replay instead of drawing them, one entry each (in any order of arrival)."""

    t: ArrayLike  # arrival time, s
    adapter: ArrayLike  # index of the workload's adapter
    prompt: ArrayLike  # prompt tokens
    output: ArrayLike  # max_tokens: output tokens unless the request stops early


@dataclass
class Workload:
    ranks: np.ndarray  # int per adapter
    rates: np.ndarray  # requests/s per adapter
    duration_s: float = 3600.0
    n_arrivals: int | None = None  # replay an actual arrival count
    mean_input: float = 222.8
    mean_output: float = 199.9
    sigma: float | None = None  # lognormal shape; None: the profile's calibrated spread
    trace: Trace | None = None  # replayed instead of drawn

    def __post_init__(self) -> None:
        self.ranks = np.asarray(self.ranks, dtype=np.int32)
        self.rates = np.asarray(self.rates, dtype=np.float64)
        if self.ranks.shape != self.rates.shape:
            raise ValueError("ranks and rates must have one entry per adapter")

    @property
    def n_adapters(self) -> int:
        return int(self.ranks.shape[0])

    @property
    def max_rank(self) -> int:
        return int(self.ranks.max())


def active_adapters(rates: np.ndarray) -> list[float]:
    """Expected adapters with a request in the server, per tau of ACTIVE_TAUS: each adapter
    is busy with probability 1 - exp(-rate x tau)."""
    return [float(np.sum(-np.expm1(-rates * tau))) for tau in ACTIVE_TAUS]


def _lognormal_lengths(rng: np.random.Generator, n: int, mean: float, sigma: float, lo: int,
                       hi: int) -> npt.NDArray[np.int32]:
    """Lognormal lengths clipped to [lo, hi], mean matched after clipping."""
    if n == 0:  # a server whose adapters are all idle: no request, and no mean to match
        return np.zeros(0, np.int32)
    z = rng.standard_normal(n)
    mu = np.log(mean) - sigma * sigma / 2
    for _ in range(30):  # fix the mean after clipping (monotone in mu)
        x = np.clip(np.exp(mu + sigma * z[:20000]), lo, hi)
        m = float(x.mean())
        if abs(m - mean) < 0.05:
            break
        mu += float(np.log(mean / m))
    lengths: npt.NDArray[np.int32] = np.clip(np.round(np.exp(mu + sigma * z)), lo, hi).astype(np.int32)
    return lengths


@dataclass(frozen=True)
class Requests:
    """A workload's requests in order of arrival, one entry each."""

    t: FloatArray  # arrival time, s
    adapter: IntArray
    prompt: IntArray  # prompt tokens
    max_tokens: IntArray
    output: IntArray  # output tokens actually produced: max_tokens, or fewer when the request stops early

    def as_trace(self) -> Trace:
        """These requests to replay (each up to its max_tokens; early stops are drawn again)."""
        return Trace(t=self.t, adapter=self.adapter, prompt=self.prompt, output=self.max_tokens)


def generate_requests(w: Workload, rng: np.random.Generator, eos_fraction: float = 0.0,
                      sigma: float = 0.6) -> Requests:
    """The workload's trace, or requests drawn from its rates and length model."""
    if w.trace is not None:
        t = np.asarray(w.trace.t, np.float64)
        order = np.argsort(t, kind="stable")
        t = t[order]
        ad = np.asarray(w.trace.adapter, np.int32)[order]
        p = np.asarray(w.trace.prompt, np.int32)[order]
        o = np.asarray(w.trace.output, np.int32)[order]
    else:
        if w.n_arrivals is None:
            counts = rng.poisson(w.rates * w.duration_s)
            ad = np.repeat(np.arange(w.n_adapters, dtype=np.int32), counts)
        else:
            ad = rng.choice(w.n_adapters, size=int(w.n_arrivals), p=w.rates / w.rates.sum()).astype(np.int32)
        n = int(ad.shape[0])
        t = rng.uniform(0.0, w.duration_s, size=n)
        order = np.argsort(t)
        t = t[order]
        ad = ad[order]
        p = _lognormal_lengths(rng, n, w.mean_input, w.sigma or sigma, 4, MAX_PROMPT)
        o = _lognormal_lengths(rng, n, w.mean_output, w.sigma or sigma, 1, MAX_TOTAL)
        o = np.minimum(o, MAX_TOTAL - p).astype(np.int32)
    actual = o
    if eos_fraction > 0:
        early = rng.random(o.shape[0]) < eos_fraction
        cut = np.maximum(1, (o * rng.random(o.shape[0])).astype(np.int32))
        actual = np.where(early, cut, o).astype(np.int32)
    return Requests(t=t, adapter=ad, prompt=p, max_tokens=o, output=actual)
