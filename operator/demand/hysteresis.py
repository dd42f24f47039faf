"""When demand may change the plan: pure decisions on an injected clock.

Re-planning GPUs costs far more than adding a pod (a re-partition stops the
node's servers), so demand moves the plan asymmetrically:

- up at once: a reading above the planned demand (beyond TOLERANCE, which
  the planner's 10% headroom absorbs) is planned for at the next reconcile;
- down slowly: only after every reading stayed below the plan for the
  stabilization window, only while the system's pods are all Ready and no
  re-partition happened within its window, and by a bounded step: never
  below the highest reading of the window, nor by more than `step` of the
  planned demand at once; the next step waits a new window;
- never on missing data: an Unknown reading holds the plan and restarts the
  stabilization window, as does a reading taken while a pod is not Ready
  (a stopping pod takes its counters with it, so demand would seem to fall),
  and so do readings further apart than half the window (what happened
  between them was not seen).

The state is plain data that the operator keeps in the system's status, so a
restarted operator resumes its windows rather than starting them again. A
decision that keeps the plan names no reading in its message (the reading is
in `observedRequestsPerSecond`): the message is status, and a status that
moved with every poll's jitter would be written at every poll.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from enum import Enum

TOLERANCE = 0.05
"""Relative change below which the plan holds (within the planner's headroom)."""


class Move(str, Enum):
    HOLD = "Hold"
    UP = "ScaleUp"
    DOWN = "ScaleDown"
    WAIT = "ScaleDownWaiting"
    UNKNOWN = "DemandUnknown"


@dataclass(frozen=True)
class Windows:
    stabilization_s: float = 300.0
    repartition_s: float = 600.0
    step: float = 0.25

    @property
    def max_gap_s(self) -> float:
        """Readings further apart restart the stabilization window: it must be seen, not assumed
        (a long solve or an operator restart leaves no readings in between)."""
        return self.stabilization_s / 2


@dataclass(frozen=True)
class DemandState:
    planned_rps: float
    below_since: datetime | None = None
    window_peak_rps: float | None = None
    last_scale_up: datetime | None = None
    last_scale_down: datetime | None = None
    last_repartition: datetime | None = None
    last_reading: datetime | None = None


@dataclass(frozen=True)
class Decision:
    move: Move
    state: DemandState
    message: str

    @property
    def target_rps(self) -> float:
        return self.state.planned_rps


def decide(state: DemandState, reading_rps: float | None, now: datetime, windows: Windows,
           minimum_rps: float = 0.0, pods_ready: bool = True) -> Decision:
    """What to plan for after one reading (None: Unknown)."""
    planned = state.planned_rps
    if reading_rps is None:
        return Decision(Move.UNKNOWN, _restart_window(state),
                        f"demand Unknown: the plan for {planned:g} requests/s holds")
    seen = state.last_reading is not None and now - state.last_reading <= _seconds(windows.max_gap_s)
    state = replace(state if seen else _restart_window(state), last_reading=now)
    wanted = max(reading_rps, minimum_rps)
    if wanted > planned * (1 + TOLERANCE) or (planned == 0 and wanted > 0):
        return Decision(Move.UP, DemandState(wanted, None, None, now, state.last_scale_down, state.last_repartition,
                                             now),
                        f"scaled up from {planned:g} to {wanted:g} requests/s")
    if wanted >= planned * (1 - TOLERANCE) or planned == 0:
        return Decision(Move.HOLD, _restart_window(state),
                        f"readings within {100 * TOLERANCE:g}% of the plan's {planned:g} requests/s")
    if not pods_ready:
        return Decision(Move.WAIT, _restart_window(state),
                        f"readings below the plan's {planned:g} requests/s, but a pod of the system is not "
                        "Ready: its counters may be missing, so no scale-down")
    since = state.below_since or now
    peak = max(state.window_peak_rps or 0.0, wanted)
    waiting = replace(state, below_since=since, window_peak_rps=peak)
    ready_at = max(since + _seconds(windows.stabilization_s),
                   _after(state.last_scale_down, windows.stabilization_s),
                   _after(state.last_repartition, windows.repartition_s))
    if now < ready_at:
        return Decision(Move.WAIT, waiting,
                        f"readings below the plan's {planned:g} requests/s; scale-down not before "
                        f"{ready_at.strftime('%Y-%m-%dT%H:%M:%SZ')}")
    target = max(peak, planned * (1 - windows.step), minimum_rps)
    if target >= planned * (1 - TOLERANCE):
        return Decision(Move.HOLD, replace(waiting, below_since=now, window_peak_rps=wanted),
                        f"the window's peak {peak:g} requests/s is within the plan's {planned:g}")
    return Decision(Move.DOWN, DemandState(target, now, wanted, state.last_scale_up, now, state.last_repartition,
                                           now),
                    f"scaled down from {planned:g} to {target:g} requests/s (readings at most {peak:g} for the "
                    f"window, steps of at most {100 * windows.step:g}%)")


def repartition_allowed(state: DemandState, now: datetime, windows: Windows) -> bool:
    """At most one re-partition per window."""
    return now >= _after(state.last_repartition, windows.repartition_s)


def repartition_allowed_at(state: DemandState, windows: Windows) -> datetime | None:
    return None if state.last_repartition is None else _after(state.last_repartition, windows.repartition_s)


def record_repartition(state: DemandState, now: datetime) -> DemandState:
    return replace(state, last_repartition=now)


def _restart_window(state: DemandState) -> DemandState:
    return replace(state, below_since=None, window_peak_rps=None)


def _seconds(s: float) -> timedelta:
    return timedelta(seconds=s)


def _after(moment: datetime | None, seconds: float) -> datetime:
    return moment + _seconds(seconds) if moment is not None else datetime.min.replace(tzinfo=timezone.utc)
