"""A system's latency-SLO violation rate, as its frontend counted it, in status and a condition.

The frontend (docs/frontend.md) counts every request by outcome; late,
dropped (doomed early, or refused for overload) and failed requests are the
ones that did not get an answer within the SLO. The rate over the window is
read from Prometheus like demand, and shown the same way: status moves only
when the rate moves by more than a band around what it shows, or crosses
the target, so readings that jitter while nothing changes patch nothing.
Pure: the reading comes in, the shown rate and the condition go out.
"""

from __future__ import annotations

from tessera.operator.api import status as st
from tessera.operator.api.v1alpha1 import ConditionType
from tessera.operator.demand.prometheus import Reading

LATENCY_SLO_MET = ConditionType.LATENCY_SLO_MET
WITHIN_TARGET = st.VIOLATIONS_WITHIN_TARGET
ABOVE_TARGET = st.VIOLATIONS_ABOVE_TARGET
WINDOW = "5m"
BAND = 0.25
"""Status follows a new rate once it differs from the shown one by this share of the target."""

VIOLATIONS_QUERY = (
    f'(sum(rate(tessera_frontend_requests_total{{system="$system",outcome=~"late|dropped|failed"}}[{WINDOW}]))'
    f' or vector(0))'
    f' / sum(rate(tessera_frontend_requests_total{{system="$system",outcome!="invalid"}}[{WINDOW}]))')
"""Violations over every request but malformed ones: no violating series yet is 0, no request at all is NaN."""


def shown_percent(shown: float | None, reading: Reading, target_pct: float) -> float | None:
    """The violation percentage status shows: the reading's when it moved past the band or across the target."""
    if not reading.known:
        return shown
    assert reading.value is not None
    new = round(100 * reading.value, 2)
    if shown is None or (new > target_pct) != (shown > target_pct) or abs(new - shown) >= BAND * target_pct:
        return new
    return shown


def condition(shown: float | None, target_pct: float, previous: dict | None) -> st.Condition | None:
    """LatencySLOMet from the shown rate; with none yet (no request read so far), what status said before."""
    if shown is None:
        if previous is None:
            return None
        return st.Condition(LATENCY_SLO_MET, previous.get("status") == "True", previous.get("reason", WITHIN_TARGET),
                            previous.get("message", ""))
    met = shown <= target_pct
    return st.Condition(LATENCY_SLO_MET, met, WITHIN_TARGET if met else ABOVE_TARGET,
                        f"{shown:g}% of requests late, dropped or failed over the last {WINDOW} at the frontend "
                        f"(target at most {target_pct:g}%)")
