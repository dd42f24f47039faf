"""Decide, for an AdapterPool with a demandSource: the per-adapter rates to place for, from one Prometheus reading.

Pure: the query's JSON answer (or why none came), the rates the placement in
force was made for (its placement ConfigMap) and the pool's windows in; the
rates to place for, the windows and what to say out. The rules are the
compound systems' (operator/demand/hysteresis.py, called per adapter, not
copied; docs/demand.md, "AdapterPools"):

- Unknown is not zero: an adapter without a series, or whose series is NaN,
  infinite or negative, keeps the rate it was placed for (before a first
  placement: its expectedRequestsPerSecond); a query that fails as a whole
  keeps every rate, and the last good placement serves on.
- Hysteresis per adapter, one window for the pool: an adapter read more than
  TOLERANCE above its placed rate is re-placed for at once; rates below
  are lowered only after every reading of the pool's stabilization window,
  by at most a step, and never below the window's peak share (the highest
  reading/placed ratio of the adapters below their rate); readings within
  TOLERANCE hold, so jitter re-places nothing.
- Rates below FLOOR_SHARE of the pool's mean rate count as that floor: a cold
  adapter reading 0 now and 0.01 next is not a 100% move each poll.
- An adapter with neither a prior nor a reading is placed at the median of the
  pool's known rates (the pool's typical adapter), and counted Unknown.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from tessera.operator.api import status as st
from tessera.operator.api.v1alpha1 import AdapterDemandStatus
from tessera.operator.demand import hysteresis as hy
from tessera.operator.demand.prometheus import Reading, Reason, unknown
from tessera.operator.demand.planning import source_query
from tessera.operator.demand.shown import ShownReading, shown_reading
from tessera.planner.adapter_pool import AdapterDemandQuery

FLOOR_SHARE = 0.01
"""A share of the pool's mean placed rate below which an adapter's rate counts as this floor."""


@dataclass(frozen=True)
class AdapterReadings:
    """One reading of a pool's demandSource: each adapter's requests/s, or why there was none."""

    rates: dict[str, float]
    """Adapter -> its finite, non-negative reading (adapters of the pool only)."""
    failure: Reading | None = None
    """The query failed as a whole (unreachable, timeout, error, rejected, not a vector): every rate Unknown."""
    ignored: int = 0
    """Series naming no adapter of the pool, a second series of one, or NaN, infinite or negative."""


@dataclass(frozen=True)
class PoolWindows:
    """The pool's hysteresis state (status.demand keeps it, so a restarted operator resumes the windows)."""

    below_since: datetime | None = None
    peak_ratio: float | None = None
    last_scale_up: datetime | None = None
    last_scale_down: datetime | None = None
    last_reading: datetime | None = None


@dataclass(frozen=True)
class RatesDecision:
    rates: dict[str, float]
    """Adapter -> the rate to place for."""
    windows: PoolWindows
    move: hy.Move
    message: str
    measured: int
    unknown: int
    readings: AdapterReadings


def demand_query(source: AdapterDemandQuery, pool: str, namespace: str,
                 templates: Mapping[str, str]) -> str | Reading:
    """The query sent: the pool's own, or the administrator's template with `$system` and `$entry` as the pool's
    name, confined to the pool's namespace as the compound systems' queries are; or why none can be sent."""
    return source_query(source.query, source.template, templates, pool, pool, namespace)


def adapter_readings(answer: dict[str, Any] | Reading, label: str, adapters: set[str]) -> AdapterReadings:
    """An instant query's JSON answer as per-adapter rates, each series to the adapter its `label` names."""
    if isinstance(answer, Reading):
        return AdapterReadings({}, answer)
    if answer.get("status") != "success":
        return AdapterReadings({}, unknown(Reason.QUERY_FAILED,
                                           f"{answer.get('errorType', 'error')}: {answer.get('error', '')}"))
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        return AdapterReadings({}, unknown(Reason.QUERY_FAILED, f"the query gives a {data.get('resultType')}, not "
                                                                f"an instant vector of one series per adapter"))
    rates: dict[str, float] = {}
    ignored = 0
    for series in data.get("result") or []:
        name = (series.get("metric") or {}).get(label)
        value = _number(series.get("value"))
        if name not in adapters or name in rates or value is None:
            ignored += 1
            continue
        rates[name] = value
    return AdapterReadings(rates, None, ignored)


