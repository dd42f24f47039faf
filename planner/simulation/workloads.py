"""Demand over time: bursty rate traces and the Poisson arrivals they drive.

A trace is a rate *shape*: a multiplier per time bin with mean 1. A system's
arrival rate in a bin is its planned demand (the spec's `demand_rps`) times
the multiplier, so one trace drives several systems of different sizes, and
a plan made for the trace's mean is the spec as written, one made for its
p95 rate the spec's demand times `trace.p95()`.

The built-in traces are fixed here, with their seeds, before any result was
computed from them (docs/serving-simulation.md lists the parameters):

- MMPP: a continuous-time Markov chain over demand levels (seconds to a
  minute), the burstiness of a shared front end.
- Diurnal with bursts: a day's sinusoid compressed into the trace's length
  (minutes to hours in a real day), with flash crowds on top (tens of
  seconds), several time scales in one trace.
- Replay: a recorded rate series from CSV (`time_s,rate`), resampled to the
  bin width and rescaled to mean 1.
- Azure LLM inference 2023 (`azure-conv`, `azure-code`): a real service's
  arrivals, one hour per service, counted per second (planner/data/; source,
  licence and what was changed in docs/serving-simulation.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Callable, cast

import numpy as np

from tessera.planner.input_files import InputError, csv_records, quote

BIN_S = 1.0


@dataclass(frozen=True)
class RateTrace:
    """A rate shape: `multiplier[i]` holds during [i * bin_s, (i + 1) * bin_s)."""

    name: str
    multiplier: np.ndarray
    bin_s: float = BIN_S

    @property
    def duration_s(self) -> float:
        return len(self.multiplier) * self.bin_s

    def p95(self) -> float:
        return float(np.percentile(self.multiplier, 95))

    def scaled_to_mean_one(self) -> "RateTrace":
        mean = float(self.multiplier.mean())
        if not mean > 0:
            raise ValueError(f"trace {self.name!r}: its mean rate is {mean}, not positive")
        return RateTrace(self.name, self.multiplier / mean, self.bin_s)


@dataclass(frozen=True)
class MmppParameters:
    """Levels of demand (relative) and how long each lasts on average.

    From a level the chain jumps to one of the others, chosen uniformly.
    """

    levels: tuple[float, ...] = (0.6, 1.0, 1.8)
    mean_dwell_s: tuple[float, ...] = (40.0, 60.0, 15.0)
    seed: int = 14


@dataclass(frozen=True)
class DiurnalParameters:
    """A compressed day (one sinusoid over the trace) with flash crowds on top."""

    amplitude: float = 0.4  # trough 0.6, peak 1.4 of the daily mean
    bursts_per_hour: float = 30.0
    burst_height: tuple[float, float] = (0.5, 1.5)  # added to the multiplier, uniform in this range
    burst_duration_s: tuple[float, float] = (5.0, 30.0)  # uniform
    seed: int = 1914


def mmpp(duration_s: float, parameters: MmppParameters = MmppParameters(), bin_s: float = BIN_S) -> RateTrace:
    """A Markov-modulated rate, averaged per bin, scaled to mean 1."""
    rng = np.random.default_rng(parameters.seed)
    levels = np.asarray(parameters.levels, dtype=float)
    dwell = np.asarray(parameters.mean_dwell_s, dtype=float)
    if len(levels) != len(dwell) or len(levels) < 2:
        raise ValueError("MMPP: give at least two levels, each with its mean dwell time")
    bins = _bin_count(duration_s, bin_s)
    edges = np.arange(bins + 1) * bin_s
    # The level as a step function: change points and the level after each.
    times, states = [0.0], [int(rng.integers(len(levels)))]
    while times[-1] < edges[-1]:
        times.append(times[-1] + rng.exponential(dwell[states[-1]]))
        others = [s for s in range(len(levels)) if s != states[-1]]
        states.append(int(rng.choice(others)))
    area = _step_integral(np.asarray(times), levels[np.asarray(states)], edges)
    return RateTrace("mmpp", area / bin_s).scaled_to_mean_one()


def diurnal_with_bursts(duration_s: float, parameters: DiurnalParameters = DiurnalParameters(),
                        bin_s: float = BIN_S) -> RateTrace:
    rng = np.random.default_rng(parameters.seed)
    bins = _bin_count(duration_s, bin_s)
    centres = (np.arange(bins) + 0.5) * bin_s
    multiplier = 1 - parameters.amplitude * np.cos(2 * np.pi * centres / (bins * bin_s))
    bursts = rng.poisson(parameters.bursts_per_hour * bins * bin_s / 3600)
    for _ in range(bursts):
        start = rng.uniform(0, bins * bin_s)
        length = rng.uniform(*parameters.burst_duration_s)
        height = rng.uniform(*parameters.burst_height)
        multiplier += height * ((centres >= start) & (centres < start + length))
    return RateTrace("diurnal", multiplier).scaled_to_mean_one()


def constant(duration_s: float, bin_s: float = BIN_S) -> RateTrace:
    """Steady Poisson demand: the latency model's own assumption."""
    return RateTrace("constant", np.ones(_bin_count(duration_s, bin_s)), bin_s)


MAX_REPLAY_S = 86_400.0


