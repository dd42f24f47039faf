"""What a system's status shows of the demand readings: a reading that moved, not every poll's jitter.

Status is written only when its content changes (docs/operator.md, "Writes
only on change"), and Prometheus answers a slightly different rate at every
poll. So status keeps showing the reading it shows, with the time it was
taken, while new readings stay within the hysteresis tolerance of it (the
same band in which the plan holds: hysteresis.TOLERANCE). A reading beyond
it, a first reading, or one after Unknown, is shown at once.

One exception keeps a restart safe: while a scale-down window is open, the
shown time is refreshed every `refresh_s` (a quarter of the stabilization
window), because a restarted operator resumes the window only from a recent
reading in status (hysteresis, "Seen, not assumed"). With no window open a
restart has nothing to resume, and the shown time may be old.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tessera.operator.demand.hysteresis import TOLERANCE


@dataclass(frozen=True)
class ShownReading:
    rps: float | None
    time: datetime | None


def shown_reading(shown: ShownReading, reading_rps: float | None, now: datetime, window_open: bool,
                  refresh_s: float) -> ShownReading:
    """The reading status shows after this poll's `reading_rps` (None: Unknown, which shows none)."""
    if reading_rps is None:
        return ShownReading(None, None)
    if shown.rps is None or shown.time is None or moved(shown.rps, reading_rps):
        return ShownReading(reading_rps, now)
    if window_open and now - shown.time >= timedelta(seconds=refresh_s):
        return ShownReading(reading_rps, now)
    return shown


def moved(shown_rps: float, reading_rps: float) -> bool:
    """Beyond the tolerance of the shown reading (any change from zero counts)."""
    return abs(reading_rps - shown_rps) > TOLERANCE * shown_rps