def _number(value: Any) -> float | None:
    try:
        number = float(value[1])
    except (TypeError, ValueError, IndexError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def starting_rates(placed: Mapping[str, float] | None, priors: Mapping[str, float | None]) -> dict[str, float]:
    """Each adapter's rate before this reading: the one it was placed for, else its prior, else the median of the
    rates known (0 where none is)."""
    known = {name: (placed or {}).get(name, prior) for name, prior in priors.items()}
    given = [rate for rate in known.values() if rate is not None]
    typical = statistics.median(given) if given else 0.0
    return {name: typical if rate is None else rate for name, rate in known.items()}


def decide_rates(placed: Mapping[str, float] | None, priors: Mapping[str, float | None], readings: AdapterReadings,
                 windows: PoolWindows, now: datetime, rules: hy.Windows) -> RatesDecision:
    """The rates to place the pool for after one reading; `placed`: those the placement in force was made for
    (None: none in force), `priors`: each adapter's expectedRequestsPerSecond."""
    before = starting_rates(placed, priors)
    measured = {name: rate for name, rate in readings.rates.items() if name in before}
    unknown_count = len(before) - len(measured)
    if readings.failure is not None:
        held = replace(windows, below_since=None, peak_ratio=None)
        return RatesDecision(before, held, hy.Move.UNKNOWN,
                             f"rates Unknown ({readings.failure.reason}): the placement for "
                             f"{sum(before.values()):g} requests/s holds", 0, len(before), readings)
    floor = FLOOR_SHARE * (sum(before.values()) / len(before)) if before else 0.0
    decisions = {name: hy.decide(_state(before[name], windows), rate, now, rules, floor)
                 for name, rate in measured.items()}
    by_move: dict[hy.Move, list[str]] = {}
    for name, decision in sorted(decisions.items()):
        by_move.setdefault(decision.move, []).append(name)
    rates = dict(before)
    if hy.Move.UP in by_move or hy.Move.DOWN in by_move:
        moved = by_move.get(hy.Move.UP, []) + by_move.get(hy.Move.DOWN, [])
        rates.update({name: round(decisions[name].target_rps, 6) for name in moved})
        up, down = len(by_move.get(hy.Move.UP, [])), len(by_move.get(hy.Move.DOWN, []))
        after = PoolWindows(None, None, now if up else windows.last_scale_up, now if down else windows.last_scale_down,
                            now)
        return RatesDecision(rates, after, hy.Move.UP if up else hy.Move.DOWN,
                             f"re-placed: {up} adapter(s) rose, {down} fell beyond the hysteresis; "
                             f"{sum(before.values()):g} -> {sum(rates.values()):g} requests/s placed for",
                             len(measured), unknown_count, readings)
    waiting = by_move.get(hy.Move.WAIT, [])
    if waiting:
        since = min(s for s in (decisions[n].state.below_since for n in waiting) if s is not None)
        ratio = max(measured[n] / before[n] for n in waiting if before[n] > 0) if any(
            before[n] > 0 for n in waiting) else None
        peak = max(r for r in (windows.peak_ratio, ratio) if r is not None) if ratio is not None else windows.peak_ratio
        return RatesDecision(rates, PoolWindows(since, peak, windows.last_scale_up, windows.last_scale_down, now),
                             hy.Move.WAIT, "adapters read below their placed rate: lowered only after the "
                                           "stabilization window", len(measured), unknown_count, readings)
    return RatesDecision(rates, PoolWindows(None, None, windows.last_scale_up, windows.last_scale_down, now),
                         hy.Move.HOLD, f"readings within {100 * hy.TOLERANCE:g}% of the placed rates",
                         len(measured), unknown_count, readings)


def _state(planned: float, windows: PoolWindows) -> hy.DemandState:
    """One adapter's hysteresis state: its placed rate, the pool's windows (its peak as this adapter's share)."""
    peak = None if windows.peak_ratio is None else windows.peak_ratio * planned
    return hy.DemandState(planned, windows.below_since, peak, windows.last_scale_up, windows.last_scale_down, None,
                          windows.last_reading)


def rates_record(rates: Mapping[str, float]) -> str:
    """The rates placed for, as the placement ConfigMap keeps them (sorted, compact)."""
    return json.dumps(dict(sorted(rates.items())), separators=(",", ":"))


def recorded_rates(text: str | None) -> dict[str, float] | None:
    """The rates a placement ConfigMap records; None: none, or not what tessera wrote."""
    try:
        found = json.loads(text) if text else None
        rates = {str(k): float(v) for k, v in found.items()} if isinstance(found, dict) else None
    except (ValueError, TypeError):
        return None
    return rates if rates is not None and all(math.isfinite(r) and r >= 0 for r in rates.values()) else None


def windows_from_status(status: Mapping[str, Any]) -> PoolWindows:
    """The windows status.demand keeps (a restarted operator resumes them); none where it holds none readable."""
    try:
        held = AdapterDemandStatus.model_validate(status["demand"]) if status.get("demand") else None
    except ValueError:  # not what tessera wrote (an edit): start afresh
        held = None
    if held is None:
        return PoolWindows()
    return PoolWindows(held.below_since, held.window_peak_ratio, held.last_scale_up_time, held.last_scale_down_time,
                       held.observed_time)


def metrics_condition(decision: RatesDecision) -> st.Condition:
    """MetricsAvailable: the reading, or why there was none and that the placement in force holds."""
    failure = decision.readings.failure
    if failure is not None:
        return st.Condition(st.METRICS_AVAILABLE, False, failure.reason,
                            f"{failure.message}; every adapter's rate Unknown: the placement in force keeps serving")
    return st.Condition(st.METRICS_AVAILABLE, True, METRICS_READ,
                        f"{decision.measured} adapter(s) measured, {decision.unknown} Unknown (placed for their "
                        f"last rate); {decision.message}")


METRICS_READ = "DemandRead"


def demand_status(decision: RatesDecision, previous: Mapping[str, Any], now: datetime,
                  rules: hy.Windows) -> dict[str, Any]:
    """status.demand: counts and totals (bounded whatever the pool's size), the windows, the reading shown while
    readings jitter within the tolerance (operator/demand/shown.py: no status write per poll)."""
    held = previous.get("demand") or {}
    before = held.get("observedTime")
    shown = ShownReading(held.get("observedRequestsPerSecond"),
                         datetime.fromisoformat(before.replace("Z", "+00:00")) if before else None)
    observed = None if decision.readings.failure else round(sum(decision.readings.rates.values()), 3)
    shown = shown_reading(shown, observed, now, decision.windows.below_since is not None, rules.max_gap_s / 2)
    windows = decision.windows
    status = AdapterDemandStatus(
        adapters_measured=decision.measured, adapters_unknown=decision.unknown,
        series_ignored=decision.readings.ignored, observed_rps=shown.rps, observed_time=shown.time,
        placed_rps=round(sum(decision.rates.values()), 3), decision=decision.message[:256],
        below_since=windows.below_since, window_peak_ratio=None if windows.peak_ratio is None else round(
            windows.peak_ratio, 4),
        last_scale_up_time=windows.last_scale_up, last_scale_down_time=windows.last_scale_down)
    return status.model_dump(by_alias=True, mode="json", exclude_none=True)