def replay_csv(path: str | Path, bin_s: float = BIN_S) -> RateTrace:
    """A recorded series (`time_s,rate` with a header), held between samples, scaled to mean 1.

    Only the shape counts: rates are divided by the largest before anything adds them up, so
    any finite rates (1e308 req/s too) give a finite trace."""
    path = Path(path)
    times: list[float] = []
    rates: list[float] = []
    for line, record in csv_records(path, ("time_s", "rate")):
        if not any((cell or "").strip() for cell in record.values()):
            continue
        try:
            time_s, rate = float(record["time_s"]), float(record["rate"])
        except (TypeError, ValueError):
            raise InputError(f"{path}:{line}: expected two numbers time_s,rate, got {quote(list(record.values()))}") from None
        if not (math.isfinite(time_s) and math.isfinite(rate)) or rate < 0 or (times and time_s <= times[-1]):
            raise InputError(f"{path}:{line}: rates must be finite and >= 0, times finite and increasing, "
                             f"got {quote(list(record.values()))}")
        if time_s - (times[0] if times else time_s) > MAX_REPLAY_S:
            raise InputError(f"{path}:{line}: over the limit of {MAX_REPLAY_S:g} s")
        times.append(time_s)
        rates.append(rate)
    if len(times) < 2:
        raise InputError(f"{path}: a replay needs at least two samples")
    peak = max(rates)
    times_arr = np.asarray(times) - times[0]
    bins = _bin_count(times_arr[-1], bin_s)
    edges = np.arange(bins + 1) * bin_s
    area = _step_integral(times_arr, np.asarray(rates) / (peak or 1.0), edges)
    if not area.sum() > 0:
        raise InputError(f"{path}: rate: every rate is 0 before the last sample; a replay needs one above 0")
    return RateTrace(path.stem, area / bin_s, bin_s).scaled_to_mean_one()


AZURE_LLM_2023_SERVICES = ("conv", "code")
# The shortest window whose Poisson redraw keeps the recorded inter-arrival CV (docs/serving-simulation.md).
AZURE_SMOOTHING_S = 5.0


def azure_llm_2023(service: str, duration_s: float, bin_s: float = BIN_S) -> RateTrace:
    """The first `duration_s` of the hour recorded of Azure's LLM inference `service` (2023), scaled to mean 1.

    The rate is the per-second count averaged over AZURE_SMOOTHING_S: the counts hold the recording's own
    Poisson noise, which arrivals drawn from them would add a second time. Longer than the hour is refused
    rather than repeated: a repeat would be a trace nobody recorded."""
    if service not in AZURE_LLM_2023_SERVICES:
        raise ValueError(f"Azure LLM trace 2023: unknown service {service!r}, use one of {AZURE_LLM_2023_SERVICES}")
    name = f"azure-{service}"
    data = resources.files("tessera.planner").joinpath("data", f"azure_llm_2023_{service}.csv")
    with resources.as_file(data) as path:
        hour = replay_csv(path, bin_s)
    bins = _bin_count(duration_s, bin_s)
    if bins > len(hour.multiplier):
        raise ValueError(f"trace {name!r} covers {hour.duration_s:g} s; asked for {duration_s:g} s")
    rate = _moving_average(hour.multiplier, max(1, round(AZURE_SMOOTHING_S / bin_s)))
    return RateTrace(name, rate[:bins], bin_s).scaled_to_mean_one()


def _moving_average(values: np.ndarray, width: int) -> np.ndarray:
    """Centred; at the ends over the part of the window inside the series."""
    window = np.ones(width)
    return np.convolve(values, window, mode="same") / np.convolve(np.ones_like(values), window, mode="same")


BUILT_IN: dict[str, Callable[[float], RateTrace]] = {
    "mmpp": mmpp, "diurnal": diurnal_with_bursts, "constant": constant,
    **{f"azure-{service}": partial(azure_llm_2023, service) for service in AZURE_LLM_2023_SERVICES},
}


def built_in(name: str, duration_s: float) -> RateTrace:
    try:
        return BUILT_IN[name](duration_s)
    except KeyError:
        raise ValueError(f"unknown trace {name!r}: use one of {sorted(BUILT_IN)} or a CSV file") from None


def poisson_arrivals(trace: RateTrace, mean_rps: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival times (s) of a Poisson process whose rate follows the trace."""
    counts = rng.poisson(trace.multiplier * mean_rps * trace.bin_s)
    starts = np.repeat(np.arange(len(counts)) * trace.bin_s, counts)
    times = starts + rng.random(starts.size) * trace.bin_s
    # Times are sorted between bins already; sorting within them is the rest.
    return np.sort(times, kind="stable")


def _bin_count(duration_s: float, bin_s: float) -> int:
    if not duration_s > 0:
        raise ValueError(f"a trace needs a positive duration, got {duration_s}")
    return max(1, int(round(duration_s / bin_s)))


def _step_integral(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Integral over each [edges[i], edges[i+1]) of the step function values[j] on [times[j], times[j+1])."""
    breaks = np.append(times, np.inf)
    cumulative = np.concatenate([[0.0], np.cumsum(values * np.diff(np.minimum(breaks, edges[-1])))])
    def area_up_to(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(times, t, side="right") - 1
        return cast(np.ndarray, cumulative[j] + values[j] * (t - times[j]))
    return np.diff(area_up_to(edges))
